package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"unsafe"
)

// prSetChildSubreaper is prctl's PR_SET_CHILD_SUBREAPER: orphaned
// descendants are reparented to the caller instead of init.
const prSetChildSubreaper = 36

// becomeSubreaper makes the calling process the reaper of its orphaned
// descendants, so that a process whose parent exited (a double fork, a
// daemon) stays below it and can be found and killed.
func becomeSubreaper() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_CHILD_SUBREAPER): %w", errno)
	}
	return nil
}

// monoNow returns CLOCK_MONOTONIC in nanoseconds: the clock of Go's timers,
// shared by every process of the machine, so a deadline can be handed from
// pglease to its reaper without the delay of the pipe moving it later.
func monoNow() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, errno := syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		panic(fmt.Sprintf("clock_gettime(CLOCK_MONOTONIC): %v", errno))
	}
	return ts.Nano()
}

// descendants returns the live (not zombie) processes below root, found by
// walking /proc.
func descendants(root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		fields := strings.Fields(string(b[i+1:]))
		if i < 0 || len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			parent[pid] = ppid
		}
	}
	var out []int
	for pid := range parent {
		for p := parent[pid]; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// signalAll sends sig to every process below root and in cg (which may be
// nil), and returns how many it signalled.
func signalAll(root int, cg *cgroup, sig syscall.Signal) int {
	pids := descendants(root)
	if cg != nil {
		pids = append(pids, cg.procs()...)
	}
	n := 0
	seen := make(map[int]bool, len(pids))
	for _, pid := range pids {
		if pid != root && !seen[pid] {
			seen[pid] = true
			if syscall.Kill(pid, sig) == nil {
				n++
			}
		}
	}
	return n
}

// killAll kills every process below root and in cg and reaps root's
// children until it has none left: as root is a subreaper, no process it
// started is then alive. reaped is called for each child reaped.
func killAll(root int, cg *cgroup, reaped func(pid int, ws syscall.WaitStatus)) {
	for {
		if cg != nil {
			cg.kill()
		}
		signalAll(root, cg, syscall.SIGKILL)
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.ECHILD):
			return
		case errors.Is(err, syscall.EINTR):
		case err == nil:
			reaped(pid, ws)
		}
	}
}

// cgroup is a cgroup v2 of its own for the command and everything it
// starts, where the cgroup hierarchy is writable: cgroup.kill kills them all
// at once, including those that left the process tree's reach.
type cgroup struct {
	dir string
	fd  int // the directory, for clone3's CLONE_INTO_CGROUP
}

// newCgroup creates a cgroup below the calling process's own, or returns
// nil where it cannot (no cgroup v2, no write access).
func newCgroup() *cgroup {
	mount, rel := cgroup2Mount(), ownCgroup()
	if mount == "" || rel == "" {
		return nil
	}
	parent := filepath.Join(mount, rel)
	removeStaleCgroups(parent)
	dir := filepath.Join(parent, cgroupPrefix+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		_ = os.Remove(dir)
		return nil
	}
	return &cgroup{dir: dir, fd: fd}
}

// cgroupPrefix starts the name of a reaper's cgroup; the reaper's PID
// follows.
const cgroupPrefix = "pglease-run-"

// removeStaleCgroups removes the cgroups under parent left by reapers that
// are gone (a reaper and its pglease killed together leave theirs behind).
// Only empty cgroups can be removed: one that still holds processes stays.
func removeStaleCgroups(parent string) {
	dirs, _ := filepath.Glob(filepath.Join(parent, cgroupPrefix+"*"))
	for _, dir := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), cgroupPrefix))
		if err == nil && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.Remove(dir)
		}
	}
}

// openCgroup returns the cgroup at dir, made by a reaper, for pglease to
// kill should the reaper die.
func openCgroup(dir string) *cgroup {
	if dir == "" || dir == "-" {
		return nil
	}
	return &cgroup{dir: dir, fd: -1}
}

// cgroup2Mount returns where the cgroup v2 hierarchy is mounted, or "".
func cgroup2Mount() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options ... - fstype source ...
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, fs := strings.Fields(pre), strings.Fields(post)
		if ok && len(fields) >= 5 && len(fs) >= 1 && fs[0] == "cgroup2" {
			return fields[4]
		}
	}
	return ""
}

// ownCgroup returns the calling process's cgroup v2 path, or "".
func ownCgroup() string {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// procs returns the processes in the cgroup.
func (c *cgroup) procs() []int {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var pids []int
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// kill kills every process in the cgroup at once (cgroup.kill, Linux 5.14);
// on older kernels signalAll's one by one kill covers it.
func (c *cgroup) kill() {
	_ = os.WriteFile(filepath.Join(c.dir, "cgroup.kill"), []byte("1"), 0)
}

// remove removes the cgroup, once empty.
func (c *cgroup) remove() {
	if c.fd >= 0 {
		_ = syscall.Close(c.fd)
	}
	_ = os.Remove(c.dir)
}
