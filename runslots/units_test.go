package runslots_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
)

// TestUnitsInvalid: bad unit counts are refused before any round trip,
// naming the field, and the server refuses the others with nothing changed.
func TestUnitsInvalid(t *testing.T) {
	t.Parallel()
	c := newClient(t, noDB{t}, "big")
	for _, units := range []int{-1, 5} {
		want := runslots.Want{Scope: "gpu", Capacity: 4, Units: units}
		if _, err := c.TryClaim(context.Background(), want, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "Want.Units") {
			t.Fatalf("TryClaim of %d units with capacity 4: got %v, want ErrInvalidArgument naming Want.Units", units, err)
		}
		if _, err := c.Claim(context.Background(), want, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "Want.Units") {
			t.Fatalf("Claim of %d units with capacity 4: got %v, want ErrInvalidArgument naming Want.Units", units, err)
		}
	}
	wants := []runslots.Want{{Scope: "gpu", Capacity: 4, Units: 5}}
	if _, err := c.TryClaimAll(context.Background(), wants, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "wants[0].Units") {
		t.Fatalf("TryClaimAll of 5 units with capacity 4: got %v, want ErrInvalidArgument naming wants[0].Units", err)
	}

	// A live holder claimed with capacity 2: 3 units cannot fit (PGL06).
	db := newPool(t, 4)
	mustClaim(t, newClient(t, db, "small"), "gpu", 2, time.Minute)
	_, err := newClient(t, db, "big").TryClaim(context.Background(), runslots.Want{Scope: "gpu", Capacity: 8, Units: 3}, time.Minute)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "PGL06" {
		t.Fatalf("3 units where a live holder claimed capacity 2: got %v, want SQLSTATE PGL06", err)
	}
	if got := inUse(t, db, "gpu"); got != 1 {
		t.Fatalf("after the refused claim: %d live holders, want 1 (nothing changed)", got)
	}
}

// TestUnits: claims of k units of capacity N never hold more than N units.
func TestUnits(t *testing.T) {
	t.Parallel()
	db := newPool(t, 4)
	ctx := context.Background()
	four := mustClaimUnits(t, newClient(t, db, "four"), "gpu", 8, 4)
	if four.Units() != 4 {
		t.Fatalf("Units: got %d, want 4", four.Units())
	}
	mustClaimUnits(t, newClient(t, db, "three"), "gpu", 8, 3)
	// 7 of 8 in use: 2 units do not fit, 1 does.
	_, err := newClient(t, db, "two").TryClaim(ctx, runslots.Want{Scope: "gpu", Capacity: 8, Units: 2}, time.Minute)
	var full *runslots.FullError
	if !errors.As(err, &full) || full.InUse != 7 {
		t.Fatalf("2 units with 7 of 8 in use: got %v, want a *FullError with InUse 7", err)
	}
	one := mustClaimUnits(t, newClient(t, db, "one"), "gpu", 8, 1)
	var units int
	if err := db.QueryRow(ctx, `SELECT units_in_use FROM pglease.slot_scope_status WHERE scope = 'gpu'`).Scan(&units); err != nil || units != 8 {
		t.Fatalf("slot_scope_status.units_in_use: got %d (%v), want 8", units, err)
	}
	mustRelease(t, four)
	mustRelease(t, one)
	// 5 free: the 2-unit claim fits now.
	mustClaimUnits(t, newClient(t, db, "two"), "gpu", 8, 2)
}

func mustClaimUnits(t testing.TB, c *runslots.Client, scope string, capacity, units int) *runslots.Slot {
	t.Helper()
	s, err := c.TryClaim(context.Background(), runslots.Want{Scope: scope, Capacity: capacity, Units: units}, time.Minute)
	if err != nil {
		t.Fatalf("TryClaim(%q, capacity %d, %d units) as %s: %v", scope, capacity, units, c.Holder(), err)
	}
	return s
}

// starvationHold is how long each 1-unit claimer of TestNoStarvation holds
// its slot; starvationBound is the bound the 4-unit claim must meet: it is
// the head of the queue from its first refusal, so no later claim takes
// the units it needs, and the three units held then are free within one
// hold (each of their holders releases after starvationHold).
const (
	starvationHold  = 100 * time.Millisecond
	starvationBound = 30 * starvationHold // one hold, and room for a loaded machine
)

// TestNoStarvation: a stream of 1-unit claimers keeps a scope of capacity
// 4 busy (three of them hold a unit at every moment, each claiming again
// as soon as it released); a blocking claim of 4 units still gets in
// within starvationBound of its first refusal, while the stream goes on.
func TestNoStarvation(t *testing.T) {
	t.Parallel()
	db := newPool(t, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	started := make(chan struct{}, 3)
	// Each 1-unit claimer holds its first slot until the 4-unit claim was
	// refused once, so that the claim meets a busy scope however slowly
	// the machine runs; from then on the stream goes on.
	firstRefusal := make(chan struct{})
	for i := range 3 {
		c := newClient(t, db, "small-"+string(rune('a'+i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for ctx.Err() == nil {
				s, err := c.Claim(ctx, runslots.Want{Scope: "pool", Capacity: 4}, time.Minute)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				held := time.After(starvationHold)
				var gate <-chan struct{} // nil: never ready
				if first {
					started <- struct{}{}
					first = false
					held, gate = nil, firstRefusal
				}
				select {
				case <-held:
				case <-gate:
				case <-ctx.Done():
				}
				if err := s.Release(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 3 {
		<-started
	}
	var refused time.Time
	big, err := runslots.New(db, runslots.Config{Holder: "big", OnWait: func(error) {
		if refused.IsZero() {
			refused = time.Now()
			close(firstRefusal)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithTimeout(ctx, 10*starvationBound)
	defer bcancel()
	s, err := big.Claim(bctx, runslots.Want{Scope: "pool", Capacity: 4, Units: 4}, time.Minute)
	got := time.Now()
	if err != nil {
		t.Fatalf("Claim of 4 units: %v (starved by the 1-unit claims)", err)
	}
	if refused.IsZero() {
		t.Fatal("the 4-unit claim was never refused: the stream did not keep the scope busy")
	}
	bound := starvationBound
	if pooled(t, db) {
		// Through a pooler in transaction mode nothing LISTENs: a waiting
		// claim looks again at least every 5 s, not at the release.
		bound += 5 * time.Second
	}
	if d := got.Sub(refused); d > bound {
		t.Fatalf("the 4-unit claim got in %v after its first refusal, want at most %v", d, bound)
	}
	if units := s.Units(); units != 4 {
		t.Fatalf("Units: got %d, want 4", units)
	}
	if err := s.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("1-unit claimer: %v", err)
	}
}

// pooled reports whether db reaches the server through a pooler (make
// test-pgbouncer): the server's backend PID differs from the one the
// connection was given.
func pooled(t *testing.T, db *pgxpool.Pool) bool {
	t.Helper()
	conn, err := db.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	var pid int64
	if err := conn.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	return uint32(pid) != conn.Conn().PgConn().PID()
}
