package supervisor

import "fmt"

// EventKind says what happened.
type EventKind int

const (
	// EventAcquired: this supervisor took the lease (or slot) and starts
	// its workload.
	EventAcquired EventKind = iota + 1
	// EventLost: the lease was lost while held (renewal refused, or the
	// local deadline passed); the workload was cancelled. Err says why.
	EventLost
	// EventReleased: this supervisor released the lease after its workload
	// returned.
	EventReleased
	// EventLeaderSeen: while standing by, this supervisor saw a new holder
	// (Holder, Fence) of the lease, or a full slot scope.
	EventLeaderSeen
	// EventStuck: the workload has not returned StopTimeout after its
	// context was cancelled. Err is the cancellation cause.
	EventStuck
	// EventHardStop: the workload has not returned Config.HardStop after
	// the tenure ended; the process exits with HardStopExitCode right
	// after this event, which Config.Observer receives from a timer's
	// goroutine, not Run's. Err is the cancellation cause.
	EventHardStop
	// EventReleaseRequested: an operator asked this supervisor, while it
	// leads, to hand over (pgleaseadmin.RequestRelease). The workload's
	// context is cancelled with cause ErrReleaseRequested; once the
	// workload returned, the lease is released (EventReleased) and the
	// supervisor stands by again after RestartDelay (whatever OnExit says),
	// by when the waiting standbys, notified of the release, have taken
	// over, or the preferred holder's reservation keeps it out.
	// Config.Observer receives it from a goroutine of Run's, not Run's own.
	EventReleaseRequested
)

// HardStopExitCode is the exit status of a process stopped by
// Config.HardStop (EX_SOFTWARE).
const HardStopExitCode = 70

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventLost:
		return "lost"
	case EventReleased:
		return "released"
	case EventLeaderSeen:
		return "leader-seen"
	case EventStuck:
		return "stuck"
	case EventHardStop:
		return "hard-stop"
	case EventReleaseRequested:
		return "release-requested"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is passed to Config.Observer.
type Event struct {
	// Kind is what happened.
	Kind EventKind
	// Name is the lease name, or the slot scope.
	Name string
	// Slot is the slot number in the slot variant, else 0.
	Slot int
	// Holder and Fence identify the tenure: this supervisor's for
	// Acquired, Lost, Released, Stuck and HardStop, the other holder's for
	// LeaderSeen (empty and 0 when a slot scope is full).
	Holder string
	Fence  int64
	// Err is the cause for Lost, Stuck and HardStop.
	Err error
	// Value is the holder's value (docs/leadership.md): this supervisor's
	// Config.Value, or for LeaderSeen the value the leader published.
	Value string
}
