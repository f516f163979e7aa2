//go:build proof

package proof

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/history"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// fleet records the workloads of supervisors of one lease: when each ran
// (on one monotonic clock shared by every supervisor of the test), under
// which fence, when it returned by the wall clock (to compare with the
// server's expiry, same machine), and what its fenced writes got.
type fleet struct {
	name string
	rec  *history.Recorder

	mu          sync.Mutex
	spans       []history.Span
	ends        []time.Time // wall clock at each span's end
	writesOK    int
	writesLost  int // refused: ErrLeaseLost
	writesOther int // connection errors, cancellation
}

func newFleet(name string) *fleet {
	return &fleet{name: name, rec: history.NewRecorder()}
}

// workload returns sup's workload: fenced writes through db every few
// milliseconds until its context is cancelled, or until hold has passed
// when hold > 0 (then it returns by itself and the lease is handed over).
func (f *fleet) workload(sup *supervisor.Supervisor, db pglease.DB, hold time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		start := f.rec.Now()
		fence := sup.Fence()
		for ctx.Err() == nil && (hold <= 0 || f.rec.Now()-start < hold) {
			err := pglease.WithFence(ctx, db, f.name, fence, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, writeSQL, f.name, fence, sup.Holder())
				return err
			})
			f.mu.Lock()
			switch {
			case err == nil:
				f.writesOK++
			case errors.Is(err, pglease.ErrLeaseLost):
				f.writesLost++
			default:
				f.writesOther++
			}
			f.mu.Unlock()
			sleep(ctx, 10*time.Millisecond)
		}
		end := time.Now()
		f.mu.Lock()
		f.spans = append(f.spans, history.Span{Name: f.name, Owner: sup.Holder(), Fence: fence, Start: start, End: f.rec.At(end)})
		f.ends = append(f.ends, end)
		f.mu.Unlock()
		return nil
	}
}

// runs returns the number of workload runs so far.
func (f *fleet) runs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.spans)
}

// fleetResult is what check measured.
type fleetResult struct {
	runs, writesOK, writesLost, writesOther int
	margins                                 []time.Duration // server expiry - workload end, sorted
	server                                  history.ServerReport
}

func (r fleetResult) String() string {
	s := fmt.Sprintf("%d workload runs, never two at once; fenced writes %d committed, %d refused (lease lost), %d failed otherwise; %s",
		r.runs, r.writesOK, r.writesLost, r.writesOther, r.server.Summary())
	if n := len(r.margins); n > 0 {
		s += fmt.Sprintf("; margin server expiry - workload end: min %s, median %s, max %s",
			r.margins[0].Round(time.Millisecond), r.margins[n/2].Round(time.Millisecond), r.margins[n-1].Round(time.Millisecond))
	}
	return s
}

// check asserts the safety claims over what the fleet recorded and the
// server's history read through pool: never two workloads at once; every
// fenced write committed under the current, live tenure (server order);
// every workload returned before the server's expiry of its tenure.
func (f *fleet) check(t *testing.T, pool *pgxpool.Pool) fleetResult {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	_, vs := history.CheckSpans(f.spans, 1)
	failViolations(t, "workloads", vs)
	evs := readAudit(t, pool)
	res := fleetResult{runs: len(f.spans), writesOK: f.writesOK, writesLost: f.writesLost, writesOther: f.writesOther,
		server: history.CheckServer(evs, nil)}
	failViolations(t, "server history", res.server.Violations)
	exp := maxExpiry(evs)
	for i, s := range f.spans {
		e, ok := exp[tenureKey{f.name, 0, s.Fence}]
		if !ok {
			t.Errorf("workload of %s ran under fence %d, which the server never granted", s.Owner, s.Fence)
			continue
		}
		m := e.Sub(f.ends[i])
		if m <= 0 {
			t.Errorf("workload of %s (fence %d) returned %s after the server's expiry of its tenure", s.Owner, s.Fence, -m)
		}
		res.margins = append(res.margins, m)
	}
	slices.Sort(res.margins)
	return res
}

// newSupervisor returns a supervisor of name on db; observe, when not nil,
// receives its events.
func newSupervisor(t *testing.T, db pglease.DB, name string, cfg supervisor.Config) *supervisor.Supervisor {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := supervisor.NewLease(db, name, cfg)
	if err != nil {
		t.Fatalf("supervisor.New: %v", err)
	}
	return s
}

// waitFor polls cond every 5ms until it holds or timeout passes; time
// passing is what the faults are about, so a bounded poll is the honest
// wait here.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
