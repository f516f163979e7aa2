//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// child is the command pglease run runs, in a process group of its own.
type child struct {
	pid   int
	done  chan struct{} // closed once the command has exited and been reaped
	state *os.ProcessState
}

// startChild starts argv with env, sharing pglease's standard streams.
func startChild(argv, env []string) (*child, error) {
	c := &child{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// On Linux the child is killed when the thread that started it
		// exits (Pdeathsig): keep this goroutine on its thread until the
		// child has been reaped. The thread exits with the goroutine.
		runtime.LockOSThread()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = env
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = sysProcAttr()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the status is in ProcessState
		c.state = cmd.ProcessState
		close(c.done)
	}()
	if err := <-started; err != nil {
		return nil, startError(argv[0], err)
	}
	return c, nil
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

// status returns the command's exit status as a shell reports it: 128+n
// when it died of signal n.
func (c *child) status() int {
	if ws, ok := c.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignal + int(ws.Signal())
	}
	return c.state.ExitCode()
}

// runChild runs the command with env until it exits, and returns its exit
// status as an error (nil for 0). When ctx ends (a tenure was lost) it
// stops the command: SIGTERM to its process group, SIGKILL after the grace
// period, and returns a *commandStopped.
func (r *runner) runChild(ctx context.Context, env []string) error {
	r.mu.Lock()
	if r.signal != 0 { // a signal came while taking the lease
		r.mu.Unlock()
		return context.Canceled
	}
	if ctx.Err() != nil { // lost while taking an inner step
		r.mu.Unlock()
		return ctx.Err()
	}
	c, err := startChild(r.o.argv, env)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.child = c
	r.mu.Unlock()
	r.log.Info("command started", "pid", c.pid)

	select {
	case <-c.done:
		r.log.Info("command exited", "status", c.status())
		if s := c.status(); s != 0 {
			return &exitError{code: s}
		}
		return nil
	case <-ctx.Done():
	}

	what, cause := r.lossCause()
	fmt.Fprintf(r.a.stderr, "pglease: %s lost (%v): sending SIGTERM to the command, SIGKILL in %s\n", what, cause, r.o.grace)
	c.signalGroup(syscall.SIGTERM)
	grace := time.NewTimer(r.o.grace)
	defer grace.Stop()
	select {
	case <-c.done:
	case <-grace.C:
		fmt.Fprintf(r.a.stderr, "pglease: the command is still running %s after SIGTERM: sending SIGKILL\n", r.o.grace)
		c.signalGroup(syscall.SIGKILL)
		<-c.done
	}
	// Whatever the command left running in its process group goes too.
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	return &commandStopped{status: c.status()}
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
	}
	return sig.String()
}
