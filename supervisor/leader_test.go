package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/supervisor"
)

// fleet is the supervisors of one lease, each run until stopped, with
// their events on one channel.
type fleet struct {
	t      *testing.T
	events chan observed
	rec    *recorder
	mu     sync.Mutex
	causes map[int64]error // fence -> the workload context's cause
	log    []observed
}

// observed is an event and the holder of the supervisor that emitted it.
type observed struct {
	self string
	supervisor.Event
}

// start runs a supervisor with holder and value until the returned stop
// is called; stop waits for Run to return.
func (f *fleet) start(db pglease.DB, holder, value string) (stop func()) {
	s := newSupervisor(f.t, db, "lead", supervisor.Config{
		Holder: holder, Value: value, TTL: 6 * time.Second,
		Observer: func(e supervisor.Event) { f.events <- observed{self: holder, Event: e} },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(ctx context.Context) error {
			err := f.rec.workload(s, time.Hour)(ctx)
			f.mu.Lock()
			f.causes[s.Fence()] = context.Cause(ctx)
			f.mu.Unlock()
			return err
		})
	}()
	stopped := false
	f.t.Cleanup(func() {
		if !stopped {
			cancel()
			<-done
		}
	})
	return func() {
		stopped = true
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			f.t.Errorf("Run of %s returned %v, want context.Canceled", holder, err)
		}
	}
}

// await returns the next event that match accepts, keeping every event
// in f.log; it fails the test after a minute.
func (f *fleet) await(what string, match func(observed) bool) observed {
	f.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case e := <-f.events:
			f.log = append(f.log, e)
			if e.Kind == supervisor.EventLost {
				f.t.Fatalf("%s lost its tenure (fence %d): %v", e.Holder, e.Fence, e.Err)
			}
			if match(e) {
				return e
			}
		case <-timeout:
			f.t.Fatalf("no event in a minute: %s", what)
		}
	}
}

// TestRollingHandover: a fleet of 3 supervisors is restarted in turn, the
// leader first asked to release to the next instance before it is
// stopped. Leadership moves 3 times, each to the preferred instance, with
// the old workload stopped (cause ErrReleaseRequested) before the new one
// starts, fences rising by one (no lost tenure), and each gap no longer
// than a handover (bounded by the TTL: through PgBouncer the new holder
// wakes at the reserved grant's expiry, not at a NOTIFY). The standbys see
// the leader's value in EventLeaderSeen.
func TestRollingHandover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	f := &fleet{t: t, events: make(chan observed, 1000), rec: newRecorder(t, -1), causes: map[int64]error{}}
	holder := func(i, gen int) string { return fmt.Sprintf("node-%d-gen%d", i, gen) }
	value := func(i int) string { return fmt.Sprintf("10.0.0.%d:8080", i) }
	gens := []int{0, 0, 0}
	stops := make([]func(), 3)

	stops[0] = f.start(pool, holder(0, 0), value(0))
	first := f.await("node 0 to lead", func(e observed) bool { return e.Kind == supervisor.EventAcquired })
	// awaitStandby waits for instance i to see the leader and its value:
	// it is then a candidate a release request may prefer.
	// (A refusal during a reservation names the preferred holder with the
	// last tenure's fence and no value: only the tenure's fence counts.)
	awaitStandby := func(i int, leader string, leaderValue string, fence int64) {
		t.Helper()
		f.await(holder(i, gens[i])+" to stand by", func(e observed) bool {
			if e.self != holder(i, gens[i]) || e.Kind != supervisor.EventLeaderSeen || e.Holder != leader || e.Fence != fence {
				return false
			}
			if e.Value != leaderValue {
				t.Fatalf("standby saw leader %s with value %q, want %q", e.Holder, e.Value, leaderValue)
			}
			return true
		})
	}
	for i := 1; i < 3; i++ {
		stops[i] = f.start(pool, holder(i, 0), value(i))
		awaitStandby(i, holder(0, 0), value(0), first.Fence)
	}

	fence := first.Fence
	var gaps []time.Duration
	for k := range 3 {
		next := (k + 1) % 3
		old, to := holder(k, gens[k]), holder(next, gens[next])
		requested := time.Now()
		r, asked, err := pgleaseadmin.RequestRelease(ctx, pool, "lead", pgleaseadmin.ReleaseRequest{To: to})
		if err != nil || !asked || r.Holder != old || r.Fence != fence {
			t.Fatalf("step %d: RequestRelease to %s: got %+v (requested %t), %v; want %s's fence %d", k, to, r, asked, err, old, fence)
		}
		f.await(old+" to be asked", func(e observed) bool {
			return e.Kind == supervisor.EventReleaseRequested && e.Holder == old
		})
		acq := f.await(to+" to lead", func(e observed) bool { return e.Kind == supervisor.EventAcquired })
		if acq.Holder != to || acq.Fence != fence+1 {
			t.Fatalf("step %d: %s took fence %d, want %s with fence %d", k, acq.Holder, acq.Fence, to, fence+1)
		}
		t.Logf("step %d: %s -> %s in %s from the request", k, old, to, time.Since(requested).Round(time.Millisecond))
		fence = acq.Fence
		// Restart the old leader as a new instance.
		stops[k]()
		gens[k]++
		stops[k] = f.start(pool, holder(k, gens[k]), value(k))
		awaitStandby(k, to, value(next), fence)
	}
	for i := range stops {
		stops[i]()
	}
	f.rec.check()
	f.mu.Lock()
	defer f.mu.Unlock()
	runs := f.rec.runs
	for i := 1; i < len(runs); i++ {
		gaps = append(gaps, runs[i].start.Sub(runs[i-1].end))
	}
	for i, run := range runs[:3] {
		if cause := f.causes[run.fence]; !errors.Is(cause, supervisor.ErrReleaseRequested) {
			t.Errorf("run %d (fence %d) was stopped with %v, want ErrReleaseRequested", i, run.fence, cause)
		}
	}
	t.Logf("gaps between the old workload's end and the new one's start: %v", gaps)
	for _, g := range gaps[:3] {
		if g > 2*6*time.Second {
			t.Errorf("a handover gap of %s: longer than two TTLs", g)
		}
	}
}
