package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// reaperArg, as pglease's first argument, makes it the reaper of a command
// for pglease run (its parent) rather than the command line tool:
//
//	pglease --pglease-reaper GRACE_NS DEADLINE_NS -- COMMAND [ARGS...]
//
// with the control pipe on fd 3 and the report pipe on fd 4. It is not for
// people to run.
const reaperArg = "--pglease-reaper"

// Fds of the reaper's pipes.
const (
	reaperCtlFd    = 3 // pglease -> reaper: deadline NS | stop
	reaperReportFd = 4 // reaper -> pglease: started PID CGROUP | error CODE MSG | stopping WHY KILL_IN_NS N | done STATUS WHY
)

// runReaper runs the reaper when args (pglease's arguments) ask for it, and
// returns its exit code and true; otherwise 0 and false.
func runReaper(args []string) (int, bool) {
	if len(args) == 0 || args[0] != reaperArg {
		return 0, false
	}
	rp, err := newReaper(args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "pglease: %v (%s is for pglease run's own use)\n", err, reaperArg)
		return exitUsage, true
	}
	return rp.run(), true
}

// reaper is the supervising process that pglease run starts between
// itself and the command. It stays with the command whatever happens to
// pglease, and makes sure that nothing the command started outlives the
// tenure:
//   - it is the subreaper of the command's tree, so that orphans (double
//     forks, setsid'd daemons) stay below it and are found by /proc;
//   - it puts the command in a cgroup of its own where one can be made;
//   - it enforces the local deadline itself: SIGTERM to every process below
//     it when only --grace is left, SIGKILL at the deadline, even if pglease
//     is stopped or hangs;
//   - it stops them all at once when pglease dies (its control pipe closes);
//   - the command gets PDEATHSIG SIGKILL, should the reaper itself die.
type reaper struct {
	grace    time.Duration
	deadline int64 // monoNow() by which every process must be dead
	argv     []string
	ctl      *os.File
	report   *os.File
	cg       *cgroup

	cmdPid   int
	status   syscall.WaitStatus
	exited   bool   // the command exited
	stopping string // why the reaper is stopping everything, or ""
}

func newReaper(args []string) (*reaper, error) {
	if len(args) < 4 || args[2] != "--" {
		return nil, errors.New("reaper: want GRACE_NS DEADLINE_NS -- COMMAND [ARGS...]")
	}
	grace, err1 := strconv.ParseInt(args[0], 10, 64)
	deadline, err2 := strconv.ParseInt(args[1], 10, 64)
	if err1 != nil || err2 != nil || grace < 0 {
		return nil, fmt.Errorf("reaper: bad grace %q or deadline %q", args[0], args[1])
	}
	// The pipes must not reach the command.
	for _, fd := range []int{reaperCtlFd, reaperReportFd} {
		if _, err := fcntl(fd, syscall.F_SETFD, syscall.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("reaper: fd %d: %w", fd, err)
		}
	}
	return &reaper{
		grace:    time.Duration(grace),
		deadline: deadline,
		argv:     args[3:],
		ctl:      os.NewFile(reaperCtlFd, "control"),
		report:   os.NewFile(reaperReportFd, "report"),
	}, nil
}

// fcntl calls fcntl(2).
func fcntl(fd, cmd, arg int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(cmd), uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

// say sends one report line to pglease; if pglease is gone, nobody reads it.
func (rp *reaper) say(format string, args ...any) {
	_, _ = fmt.Fprintf(rp.report, format+"\n", args...)
}

// run starts the command and supervises it until it and everything it
// started are dead, and returns the reaper's exit code (0: reported).
func (rp *reaper) run() int {
	// PDEATHSIG follows the thread that forked: keep this one.
	runtime.LockOSThread()
	// Terminal signals are pglease's to forward; caught signals reset to
	// their default in the command.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	if err := becomeSubreaper(); err != nil {
		rp.say("error %d %s", exitFailure, oneLine(err.Error()))
		return exitFailure
	}
	rp.cg = newCgroup()
	if err := rp.start(); err != nil {
		code, msg := exitFailure, err.Error()
		if e, ok := errors.AsType[*exitError](err); ok {
			code, msg = e.code, e.msg
		}
		rp.say("error %d %s", code, oneLine(msg))
		rp.finish()
		return 0
	}
	cgDir := "-"
	if rp.cg != nil {
		cgDir = rp.cg.dir
	}
	rp.say("started %d %s", rp.cmdPid, cgDir)

	msgs := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(rp.ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
		close(msgs)
	}()

	term := time.NewTimer(rp.untilTerm())
	defer term.Stop()
	var kill <-chan time.Time
	for {
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				msgs = nil
				if rp.stopping == "" {
					fmt.Fprintf(os.Stderr, "pglease: pglease run (pid %d) is gone and nobody renews the tenure: "+
						"stopping the command and everything it started\n", os.Getppid())
				}
				kill = rp.stop(whyOrphaned, kill)
			case m == "stop":
				kill = rp.stop(whyLost, kill)
			case strings.HasPrefix(m, "deadline "):
				if d, err := strconv.ParseInt(strings.TrimPrefix(m, "deadline "), 10, 64); err == nil && rp.stopping == "" {
					rp.deadline = d
					term.Reset(rp.untilTerm())
				}
			}
		case <-chld:
			if rp.reap() {
				rp.finish()
				return 0
			}
			if rp.exited && rp.stopping == "" {
				kill = rp.stop(whyExited, kill)
			}
		case <-term.C:
			kill = rp.stop(whyDeadline, kill)
		case <-kill:
			if rp.cg != nil {
				rp.cg.kill() // all at once, before walking /proc
			}
			rp.say("killing %d", signalAll(os.Getpid(), rp.cg, syscall.SIGKILL))
			killAll(os.Getpid(), rp.cg, rp.reaped)
			rp.finish()
			return 0
		}
	}
}

// start starts the command in a process group of its own, in the reaper's
// cgroup if it has one.
func (rp *reaper) start() error {
	path, err := exec.LookPath(rp.argv[0])
	if err != nil {
		return startError(rp.argv[0], err)
	}
	attr := func(cg *cgroup) *os.ProcAttr {
		sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if cg != nil {
			sys.UseCgroupFD, sys.CgroupFD = true, cg.fd
		}
		return &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: sys}
	}
	p, err := os.StartProcess(path, rp.argv, attr(rp.cg))
	if err != nil && rp.cg != nil {
		// clone3 into a cgroup needs Linux 5.7 and the right to move
		// processes there: go on without it.
		rp.cg.remove()
		rp.cg = nil
		p, err = os.StartProcess(path, rp.argv, attr(nil))
	}
	if err != nil {
		return startError(rp.argv[0], err)
	}
	rp.cmdPid = p.Pid
	return nil
}

// untilTerm is the time left before SIGTERM is due: --grace before the
// deadline, so that SIGKILL at the deadline still lands before the tenure
// ends on the server.
func (rp *reaper) untilTerm() time.Duration {
	return time.Duration(rp.deadline-monoNow()) - rp.grace
}

// stop starts stopping everything, for why: SIGTERM to every process below
// the reaper now, SIGKILL after --grace but no later than the deadline. It
// returns the channel of the kill timer.
func (rp *reaper) stop(why string, kill <-chan time.Time) <-chan time.Time {
	if rp.stopping != "" {
		return kill
	}
	rp.stopping = why
	wait := min(rp.grace, time.Duration(rp.deadline-monoNow()))
	n := signalAll(os.Getpid(), rp.cg, syscall.SIGTERM)
	if rp.exited && n == 0 {
		// Nothing was left running. A timer of 0 reaps at once.
		wait = 0
	}
	rp.say("stopping %s %d %d", why, max(wait, 0).Nanoseconds(), n)
	return time.After(max(wait, 0))
}

// reaped records a child the reaper reaped.
func (rp *reaper) reaped(pid int, ws syscall.WaitStatus) {
	if pid == rp.cmdPid {
		rp.status, rp.exited = ws, true
	}
}

// reap reaps every child that has exited, and reports whether the reaper
// has no child left (so none of the processes the command started lives).
func (rp *reaper) reap() bool {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.ECHILD):
			return true
		case errors.Is(err, syscall.EINTR):
		case err != nil, pid == 0:
			return false
		default:
			rp.reaped(pid, ws)
		}
	}
}

// finish reports the command's status once everything is dead, and removes
// the cgroup.
func (rp *reaper) finish() {
	if rp.cg != nil {
		rp.cg.remove()
	}
	if rp.cmdPid == 0 {
		return
	}
	rp.say("done %d %s", int(rp.status), cmp.Or(rp.stopping, whyExited))
}
