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

// keeperProc is the keeper process (see keeper) of one command, seen from
// pglease run.
type keeperProc struct {
	r     *runner
	cmd   *exec.Cmd
	ctl   *os.File // write end of the control pipe
	child *child
	cg    *cgroup // the command's cgroup, if the keeper made one
	why   string  // why everything stopped (a keeper's why, or keeperDied), once child.done
	// stopBegun is set once the keeper has begun stopping everything.
	stopBegun atomic.Bool
}

// keeperDied is keeperProc.why when the keeper died before reporting.
const keeperDied = "keeper died"

// runChild runs the command with env under a keeper until it and everything
// it started are dead, and returns its exit status as an error (nil for 0).
// When ctx ends (a tenure was lost), or only --grace is left before the
// local deadline, the keeper stops them all: SIGTERM, SIGKILL after the
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
	k, err := r.startKeeper(env, deadline)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	r.child = k.child
	r.mu.Unlock()
	r.log.Info("command started", "pid", k.child.pid, "cgroup", k.cg != nil)

	lost := ctx.Done()
	for {
		select {
		case <-k.child.done:
			return k.result()
		case <-r.moved:
			k.send("deadline %d", monoDeadline(r.deadline()))
		case <-lost:
			lost = nil
			if !k.stopBegun.Load() { // else it said why already
				what, cause := r.lossCause()
				fmt.Fprintf(r.a.stderr, "pglease: %s lost (%v): sending SIGTERM to the command and everything it started, SIGKILL in %s\n",
					what, causeText(cause), killIn(r.o.grace, r.deadline()))
			}
			k.send("stop")
		}
	}
}

// killIn is when SIGKILL comes after a SIGTERM sent now: after grace, but no
// later than the deadline.
func killIn(grace time.Duration, deadline time.Time) time.Duration {
	return max(min(grace, time.Until(deadline)), 0).Round(time.Millisecond)
}

// monoDeadline converts deadline to the keeper's clock (monoNow). The clock
// is read first, so the result errs early.
func monoDeadline(deadline time.Time) int64 {
	now := monoNow()
	return now + int64(time.Until(deadline))
}

// startKeeper starts the keeper of the command and waits until it has
// started the command (or failed to).
func (r *runner) startKeeper(env []string, deadline time.Time) (*keeperProc, error) {
	// Should the keeper die, what it leaves behind comes to pglease.
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
	args := append([]string{"pglease", keeperArg, strconv.FormatInt(int64(r.o.grace), 10),
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
		return nil, failf("run: start the keeper of the command: %v", err)
	}
	k := &keeperProc{r: r, cmd: cmd, ctl: ctlW, child: &child{done: make(chan struct{})}}
	lines := bufio.NewScanner(repR)
	first := ""
	if lines.Scan() {
		first = lines.Text()
	}
	verb, rest, _ := strings.Cut(first, " ")
	switch verb {
	case "started":
		pid, dir, _ := strings.Cut(rest, " ")
		k.child.pid, _ = strconv.Atoi(pid)
		k.cg = openCgroup(dir)
	case "error":
		code, msg, _ := strings.Cut(rest, " ")
		n, _ := strconv.Atoi(code)
		k.drain(lines, repR)
		return nil, &exitError{code: n, msg: msg}
	default:
		k.drain(lines, repR)
		return nil, failf("run: the keeper of the command failed to start it (%s)", k.cmd.ProcessState)
	}
	go k.watch(lines, repR)
	return k, nil
}

// drain waits for a keeper that failed before starting the command.
func (k *keeperProc) drain(lines *bufio.Scanner, rep *os.File) {
	for lines.Scan() {
	}
	rep.Close()
	k.ctl.Close()
	_ = k.cmd.Wait()
}

// send sends one control line to the keeper.
func (k *keeperProc) send(format string, args ...any) {
	_, _ = fmt.Fprintf(k.ctl, format+"\n", args...)
}

// watch reads the keeper's reports until it exits. Should it die without
// reporting the end, pglease kills what it left: as a subreaper, pglease
// inherited the orphans.
func (k *keeperProc) watch(lines *bufio.Scanner, rep *os.File) {
	defer close(k.child.done)
	defer rep.Close()
	defer k.ctl.Close()
	for lines.Scan() {
		verb, rest, _ := strings.Cut(lines.Text(), " ")
		f := strings.Fields(rest)
		switch {
		case verb == "stopping" && len(f) == 3:
			k.stopBegun.Store(true)
			killIn, _ := strconv.ParseInt(f[1], 10, 64)
			n, _ := strconv.Atoi(f[2])
			k.stopping(f[0], time.Duration(killIn).Round(time.Millisecond), n)
		case verb == "killing" && len(f) == 1 && f[0] != "0":
			fmt.Fprintf(k.r.a.stderr, "pglease: %s processes still running: sending SIGKILL\n", f[0])
		case verb == "done" && len(f) == 2:
			ws, _ := strconv.Atoi(f[0])
			k.child.code = statusCode(syscall.WaitStatus(ws))
			k.why = f[1]
		}
	}
	_ = k.cmd.Wait()
	if k.why == "" {
		k.why = keeperDied
		killAll(os.Getpid(), k.cg, func(int, syscall.WaitStatus) {})
		if k.cg != nil {
			k.cg.remove()
		}
	}
}

// stopping says why the keeper started stopping everything.
func (k *keeperProc) stopping(why string, killIn time.Duration, n int) {
	r := k.r
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
func (k *keeperProc) result() error {
	switch k.why {
	case whyExited:
		k.r.log.Info("command exited", "status", k.child.code)
		if k.child.code != 0 {
			return &exitError{code: k.child.code}
		}
		return nil
	case keeperDied:
		return failf("run: the keeper of the command died (%s): killed the command and everything it started", k.cmd.ProcessState)
	}
	return &commandStopped{status: k.child.code, why: k.why}
}
