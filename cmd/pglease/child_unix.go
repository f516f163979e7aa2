//go:build unix

package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// child is the command pglease run runs, in a process group of its own.
type child struct {
	pid  int
	done chan struct{} // closed once the command has exited and been reaped
	code int           // its exit status as a shell reports it, once done
}

// statusCode returns a wait status as a shell reports it: 128+n when the
// process died of signal n.
func statusCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// startError explains why the command could not start, with the exit codes
// of a shell: 127 not found, 126 not executable.
func startError(name string, err error) error {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return &exitError{code: exitNotFound, msg: fmt.Sprintf("%s: command not found", name)}
	}
	return &exitError{code: exitNoExec, msg: fmt.Sprintf("cannot execute %s: %v", name, err)}
}

// exited reports whether the command has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// signalGroup sends sig to the command's process group, or to the command
// alone if it left the group.
func (c *child) signalGroup(sig syscall.Signal) {
	if err := syscall.Kill(-c.pid, sig); errors.Is(err, syscall.ESRCH) && !c.exited() {
		_ = syscall.Kill(c.pid, sig)
	}
}

// handleSignals forwards SIGINT, SIGTERM and SIGHUP to the command once it
// runs; before that, the first one stops the waiting. Call stop when done.
func (r *runner) handleSignals() (stop func()) {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range ch {
			sig, ok := s.(syscall.Signal)
			if !ok {
				continue
			}
			r.mu.Lock()
			switch {
			case r.child != nil:
				if !r.child.exited() {
					r.log.Info("forwarding signal to the command", "signal", signalName(sig))
					r.child.signalGroup(sig)
				}
			case r.signal == 0:
				r.signal = sig
				r.cancelSig()
			}
			r.mu.Unlock()
		}
	}()
	return func() {
		signal.Stop(ch)
		close(ch)
		<-done
	}
}

// signalName returns the conventional name of sig, such as SIGTERM.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	}
	return sig.String()
}
