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

// keeperArg, as pglease's first argument, makes it the keeper of a command
// for pglease run (its parent) rather than the command line tool:
//
//	pglease --pglease-keeper GRACE_NS DEADLINE_NS -- COMMAND [ARGS...]
//
// with the control pipe on fd 3 and the report pipe on fd 4. It is not for
// people to run.
const keeperArg = "--pglease-keeper"

// Fds of the keeper's pipes.
const (
	keeperCtlFd    = 3 // pglease -> keeper: deadline NS | stop
	keeperReportFd = 4 // keeper -> pglease: started PID CGROUP | error CODE MSG | stopping WHY KILL_IN_NS N | done STATUS WHY
)

// runKeeper runs the keeper when args (pglease's arguments) ask for it, and
// returns its exit code and true; otherwise 0 and false.
func runKeeper(args []string) (int, bool) {
	if len(args) == 0 || args[0] != keeperArg {
		return 0, false
	}
	k, err := newKeeper(args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "pglease: %v (%s is for pglease run's own use)\n", err, keeperArg)
		return exitUsage, true
	}
	return k.run(), true
}

// keeper is the supervising process that pglease run starts between
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
//   - the command gets PDEATHSIG SIGKILL, should the keeper itself die.
type keeper struct {
	grace    time.Duration
	deadline int64 // monoNow() by which every process must be dead
	argv     []string
	ctl      *os.File
	report   *os.File
	cg       *cgroup

	cmdPid   int
	status   syscall.WaitStatus
	exited   bool   // the command exited
	stopping string // why the keeper is stopping everything, or ""
}

func newKeeper(args []string) (*keeper, error) {
	if len(args) < 4 || args[2] != "--" {
		return nil, errors.New("keeper: want GRACE_NS DEADLINE_NS -- COMMAND [ARGS...]")
	}
	grace, err1 := strconv.ParseInt(args[0], 10, 64)
	deadline, err2 := strconv.ParseInt(args[1], 10, 64)
	if err1 != nil || err2 != nil || grace < 0 {
		return nil, fmt.Errorf("keeper: bad grace %q or deadline %q", args[0], args[1])
	}
	// The pipes must not reach the command.
	for _, fd := range []int{keeperCtlFd, keeperReportFd} {
		if _, err := fcntl(fd, syscall.F_SETFD, syscall.FD_CLOEXEC); err != nil {
			return nil, fmt.Errorf("keeper: fd %d: %w", fd, err)
		}
	}
	return &keeper{
		grace:    time.Duration(grace),
		deadline: deadline,
		argv:     args[3:],
		ctl:      os.NewFile(keeperCtlFd, "control"),
		report:   os.NewFile(keeperReportFd, "report"),
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
func (k *keeper) say(format string, args ...any) {
	_, _ = fmt.Fprintf(k.report, format+"\n", args...)
}

// run starts the command and supervises it until it and everything it
// started are dead, and returns the keeper's exit code (0: reported).
func (k *keeper) run() int {
	// PDEATHSIG follows the thread that forked: keep this one.
	runtime.LockOSThread()
	// Terminal signals are pglease's to forward; caught signals reset to
	// their default in the command.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	if err := becomeSubreaper(); err != nil {
		k.say("error %d %s", exitFailure, oneLine(err.Error()))
		return exitFailure
	}
	k.cg = newCgroup()
	if err := k.start(); err != nil {
		code, msg := exitFailure, err.Error()
		if e, ok := errors.AsType[*exitError](err); ok {
			code, msg = e.code, e.msg
		}
		k.say("error %d %s", code, oneLine(msg))
		k.finish()
		return 0
	}
	cgDir := "-"
	if k.cg != nil {
		cgDir = k.cg.dir
	}
	k.say("started %d %s", k.cmdPid, cgDir)

	msgs := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(k.ctl)
		for sc.Scan() {
			msgs <- sc.Text()
		}
		close(msgs)
	}()

	term := time.NewTimer(k.untilTerm())
	defer term.Stop()
	var kill <-chan time.Time
	for {
		select {
		case m, ok := <-msgs:
			switch {
			case !ok:
				msgs = nil
				if k.stopping == "" {
					fmt.Fprintf(os.Stderr, "pglease: pglease run (pid %d) is gone and nobody renews the tenure: "+
						"stopping the command and everything it started\n", os.Getppid())
				}
				kill = k.stop(whyOrphaned, kill)
			case m == "stop":
				kill = k.stop(whyLost, kill)
			case strings.HasPrefix(m, "deadline "):
				if d, err := strconv.ParseInt(strings.TrimPrefix(m, "deadline "), 10, 64); err == nil && k.stopping == "" {
					k.deadline = d
					term.Reset(k.untilTerm())
				}
			}
		case <-chld:
			if k.reap() {
				k.finish()
				return 0
			}
			if k.exited && k.stopping == "" {
				kill = k.stop(whyExited, kill)
			}
		case <-term.C:
			kill = k.stop(whyDeadline, kill)
		case <-kill:
			if k.cg != nil {
				k.cg.kill() // all at once, before walking /proc
			}
			k.say("killing %d", signalAll(os.Getpid(), k.cg, syscall.SIGKILL))
			killAll(os.Getpid(), k.cg, k.reaped)
			k.finish()
			return 0
		}
	}
}

// start starts the command in a process group of its own, in the keeper's
// cgroup if it has one.
func (k *keeper) start() error {
	path, err := exec.LookPath(k.argv[0])
	if err != nil {
		return startError(k.argv[0], err)
	}
	attr := func(cg *cgroup) *os.ProcAttr {
		sys := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if cg != nil {
			sys.UseCgroupFD, sys.CgroupFD = true, cg.fd
		}
		return &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}, Sys: sys}
	}
	p, err := os.StartProcess(path, k.argv, attr(k.cg))
	if err != nil && k.cg != nil {
		// clone3 into a cgroup needs Linux 5.7 and the right to move
		// processes there: go on without it.
		k.cg.remove()
		k.cg = nil
		p, err = os.StartProcess(path, k.argv, attr(nil))
	}
	if err != nil {
		return startError(k.argv[0], err)
	}
	k.cmdPid = p.Pid
	return nil
}

// untilTerm is the time left before SIGTERM is due: --grace before the
// deadline, so that SIGKILL at the deadline still lands before the tenure
// ends on the server.
func (k *keeper) untilTerm() time.Duration {
	return time.Duration(k.deadline-monoNow()) - k.grace
}

// stop starts stopping everything, for why: SIGTERM to every process below
// the keeper now, SIGKILL after --grace but no later than the deadline. It
// returns the channel of the kill timer.
func (k *keeper) stop(why string, kill <-chan time.Time) <-chan time.Time {
	if k.stopping != "" {
		return kill
	}
	k.stopping = why
	wait := min(k.grace, time.Duration(k.deadline-monoNow()))
	n := signalAll(os.Getpid(), k.cg, syscall.SIGTERM)
	if k.exited && n == 0 {
		// Nothing was left running. A timer of 0 reaps at once.
		wait = 0
	}
	k.say("stopping %s %d %d", why, max(wait, 0).Nanoseconds(), n)
	return time.After(max(wait, 0))
}

// reaped records a child the keeper reaped.
func (k *keeper) reaped(pid int, ws syscall.WaitStatus) {
	if pid == k.cmdPid {
		k.status, k.exited = ws, true
	}
}

// reap reaps every child that has exited, and reports whether the keeper
// has no child left (so none of the processes the command started lives).
func (k *keeper) reap() bool {
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
			k.reaped(pid, ws)
		}
	}
}

// finish reports the command's status once everything is dead, and removes
// the cgroup.
func (k *keeper) finish() {
	if k.cg != nil {
		k.cg.remove()
	}
	if k.cmdPid == 0 {
		return
	}
	k.say("done %d %s", int(k.status), cmp.Or(k.stopping, whyExited))
}
