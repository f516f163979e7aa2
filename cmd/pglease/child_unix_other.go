//go:build unix && !linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// runReaper is never asked for here: only Linux runs a reaper.
func runReaper([]string) (int, bool) { return 0, false }

// startChild starts argv with env in a process group of its own, sharing
// pglease's standard streams.
func startChild(argv, env []string) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, startError(argv[0], err)
	}
	c := &child{pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait() // the status is in ProcessState
		c.code = statusCode(cmd.ProcessState.Sys().(syscall.WaitStatus))
		close(c.done)
	}()
	return c, nil
}

// runChild runs the command with env until it exits, and returns its exit
// status as an error (nil for 0). Without Linux's reaper, pglease itself
// stops the command's process group: SIGTERM when ctx ends (a tenure was
// lost) or when only --grace is left before the local deadline, SIGKILL
// after the grace period but by the deadline; it then returns a
// *commandStopped. Processes that left the group are not reached, and
// nothing stops the command if pglease dies.
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

	term := time.NewTimer(time.Until(r.deadline()) - r.o.grace)
	defer term.Stop()
	lost := ctx.Done()
	why := ""
	for why == "" {
		select {
		case <-c.done:
			r.log.Info("command exited", "status", c.code)
			if c.code != 0 {
				return &exitError{code: c.code}
			}
			return nil
		case <-r.moved:
			term.Reset(time.Until(r.deadline()) - r.o.grace)
		case <-term.C:
			what, _ := r.nearest()
			fmt.Fprintf(r.a.stderr, "pglease: %s: no renewal succeeded and only --grace (%s) is left before the local deadline: "+
				"sending SIGTERM to the command, SIGKILL in %s\n", what, r.o.grace, killIn(r.o.grace, r.deadline()))
			why = whyDeadline
		case <-lost:
			what, cause := r.lossCause()
			fmt.Fprintf(r.a.stderr, "pglease: %s lost (%v): sending SIGTERM to the command, SIGKILL in %s\n",
				what, causeText(cause), killIn(r.o.grace, r.deadline()))
			why = whyLost
		}
	}
	c.signalGroup(syscall.SIGTERM)
	kill := time.NewTimer(killIn(r.o.grace, r.deadline()))
	defer kill.Stop()
	select {
	case <-c.done:
	case <-kill.C:
		fmt.Fprintf(r.a.stderr, "pglease: the command is still running: sending SIGKILL\n")
		c.signalGroup(syscall.SIGKILL)
		<-c.done
	}
	// Whatever the command left running in its process group goes too.
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	return &commandStopped{status: c.code, why: why}
}

// killIn is when SIGKILL comes after a SIGTERM sent now: after grace, but no
// later than the deadline.
func killIn(grace time.Duration, deadline time.Time) time.Duration {
	return max(min(grace, time.Until(deadline)), 0).Round(time.Millisecond)
}
