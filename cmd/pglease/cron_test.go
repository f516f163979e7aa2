package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// cronWindow is the schedule of the fleet test: a tick every cronWindow,
// at the multiples of it since the Unix epoch, as cron fires */N. A tick
// whose first run is kill -9'd may run last at cronSkew + cronTTL (the
// waiters take the lease at its expiry) + one job (a waiter before it
// succeeded and released) + start-up after the tick, and must begin within
// cronWindow/2 to count for its own window: 1 + 3 + 0.5 s against 6 s. (At
// 8 s the last retry began past 4 s under load, counted for the next window
// and ran the job again.)
const cronWindow = 12 * time.Second

// cronHold is --hold-at-least of the fleet test: longer than the 2 s
// spread of the hosts' start times, shorter than cronWindow minus that
// spread (docs/cron.md).
const cronHold = 4 * time.Second

// cronSkew is how far a host's start strays from the tick, early or late.
// The margins left for the start-up of pglease (a race-built binary on a
// loaded machine) are at least 2 s: --once-per tolerates 4 s (W/2), and
// --hold-at-least needs 2 s + latency < 4 s < 8 s - 2 s - latency.
const cronSkew = time.Second

// cronTTL is the lease's TTL in the fleet test: long enough that a
// scheduling stall cannot cost a renewal, short enough that the runs after
// a kill -9 (from the expiry) still begin within the tick's window (see
// cronWindow).
const cronTTL = 3 * time.Second

// cronJob is the job: it sleeps $JOB_MS, then appends "$MODE $TICK" to
// $OUT. With $KILL set, the first run of the tick kill -9's its own
// pglease (the pid in PGLEASE_HOLDER, host/pid/random) first.
const cronJob = `#!/bin/sh
if [ -n "$KILL" ] && mkdir "$DIR/killed-$MODE-$TICK" 2>/dev/null; then
    kill -9 "$(echo "$PGLEASE_HOLDER" | cut -d/ -f2)"
    exit 0
fi
sleep "$JOB_S"
echo "$MODE $TICK" >>"$OUT"
`

// TestCronFleet: three hosts (pglease run processes, each its own holder)
// fire the same job at every tick, their start times skewed at random by
// up to cronSkew either way (tick 0: all early, tick 1: all late), the job
// taking 50-500 ms. With --once-per, exactly one run per window succeeds
// in the ledger, also in ticks where the first run's pglease is kill -9'd
// (the others --wait and retry); with --hold-at-least, every tick runs
// exactly once. Both modes share the ticks. PGLEASE_CRON_TICKS sets the
// number of ticks (3 by default; make test-cron runs 20).
func TestCronFleet(t *testing.T) {
	ticks := 3
	if s := os.Getenv("PGLEASE_CRON_TICKS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 3 {
			t.Fatalf("PGLEASE_CRON_TICKS=%q: want a whole number of at least 3", s)
		}
		ticks = n
	}
	c := cli{t: t, bin: binary(t)}
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	dir := t.TempDir()
	job, out := filepath.Join(dir, "job.sh"), filepath.Join(dir, "runs")
	if err := os.WriteFile(job, []byte(cronJob), 0o755); err != nil {
		t.Fatal(err)
	}

	// The first tick: a window boundary at least 2 s away, on the server's
	// clock (the same machine's).
	var serverNow time.Time
	if err := pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&serverNow); err != nil {
		t.Fatal(err)
	}
	skew := time.Until(serverNow) // server minus local, ~0 here
	first := serverNow.Add(2 * time.Second).Truncate(cronWindow).Add(cronWindow)

	modes := map[string][]string{
		"once": {"--once-per", cronWindow.String(), "--wait"},
		"hold": {"--hold-at-least", cronHold.String()},
	}
	if ticks >= 10 {
		// The full run also shows what the issue is about: without either
		// flag, only overlapping runs are kept apart (logged, not checked).
		modes["plain"] = nil
	}
	killTick := func(k int) bool { return k%4 == 2 }
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for k := range ticks {
		tick := first.Add(time.Duration(k) * cronWindow)
		for mode, flags := range modes {
			for host := range 3 {
				offset := time.Duration(rand.Int64N(int64(2*cronSkew))) - cronSkew
				switch k {
				case 0:
					offset = -cronSkew + time.Duration(rand.Int64N(int64(cronSkew/2))) // all early
				case 1:
					offset = cronSkew/2 + time.Duration(rand.Int64N(int64(cronSkew/2))) // all late
				}
				jobTime := 50*time.Millisecond + time.Duration(rand.Int64N(int64(450*time.Millisecond)))
				env := []string{"MODE=" + mode, "TICK=" + strconv.Itoa(k), "OUT=" + out, "DIR=" + dir,
					fmt.Sprintf("JOB_S=%.3f", jobTime.Seconds())}
				if mode == "once" && killTick(k) {
					env = append(env, "KILL=1")
				}
				args := append(append([]string{"run", "--lease", "cron-" + mode, "--ttl", cronTTL.String()}, flags...), "--", job)
				wg.Go(func() {
					time.Sleep(time.Until(tick.Add(offset - skew))) // the host's cron fires
					r := c.with(env...).run(args...)
					killed := mode == "once" && killTick(k) && r.code == -1
					refused := mode == "plain" && r.code == exitHeld
					if r.code != 0 && !killed && !refused {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("%s tick %d host %d: %s", mode, k, host, r))
						mu.Unlock()
					}
				})
			}
		}
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}

	// --hold-at-least and --once-per: every tick ran (and completed) once,
	// but the once-per ticks with a kill, where the killed run may have
	// completed too.
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		count[line]++
	}
	plain := map[int]int{} // ticks by runs, without either flag
	for k := range ticks {
		for mode := range modes {
			n := count[fmt.Sprintf("%s %d", mode, k)]
			if mode == "plain" {
				plain[n]++
				continue
			}
			if n != 1 && !(mode == "once" && killTick(k) && n >= 1) {
				t.Errorf("%s tick %d: the job completed %d times, want once", mode, k, n)
			}
		}
	}
	if len(plain) > 0 {
		t.Logf("without --once-per or --hold-at-least, of %d ticks: %d ran once, %d twice, %d three times, %d not at all",
			ticks, plain[1], plain[2], plain[3], plain[0])
	}
	// --once-per: exactly one success per window in the ledger, for the
	// window of each tick and no other.
	checkLedger(t, pool, "cron-once", first, ticks)
}

// checkLedger fails unless the ledger of job name has exactly one
// succeeded run for each of the ticks windows from first, and none other.
func checkLedger(t *testing.T, pool *pgxpool.Pool, name string, first time.Time, ticks int) {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT window_start, count(*) FROM pglease.run_history($1, 10000) WHERE outcome = 'succeeded' GROUP BY 1`, name)
	if err != nil {
		t.Fatal(err)
	}
	successes := map[time.Time]int64{}
	for rows.Next() {
		var w time.Time
		var n int64
		if err := rows.Scan(&w, &n); err != nil {
			t.Fatal(err)
		}
		successes[w.UTC()] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for k := range ticks {
		w := first.Add(time.Duration(k) * cronWindow).UTC()
		if successes[w] != 1 {
			t.Errorf("%s: window %s (tick %d) has %d successful runs, want 1", name, w.Format(time.RFC3339), k, successes[w])
		}
		delete(successes, w)
	}
	for w, n := range successes {
		t.Errorf("%s: %d successful runs in window %s, which no tick fired for", name, n, w.Format(time.RFC3339))
	}
}

// testRunCronFlags: the cron flags' bad values and meaningless
// combinations are refused at the command line, naming the flag, and
// change nothing.
func testRunCronFlags(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hold-at-least", "0s"}, "--hold-at-least must be more than 0"},
		{[]string{"--hold-at-least", "-1s"}, "--hold-at-least must be more than 0"},
		{[]string{"--hold-at-least", "25h"}, "at most 24h0m0s"},
		{[]string{"--once-per", "0s"}, "--once-per must be more than 0"},
		{[]string{"--once-per", "-5m"}, "--once-per must be more than 0"},
		{[]string{"--skip-status", "3"}, "--skip-status has no meaning"},
		{[]string{"--once-per", "1m", "--skip-status", "256"}, "--skip-status must be from 0 to 255"},
		{[]string{"--hold-at-least", "10s", "--wait"}, "--hold-at-least with --wait"},
		{[]string{"--hold-at-least", "5m", "--once-per", "5m"}, "must be shorter than the --once-per window"},
	} {
		args := append(append([]string{"run", "--lease", "bad"}, tc.args...), "--", "true")
		r := c.mustRun(exitUsage, args...)
		requireContains(t, strings.Join(tc.args, " "), r.stderr, tc.want)
	}
	r := c.mustRun(exitUsage, "run", "--slot", "s:1", "--once-per", "1m", "--", "true")
	requireContains(t, "--once-per without --lease", r.stderr, "need a --lease")
	pool := pgtest.Pool(t, url)
	var n int
	if err := pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM pglease.leases) + (SELECT count(*) FROM pglease.runs)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("refused runs left %d lease or ledger rows, want none", n)
	}
}

// testRunOncePer: a success closes the window (the next run skips, exit
// 0 or --skip-status), a failure leaves it open; history and status show
// the runs.
func testRunOncePer(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	// A window of 366 days: every run below falls in the same one (its
	// nearest boundary changes once in 366 days).
	c.mustRun(3, "run", "--lease", "daily", "--once-per", "8784h", "--", "sh", "-c", "exit 3")
	c.mustRun(0, "run", "--lease", "daily", "--once-per", "8784h", "--", "true")
	c.mustRun(0, "run", "--lease", "daily", "--once-per", "8784h", "--", "sh", "-c", "echo ran again; exit 1")
	r := c.mustRun(9, "run", "--lease", "daily", "--once-per", "8784h", "--skip-status", "9", "--", "true")
	if r.stdout != "" || r.stderr != "" {
		t.Fatalf("a skipped run printed something:\n%s", r)
	}
	h := c.mustRun(0, "history", "daily", "--json")
	for _, want := range []string{`"outcome": "succeeded"`, `"outcome": "failed"`, `"exit_status": 3`} {
		requireContains(t, "history --json", h.stdout, want)
	}
	if strings.Count(h.stdout, `"fence"`) != 2 {
		t.Fatalf("history lists %d runs, want 2 (the failure, the success)\n%s", strings.Count(h.stdout, `"fence"`), h.stdout)
	}
	s := c.mustRun(0, "status")
	requireContains(t, "status", s.stdout, "JOB", "daily", "succeeded")
	c.mustRun(exitUsage, "history")
	c.mustRun(exitUsage, "history", "daily", "--limit", "0")
}
