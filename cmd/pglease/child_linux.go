package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// reaperProc is the reaper process (see reaper) of one command, seen from
// pglease run.
type reaperProc struct {
	r     *runner
	cmd   *exec.Cmd
	ctl   *os.File // write end of the control pipe
	child *child
	cg    *cgroup // the command's cgroup, if the reaper made one
	why   string  // why everything stopped (a reaper's why, or reaperDied), once child.done
	// stopBegun is set once the reaper has begun stopping everything.
	stopBegun atomic.Bool
}

// reaperDied is reaperProc.why when the reaper died before reporting.
const reaperDied = "reaper died"

// runChild runs the command with env under a reaper until it and everything
// it started are dead, and returns its exit status as an error (nil for 0).
// When ctx ends (a tenure was lost), or only --grace is left before the
// local deadline, the reaper stops them all: SIGTERM, SIGKILL after the
// grace period but by the deadline; runChild then returns a
// *commandStopped.
func (r *runner) runChild(ctx context.Context, env []string) error {
	deadline := r.deadline()
	r.mu.Lock()
	if r.signal != 0 { // a signal came while taking the lease
		r.mu.Unlock()
		return context.Canceled
	}
	if ctx.Err() != nil { // lost while taking an inner step
		r.mu.Unlock()
		return ctx.Err()
	}
	rp, err := r.startReaper(env, deadline)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.child = rp.child
	r.mu.Unlock()
	r.log.Info("command started", "pid", rp.child.pid, "cgroup", rp.cg != nil)

	lost := ctx.Done()
	for {
		select {
		case <-rp.child.done:
			return rp.result()
		case <-r.moved:
			rp.send("deadline %d", monoDeadline(r.deadline()))
		case <-lost:
			lost = nil
			if !rp.stopBegun.Load() { // else it said why already
				what, cause := r.lossCause()
				fmt.Fprintf(r.a.stderr, "pglease: %s lost (%v): sending SIGTERM to the command and everything it started, SIGKILL in %s\n",
					what, causeText(cause), killIn(r.o.grace, r.deadline()))
			}
			rp.send("stop")
		}
	}
}

// killIn is when SIGKILL comes after a SIGTERM sent now: after grace, but no
// later than the deadline.
func killIn(grace time.Duration, deadline time.Time) time.Duration {
	return max(min(grace, time.Until(deadline)), 0).Round(time.Millisecond)
}

// monoDeadline converts deadline to the reaper's clock (monoNow). The clock
// is read first, so the result errs early.
func monoDeadline(deadline time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(deadline))
}

// startReaper starts the reaper of the command and waits until it has
// started the command (or failed to).
func (r *runner) startReaper(env []string, deadline time.Time) (*reaperProc, error) {
	// Should the reaper die, what it leaves behind comes to pglease.
	if err := becomeSubreaper(); err != nil {
		return nil, failf("run: %v", err)
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		return nil, failf("run: %v", err)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		ctlR.Close()
		ctlW.Close()
		return nil, failf("run: %v", err)
	}
	args := append([]string{"pglease", reaperArg, strconv.FormatInt(int64(r.o.grace), 10),
		strconv.FormatInt(monoDeadline(deadline), 10), "--"}, r.o.argv...)
	cmd := &exec.Cmd{
		// This very binary, even if the file was replaced since.
		Path:        "/proc/self/exe",
		Args:        args,
		Env:         env,
		Stdin:       os.Stdin,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		ExtraFiles:  []*os.File{ctlR, repW}, // fds 3 and 4
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	ctlR.Close()
	repW.Close()
	if err != nil {
		ctlW.Close()
		repR.Close()
		return nil, failf("run: start the reaper of the command: %v", err)
	}
	rp := &reaperProc{r: r, cmd: cmd, ctl: ctlW, child: &child{done: make(chan struct{})}}
	lines := bufio.NewScanner(repR)
	first := ""
	if lines.Scan() {
		first = lines.Text()
	}
	verb, rest, _ := strings.Cut(first, " ")
	switch verb {
	case "started":
		pid, dir, _ := strings.Cut(rest, " ")
		rp.child.pid, _ = strconv.Atoi(pid)
		rp.cg = openCgroup(dir)
	case "error":
		code, msg, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(code)
		rp.drain(lines, repR)
		return nil, &exitError{code: n, msg: msg}
	default:
		rp.drain(lines, repR)
		return nil, failf("run: the reaper of the command failed to start it (%s)", rp.cmd.ProcessState)
	}
	go rp.watch(lines, repR)
	return rp, nil
}

// drain waits for a reaper that failed before starting the command.
func (rp *reaperProc) drain(lines *bufio.Scanner, rep *os.File) {
	for lines.Scan() {
	}
	rep.Close()
	rp.ctl.Close()
	_ = rp.cmd.Wait()
}

// send sends one control line to the reaper.
func (rp *reaperProc) send(format string, args ...any) {
	_, _ = fmt.Fprintf(rp.ctl, format+"\n", args...)
}

// watch reads the reaper's reports until it exits. Should it die without
// reporting the end, pglease kills what it left: as a subreaper, pglease
// inherited the orphans.
func (rp *reaperProc) watch(lines *bufio.Scanner, rep *os.File) {
	defer close(rp.child.done)
	defer rep.Close()
	defer rp.ctl.Close()
	for lines.Scan() {
		verb, rest, _ := strings.Cut(lines.Text(), " ")
		f := strings.Fields(rest)
		switch {
		case verb == "stopping" && len(f) == 3:
			rp.stopBegun.Store(true)
			killIn, _ := strconv.ParseInt(f[1], 10, 64)
			n, _ := strconv.Atoi(f[2])
			rp.stopping(f[0], time.Duration(killIn).Round(time.Millisecond), n)
		case verb == "killing" && len(f) == 1 && f[0] != "0":
			fmt.Fprintf(rp.r.a.stderr, "pglease: %s processes still running: sending SIGKILL\n", f[0])
		case verb == "done" && len(f) == 2:
			ws, _ := strconv.Atoi(f[0])
			rp.child.code = statusCode(syscall.WaitStatus(ws))
			rp.why = f[1]
		}
	}
	_ = rp.cmd.Wait()
	if rp.why == "" {
		rp.why = reaperDied
		killAll(os.Getpid(), rp.cg, func(int, syscall.WaitStatus) {})
		if rp.cg != nil {
			rp.cg.remove()
		}
	}
}

// stopping says why the reaper started stopping everything.
func (rp *reaperProc) stopping(why string, killIn time.Duration, n int) {
	r := rp.r
	switch why {
	case whyDeadline:
		what, _ := r.nearest()
		fmt.Fprintf(r.a.stderr, "pglease: %s: no renewal succeeded and only --grace (%s) is left before the local deadline: "+
			"sending SIGTERM to the command and everything it started, SIGKILL in %s\n", what, r.o.grace, killIn)
	case whyExited:
		if n > 0 {
			fmt.Fprintf(r.a.stderr, "pglease: the command exited and left %d processes running: sending them SIGTERM, SIGKILL in %s\n", n, killIn)
		}
	}
}

// result is the command's outcome once everything has stopped.
func (rp *reaperProc) result() error {
	switch rp.why {
	case whyExited:
		rp.r.log.Info("command exited", "status", rp.child.code)
		if rp.child.code != 0 {
			return &exitError{code: rp.child.code}
		}
		return nil
	case reaperDied:
		return failf("run: the reaper of the command died (%s): killed the command and everything it started", rp.cmd.ProcessState)
	}
	return &commandStopped{status: rp.child.code, why: rp.why}
}
