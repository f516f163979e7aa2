package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/pgtest"
)

// reaperCases are the CLI tests of what the reaper guarantees on Linux:
// nothing the command started outlives its tenure.
var reaperCases = []cliCase{
	{"RunKill9", testRunKill9},
	{"RunCrash", testRunCrash},
	{"RunLeftovers", testRunLeftovers},
	{"RunReaperKilled", testRunReaperKilled},
	{"RunStopped", testRunStopped},
	{"RunLeaseLostBlackhole", testRunLeaseLostBlackhole},
}

// treeScript starts a process tree that tries every way to outlive its
// parent: a background child, a child in a session of its own (setsid), and
// a daemon whose parent exits (a double fork). Each prints "ROLE PID". All
// hold the FIFO $FIFO open for writing, so the reader sees end of file when
// the last of them is dead. With $IGNORE_TERM set, all ignore SIGTERM.
//
// The session and the daemon each write a line to the FIFO $READY once they
// have printed theirs. With $EXIT_AT_ONCE set, the command exits as soon as
// it has read both: it leaves every process of the tree behind, and every
// "ROLE PID" line has been written before pglease can kill what was left
// (exiting before that raced with them on a loaded machine: pglease killed
// the session before it printed its line).
const treeScript = `#!/bin/sh
exec 9>"$FIFO" 8<>"$READY"
[ -n "$IGNORE_TERM" ] && trap '' TERM
case "$1" in
session) echo "session $$"; echo >&8; exec sleep 1000 ;;
daemon) echo "daemon $$"; echo >&8; exec sleep 1000 ;;
forker) "$0" daemon & exit 0 ;;
esac
sleep 1000 &
echo "child $!"
setsid "$0" session &
"$0" forker &
echo "command $$"
if [ -n "$EXIT_AT_ONCE" ]; then read -r _ <&8; read -r _ <&8; exit 7; fi
wait
`

// tree is a process tree started by treeScript under pglease run.
type tree struct {
	b    *background
	pids map[string]int // by role: command, child, session, daemon
	// gone receives the time the last process of the tree was seen dead:
	// when the FIFO they all held reached end of file.
	gone chan time.Time
}

// startTree runs treeScript under pglease run with args, and waits until
// all four processes have started.
func startTree(t *testing.T, c cli, env []string, args ...string) *tree {
	t.Helper()
	dir := t.TempDir()
	script, fifo, ready := filepath.Join(dir, "tree.sh"), filepath.Join(dir, "deaths"), filepath.Join(dir, "ready")
	if err := os.WriteFile(script, []byte(treeScript), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fifo, ready} {
		if err := syscall.Mkfifo(f, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tr := &tree{pids: map[string]int{}, gone: make(chan time.Time, 1)}
	go func() {
		f, err := os.Open(fifo) // blocks until the first writer opens it
		if err != nil {
			return
		}
		defer f.Close()
		var buf [64]byte
		for {
			if _, err := f.Read(buf[:]); err != nil { // end of file: no writer left
				tr.gone <- time.Now()
				return
			}
		}
	}()
	t.Cleanup(func() {
		// Unblocks the reader if no writer ever came.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	tr.b = c.with(append(env, "FIFO="+fifo, "READY="+ready)...).start(append(args, "--", script)...)
	for len(tr.pids) < 4 {
		line := tr.b.readLine(30 * time.Second)
		role, pid, _ := strings.Cut(line, " ")
		n, err := strconv.Atoi(pid)
		if err != nil {
			t.Fatalf("line from the tree: got %q, want ROLE PID", line)
		}
		tr.pids[role] = n
	}
	return tr
}

// waitGone waits until the whole tree is dead and returns when it was seen
// so; then none of its processes may exist.
func (tr *tree) waitGone(t *testing.T, timeout time.Duration) time.Time {
	t.Helper()
	select {
	case at := <-tr.gone:
		// The FIFO closes as a process exits: wait for the rest of its exit.
		for role, pid := range tr.pids {
			if !dead(t, pid, 10*time.Second) {
				t.Fatalf("the %s (pid %d) of the command still runs", role, pid)
			}
		}
		return at
	case <-time.After(timeout):
		t.Fatalf("processes of the command still hold the FIFO open after %v (pids %v); stderr:\n%s", timeout, tr.pids, tr.b.stderr)
		return time.Time{}
	}
}

// dead waits until process pid has exited (a zombie not yet reaped is
// dead: its files are closed, its work is over), and reports whether it did
// within timeout. It waits on a pidfd, which turns readable at the exit.
func dead(t *testing.T, pid int, timeout time.Duration) bool {
	t.Helper()
	const sysPidfdOpen = 434 // the same on every architecture
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		return true // reaped already
	}
	if errno != 0 {
		t.Fatalf("pidfd_open(%d): %v", pid, errno)
	}
	defer syscall.Close(int(fd))
	tv := syscall.NsecToTimeval(timeout.Nanoseconds())
	for {
		var readable syscall.FdSet
		readable.Bits[fd/64] |= 1 << (fd % 64)
		n, err := syscall.Select(int(fd)+1, &readable, nil, nil, &tv)
		if err != syscall.EINTR {
			return err == nil && n == 1
		}
	}
}

// expiresAt reads when the server ends the tenure of lease name.
func expiresAt(t *testing.T, url, name string) time.Time {
	t.Helper()
	var at time.Time
	err := pgtest.Pool(t, url).QueryRow(t.Context(), `SELECT expires_at FROM pglease.lease_status WHERE name = $1`, name).Scan(&at)
	if err != nil {
		t.Fatalf("read the expiry of lease %q: %v", name, err)
	}
	return at
}

// requireBefore fails unless the tree died before the server's expiry, and
// logs the margin.
func requireBefore(t *testing.T, what string, died, expiry time.Time) {
	t.Helper()
	margin := expiry.Sub(died)
	t.Logf("%s: the last process of the command died %v before the server's expiry", what, margin.Round(time.Microsecond))
	if margin <= 0 {
		t.Fatalf("%s: the last process of the command died %v after the server ended the tenure: overlap", what, -margin)
	}
}

func testRunKill9(t *testing.T, c cli) {
	testRunDeath(t, c, syscall.SIGKILL, -1) // killed by a signal
}

// testRunCrash crashes pglease as a panic or the OOM killer would end it:
// SIGQUIT makes the Go runtime dump its goroutines and exit 2.
func testRunCrash(t *testing.T, c cli) {
	testRunDeath(t, c, syscall.SIGQUIT, 2)
}

// testRunDeath ends pglease with sig: all the command started must die,
// long before the server ends the tenure.
func testRunDeath(t *testing.T, c cli, sig syscall.Signal, code int) {
	url := pgtest.NewMigrated(t)
	tr := startTree(t, c.with("PGLEASE_DATABASE_URL="+url), nil, "run", "--lease", "dies", "--ttl", "30s", "--grace", "5s")
	killedAt := time.Now()
	if err := tr.b.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	died := tr.waitGone(t, 20*time.Second)
	what := signalName(sig) + " to pglease"
	t.Logf("%s: the command, its child, its setsid'd child and its daemon were dead %v later", what, died.Sub(killedAt).Round(time.Microsecond))
	requireBefore(t, what, died, expiresAt(t, url, "dies"))
	tr.b.waitExit(10*time.Second, code)
}

func testRunLeftovers(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	tr := startTree(t, c.with("PGLEASE_DATABASE_URL="+url), []string{"EXIT_AT_ONCE=1"}, "run", "--lease", "left", "--ttl", "30s")
	// pglease exits with the command's status, once all it left behind is
	// dead, and only then releases.
	tr.b.waitExit(30*time.Second, 7)
	for role, pid := range tr.pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Fatalf("the %s (pid %d) still exists after pglease exited, want it dead and reaped", role, pid)
		}
	}
	// The child, the session and the daemon, and the daemon's parent if it
	// has not exited yet.
	var n int
	if _, err := fmt.Sscanf(tr.b.stderr.String(), "pglease: the command exited and left %d processes running", &n); err != nil || n < 3 || n > 4 {
		t.Fatalf("stderr: got %q, want it to say the command left 3 or 4 processes running", tr.b.stderr)
	}
	if state, _ := leaseState(t, pgtest.Pool(t, url), "left"); state != "free" {
		t.Fatalf("lease after the run: got %s, want free (released)", state)
	}
}

func testRunReaperKilled(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	// A cgroup left by a reaper that is gone: the next reaper removes it.
	var stale string
	if probe := newCgroup(); probe != nil {
		probe.remove()
		gone := exec.Command("true")
		if err := gone.Run(); err != nil {
			t.Fatal(err)
		}
		stale = filepath.Join(filepath.Dir(probe.dir), cgroupPrefix+strconv.Itoa(gone.Process.Pid))
		if err := os.Mkdir(stale, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tr := startTree(t, c.with("PGLEASE_DATABASE_URL="+url), nil, "run", "--lease", "reaper", "--ttl", "30s")
	var reaper int
	for _, pid := range descendants(tr.b.cmd.Process.Pid) {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline"); err == nil && strings.Contains(string(b), reaperArg) {
			reaper = pid
		}
	}
	if reaper == 0 {
		t.Fatalf("no reaper among the processes of pglease %d", tr.b.cmd.Process.Pid)
	}
	// Where this process can make a cgroup, the reaper made one for the
	// command; pglease removes it after killing what the reaper left.
	cg := cgroupOf(t, tr.pids["command"])
	if probe := newCgroup(); probe != nil {
		probe.remove()
		if !strings.Contains(filepath.Base(cg), "pglease-run-") {
			t.Fatalf("cgroup of the command: got %q, want one of its own (pglease-run-*)", cg)
		}
	}
	t.Logf("cgroup of the command: %s", cg)
	if _, err := os.Stat(stale); stale != "" && !os.IsNotExist(err) {
		t.Fatalf("stale cgroup %s: %v, want it removed by the reaper", stale, err)
	}
	if err := syscall.Kill(reaper, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	tr.waitGone(t, 20*time.Second)
	tr.b.waitExit(10*time.Second, 1)
	requireContains(t, "stderr", tr.b.stderr.String(), "reaper of the command died", "killed the command and everything it started")
	if strings.Contains(cg, "pglease-run-") {
		if _, err := os.Stat(filepath.Join(cgroup2Mount(), cg)); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s after pglease exited: %v, want it removed", cg, err)
		}
	}
}

// cgroupOf returns the cgroup v2 path of process pid.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			return rest
		}
	}
	return ""
}

// testRunStopped stops pglease (SIGSTOP): nobody renews, and the reaper
// alone must kill the command, which ignores SIGTERM, by the deadline.
func testRunStopped(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	tr := startTree(t, c.with("PGLEASE_DATABASE_URL="+url), []string{"IGNORE_TERM=1"}, "run", "--lease", "stopped", "--ttl", "3s", "--grace", "1s")
	if err := tr.b.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	died := tr.waitGone(t, 20*time.Second)
	requireBefore(t, "pglease stopped (SIGSTOP)", died, expiresAt(t, url, "stopped"))
	if err := tr.b.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	tr.b.waitExit(20*time.Second, 69)
}

// testRunLeaseLostBlackhole cuts the database off a command that ignores
// SIGTERM, as do all the processes it started: SIGKILL at the local
// deadline must land before the server's expiry, with the largest grace
// allowed (half the TTL), the case where the old schedule overran by 2.4 s.
func testRunLeaseLostBlackhole(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(faultproxy.PostgresTarget(cfg.Host, cfg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })

	tr := startTree(t, c, []string{"IGNORE_TERM=1"}, "run", "--database", viaProxy(t, url, proxy.Addr()),
		"--lease", "partitioned", "--ttl", "6s", "--grace", "3s")
	proxy.Blackhole()
	cutAt := time.Now()
	died := tr.waitGone(t, 30*time.Second)
	t.Logf("connection blackholed: the last process died %v later", died.Sub(cutAt).Round(time.Millisecond))
	requireBefore(t, "database cut off, SIGTERM ignored, --ttl 6s --grace 3s", died, expiresAt(t, url, "partitioned"))
	tr.b.waitExit(30*time.Second, 69)
	requireContains(t, "stderr after the partition", tr.b.stderr.String(), `lease "partitioned"`, "local deadline", "SIGKILL", "exit 69")
}
