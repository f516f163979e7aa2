package supervisor

// SetWaitingHook makes s call f each time it has been refused while
// standing by and is about to wait, listening for releases. Set it before
// Run.
func SetWaitingHook(s *Supervisor, f func()) { s.waiting = f }

// SetExitHook makes s call f instead of os.Exit when Config.HardStop
// fires. Set it before Run.
func SetExitHook(s *Supervisor, f func(code int)) { s.exit = f }
