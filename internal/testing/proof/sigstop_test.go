//go:build proof

package proof

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/history"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// Environment of the helper process (the test binary re-executed).
const (
	envHelperURL  = "PGLEASE_PROOF_HELPER_URL"
	envHelperMode = "PGLEASE_PROOF_HELPER_MODE" // "raw", "supervised" or "mid-write"
	helperLease   = "frozen"
	helperTTL     = time.Second
	helperApp     = "pglease-proof-helper"
)

// TestFaultSIGSTOP freezes a holder process with SIGSTOP past its TTL,
// lets another holder take the lease over and write under its fence, and
// resumes the frozen one. The helper process is this test binary running
// this test with PGLEASE_PROOF_HELPER_URL set, which makes it the holder
// (helperHolder) instead; it reports on stdout each fenced write it attempts,
// with the wall-clock times it began and ended.
//
// raw: the helper holds the lease with TryAcquire and Renew and writes in a
// loop without ever looking at Deadline, the worst client. After the
// resume its fenced writes must be refused (PGL01): fencing alone
// protects the resource.
//
// supervised: the helper runs a supervisor whose workload writes in a
// loop. After the resume the workload must be cancelled promptly, and no
// fenced write begun after the resume may succeed.
//
// In both, the server's log must hold no write under the frozen fence
// after the takeover (in commit order).
func TestFaultSIGSTOP(t *testing.T) {
	if dbURL := os.Getenv(envHelperURL); dbURL != "" {
		helperHolder(t, dbURL)
		return
	}
	for _, mode := range []string{"raw", "supervised", "mid-write"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testSIGSTOP(t, mode)
		})
	}
}

// helperLine is one line of the helper's report: "<what> <fence>
// <end unix ns> [<begin unix ns>]".
type helperLine struct {
	what       string // acquired, write-ok, write-refused, write-error, cancelled, lost
	fence      int64
	end, begin time.Time
}

func testSIGSTOP(t *testing.T, mode string) {
	dbURL := pgtest.NewMigrated(t)
	installAudit(t, dbURL)
	pool := openPool(t, dbURL, 2, "pglease-proof-taker")

	cmd := exec.Command(os.Args[0], "-test.run=^TestFaultSIGSTOP$", "-test.count=1")
	cmd.Env = append(os.Environ(), envHelperURL+"="+dbURL, envHelperMode+"="+mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var (
		stderrMu sync.Mutex
		stderrB  bytes.Buffer
	)
	cmd.Stderr = lockedWriter{&stderrB, &stderrMu}
	stderr := func() string {
		stderrMu.Lock()
		defer stderrMu.Unlock()
		return stderrB.String()
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var (
		mu    sync.Mutex
		lines []helperLine
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l, ok := parseHelperLine(sc.Text()); ok {
				mu.Lock()
				lines = append(lines, l)
				mu.Unlock()
			}
		}
	}()
	go func() {
		<-readDone
		exited <- cmd.Wait()
	}()
	stopped := false
	defer func() {
		if stopped {
			_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		}
		_ = stdin.Close()
		select {
		case err := <-exited:
			if err != nil && !t.Failed() {
				t.Errorf("helper exited with %v\n%s", err, stderr())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("helper did not exit within 30s of its stdin closing\n%s", stderr())
		}
	}()
	seen := func(what string, fence int64, after time.Time) (helperLine, bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if l.what == what && (fence < 0 || l.fence == fence) && !l.end.Before(after) {
				return l, true
			}
		}
		return helperLine{}, false
	}

	taker, err := pglease.New(pool, pglease.Config{Holder: "taker"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	freeze := func() time.Time {
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		stopped = true
		return time.Now()
	}
	// thaw returns the time just before SIGCONT: the helper runs as soon
	// as the signal is sent, and may report before the kill call returns.
	thaw := func() time.Time {
		at := time.Now()
		if err := syscall.Kill(cmd.Process.Pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		stopped = false
		return at
	}

	if mode == "mid-write" {
		testFrozenMidWrite(t, ctx, pool, taker, stderr, seen, freeze, thaw)
		return
	}

	// Freeze the helper while it holds the lease and works, outside a
	// fenced transaction: a freeze inside one blocks every takeover for as
	// long as it lasts (mode mid-write). Under load the helper can lose its
	// lease by itself (a late renewal); then thaw and try again.
	holding := func() bool {
		mu.Lock()
		defer mu.Unlock()
		var acquired, ended time.Time
		for _, l := range lines {
			switch l.what {
			case "acquired":
				acquired = l.end
			case "cancelled", "lost", "write-refused":
				ended = l.end
			}
		}
		return !acquired.IsZero() && acquired.After(ended)
	}
	var stopAt time.Time
	retries := 0
	for {
		if !waitUntil(time.Minute, func() bool {
			_, ok := seen("write-ok", -1, time.Time{})
			return ok
		}) {
			t.Fatalf("the helper never made a fenced write within a minute\n%s", stderr())
		}
		stopAt = freeze()
		time.Sleep(50 * time.Millisecond) // let a statement in flight finish, and its report arrive
		if inTx(t, pool, helperApp) == 0 && holding() {
			break
		}
		thaw()
		if retries++; retries > 20 {
			rows, _ := pool.Query(context.Background(), `SELECT state, left(query, 80), now() - xact_start FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, helperApp)
			for rows.Next() {
				var st, q string
				var d time.Duration
				_ = rows.Scan(&st, &q, &d)
				t.Logf("helper session: %s %q %s", st, q, d)
			}
			rows.Close()
			t.Fatalf("every freeze landed inside a fenced transaction or while the helper did not hold the lease")
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
	}

	// Another holder takes over once the frozen one's lease has expired on
	// the server, and writes under its own fence. The frozen tenure is the
	// one before: the helper cannot renew or re-acquire while stopped.
	lease, err := taker.Acquire(ctx, helperLease, 5*time.Second)
	if err != nil {
		t.Fatalf("taker Acquire: %v", err)
	}
	takenAt := time.Now()
	frozen := lease.Fence() - 1
	if _, ok := seen("acquired", frozen, time.Time{}); !ok {
		t.Fatalf("taker's fence is %d, but the helper never reported holding fence %d", lease.Fence(), frozen)
	}
	if err := pglease.WithFence(ctx, pool, lease.Name(), lease.Fence(), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, writeSQL, helperLease, lease.Fence(), "taker")
		return err
	}); err != nil {
		t.Fatalf("taker's fenced write: %v", err)
	}

	resumeAt := thaw()
	want := "write-refused"
	if mode == "supervised" {
		want = "cancelled"
	}
	var stopLine helperLine
	stoppedAlready := false
	if !waitUntil(30*time.Second, func() bool {
		var ok bool
		stopLine, ok = seen(want, frozen, resumeAt)
		return ok
	}) {
		// Under load the helper may have lost its lease by itself (a late
		// renewal) just before the freeze, its report still in the pipe
		// when holding() looked. Then it was not working while frozen.
		if l, ok := seen(want, frozen, time.Time{}); ok && l.end.Before(stopAt) {
			stoppedAlready = true
			t.Logf("the helper had stopped (%s) %s before the freeze; nothing was running while frozen", want, stopAt.Sub(l.end))
		} else {
			mu.Lock()
			var told strings.Builder
			for _, l := range lines {
				if l.what != "write-ok" {
					fmt.Fprintf(&told, "  %s fence %d at %s\n", l.what, l.fence, l.end.Format("15:04:05.000000"))
				}
			}
			mu.Unlock()
			t.Fatalf("the resumed helper did not report %s under fence %d within 30s (frozen at %s, thawed at %s); it reported, write-ok aside:\n%s%s",
				want, frozen, stopAt.Format("15:04:05.000000"), resumeAt.Format("15:04:05.000000"), told.String(), stderr())
		}
	}
	// Let a resumed helper that failed to stop show it.
	time.Sleep(200 * time.Millisecond)

	mu.Lock()
	var okBefore, okAfter, refusedAfter, othersAfter int
	for _, l := range lines {
		switch {
		case l.fence != frozen || !strings.HasPrefix(l.what, "write-"):
		case l.begin.Before(stopAt):
			if l.what == "write-ok" {
				okBefore++
			}
		case l.what == "write-ok":
			okAfter++
			t.Errorf("fenced write under the frozen fence %d began %s after the resume and committed", frozen, l.begin.Sub(resumeAt))
		case l.what == "write-refused":
			refusedAfter++
		default:
			othersAfter++
		}
	}
	mu.Unlock()
	if err := lease.Release(ctx); err != nil {
		t.Errorf("taker Release: %v", err)
	}
	srep := history.CheckServer(readAudit(t, pool), nil)
	failViolations(t, "server history", srep.Violations)
	t.Logf("sigstop %s: frozen %s (TTL %s), taken over %s after the freeze; fenced writes under the frozen fence: %d committed before the freeze, "+
		"%d committed after the resume, %d refused after it, %d failed otherwise; %s %s after the resume; %d freezes retried (inside a fenced transaction, or not holding); %s",
		mode, resumeAt.Sub(stopAt).Round(time.Millisecond), helperTTL, takenAt.Sub(stopAt).Round(time.Millisecond),
		okBefore, okAfter, refusedAfter, othersAfter, want, stopLine.end.Sub(resumeAt).Round(time.Millisecond), retries, srep.Summary())
	if stoppedAlready {
		t.Logf("(the figure after the resume does not apply: the helper had stopped before the freeze)")
	}
}

// testFrozenMidWrite freezes the helper inside a fenced transaction, after
// assert_held and its insert, before the commit. Its FOR SHARE lock on the
// lease row blocks a takeover, but only until assert_held's bound: the
// transaction may idle at most the time left in the tenure plus 100 ms,
// then the server ends the session (the kernel kept its socket alive, so
// before 0.2.0 the takeover waited for the whole freeze). The takeover
// then proceeds while the helper is still frozen, and the frozen write
// never commits.
func testFrozenMidWrite(t *testing.T, ctx context.Context, pool *pgxpool.Pool, taker *pglease.Client, stderr func() string,
	seen func(string, int64, time.Time) (helperLine, bool), freeze, thaw func() time.Time) {
	if !waitUntil(time.Minute, func() bool {
		_, ok := seen("in-tx", -1, time.Time{})
		return ok
	}) {
		t.Fatalf("the helper never entered a fenced transaction within a minute\n%s", stderr())
	}
	stopAt := freeze()
	inTxFrozen := inTx(t, pool, helperApp)
	bctx, bcancel := context.WithTimeout(ctx, 5*helperTTL)
	lease, err := taker.Acquire(bctx, helperLease, 5*time.Second)
	bcancel()
	takenAt := time.Now()
	resumeAt := thaw()
	if err != nil {
		t.Fatalf("taker Acquire while the holder is frozen inside its fenced transaction: %v; want the lease once the tenure ended and assert_held's bound ended the stalled transaction", err)
	}
	frozen := lease.Fence() - 1
	if err := lease.Release(ctx); err != nil {
		t.Errorf("taker Release: %v", err)
	}
	// The helper reports its write's fate after the thaw.
	var what string
	if !waitUntil(30*time.Second, func() bool {
		for _, w := range []string{"write-ok", "write-error", "write-refused"} {
			if _, ok := seen(w, frozen, resumeAt); ok {
				what = w
				return true
			}
		}
		return false
	}) {
		t.Fatalf("the helper reported nothing about its frozen write within 30s of the thaw\n%s", stderr())
	}
	if what == "write-ok" {
		t.Errorf("the frozen fenced write committed after the takeover")
	}
	evs := readAudit(t, pool)
	var delay time.Duration
	for _, e := range evs {
		if e.Row == history.LeaseRow && e.Name == helperLease && e.Fence == lease.Fence() && e.Holder != "" && e.OldFence == frozen {
			delay = e.AcquiredAt.Sub(maxExpiry(evs)[tenureKey{helperLease, 0, frozen}])
		}
	}
	if delay < 0 || delay > 100*time.Millisecond+time.Second {
		t.Errorf("takeover %v after the frozen tenure's end on the server's clock, want at most 100 ms (allowing 1.1 s)", delay)
	}
	srep := history.CheckServer(evs, nil)
	failViolations(t, "server history", srep.Violations)
	t.Logf("sigstop mid-write: frozen inside a fenced transaction (sessions in a transaction: %d), TTL %s: the takeover (fence %d) came %s after the freeze "+
		"while the helper was still frozen, %s after the frozen tenure's end on the server's clock (bound: 100 ms); the frozen write: %s; %s",
		inTxFrozen, helperTTL, lease.Fence(), takenAt.Sub(stopAt).Round(time.Millisecond), delay.Round(time.Millisecond), what, srep.Summary())
}

// inTx returns the number of sessions of application app idle inside a
// transaction (waiting for their client).
func inTx(t *testing.T, pool *pgxpool.Pool, app string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 AND state LIKE 'idle in transaction%'`, app).Scan(&n); err != nil {
		t.Errorf("pg_stat_activity: %v", err)
	}
	return n
}

func parseHelperLine(s string) (helperLine, bool) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return helperLine{}, false
	}
	fence, err1 := strconv.ParseInt(f[1], 10, 64)
	end, err2 := strconv.ParseInt(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return helperLine{}, false
	}
	l := helperLine{what: f[0], fence: fence, end: time.Unix(0, end)}
	l.begin = l.end
	if len(f) > 3 {
		if b, err := strconv.ParseInt(f[3], 10, 64); err == nil {
			l.begin = time.Unix(0, b)
		}
	}
	return l, true
}

// helperHolder is the holder process of TestFaultSIGSTOP, run when
// PGLEASE_PROOF_HELPER_URL is set. It holds lease "frozen" and makes fenced
// writes until its stdin closes, reporting on stdout.
func helperHolder(t *testing.T, dbURL string) {
	pool := openPool(t, dbURL, 4, helperApp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdinDone := make(chan struct{})
	go func() {
		defer close(stdinDone)
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	defer func() { <-stdinDone }()
	var mu sync.Mutex
	report := func(what string, fence int64, begin time.Time) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf("%s %d %d %d\n", what, fence, time.Now().UnixNano(), begin.UnixNano())
	}
	mode := os.Getenv(envHelperMode)
	write := func(ctx context.Context, fence int64) error {
		begin := time.Now()
		err := pglease.WithFence(ctx, pool, helperLease, fence, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, writeSQL, helperLease, fence, "helper")
			if err == nil && mode == "mid-write" {
				report("in-tx", fence, begin)
				time.Sleep(300 * time.Millisecond) // the parent freezes us here
			}
			return err
		})
		switch {
		case err == nil:
			report("write-ok", fence, begin)
		case errors.Is(err, pglease.ErrLeaseLost):
			report("write-refused", fence, begin)
		default:
			report("write-error", fence, begin)
		}
		return err
	}

	switch mode {
	case "raw", "mid-write":
		c, err := pglease.New(pool, pglease.Config{Holder: "helper"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Acquire(ctx, helperLease, helperTTL)
		if err != nil {
			t.Fatal(err)
		}
		report("acquired", l.Fence(), time.Now())
		renewed := time.Now()
		for ctx.Err() == nil {
			if time.Since(renewed) > helperTTL/3 {
				_ = l.Renew(ctx) // never looks at the result or Deadline
				renewed = time.Now()
			}
			if errors.Is(write(ctx, l.Fence()), pglease.ErrLeaseLost) {
				break
			}
			sleep(ctx, 40*time.Millisecond)
		}
		<-ctx.Done()
	case "supervised":
		sup, err := supervisor.NewLease(pool, helperLease, supervisor.Config{
			TTL: helperTTL, Holder: "helper", Logger: quiet,
			Observer: func(e supervisor.Event) {
				switch e.Kind {
				case supervisor.EventAcquired:
					report("acquired", e.Fence, time.Now())
				case supervisor.EventLost:
					report("lost", e.Fence, time.Now())
				}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		err = sup.Run(ctx, func(wctx context.Context) error {
			fence := sup.Fence()
			for wctx.Err() == nil {
				_ = write(wctx, fence)
				sleep(wctx, 40*time.Millisecond)
			}
			report("cancelled", fence, time.Now())
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v", err)
		}
	default:
		t.Fatalf("%s=%q: want raw, supervised or mid-write", envHelperMode, mode)
	}
}
