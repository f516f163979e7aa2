package contract

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

type tenure struct {
	fence     int64
	holder    string
	expiresAt time.Time // as granted; the race never renews
	released  bool
}

type raceStats struct {
	tenures    []tenure
	refusals   int
	writes     int
	lostWrites int // fenced writes refused with PGL01 (tenure ran out)
	releases   int
	expiries   int // tenures left to expire
}

// TestLeaseRace has 16 workers race for one lease with a 300 ms TTL for two
// seconds. A winner makes three fenced writes (assert_held and an insert in
// one transaction), then releases or walks away and lets the lease expire.
// The log must show fences in commit order never going down, and no fence
// ever handed to two holders; by the server's timestamps, no tenure began
// before the previous one had expired, unless it was released.
func TestLeaseRace(t *testing.T) {
	t.Parallel()
	const (
		workers = 16
		runFor  = 2 * time.Second
		ttl     = 300 * time.Millisecond
	)
	url := pgtest.NewMigrated(t)
	pool := newPool(t, url, workers+2)
	mustExec(t, pool, `CREATE TABLE public.fenced_log (
		id bigserial PRIMARY KEY, fence bigint NOT NULL, holder text NOT NULL)`)
	ctx := testContext(t)

	stats := make([]raceStats, workers)
	errs := make([]error, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			<-start
			errs[w] = leaseRaceWorker(ctx, pool, w, ttl, time.Now().Add(runFor), &stats[w])
		})
	}
	close(start)
	wg.Wait()
	for w, err := range errs {
		if err != nil {
			t.Errorf("worker %d: %v", w, err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// No fence was ever returned to two holders, and new tenures got
	// consecutive fences.
	var total raceStats
	fenceHolder := map[int64]string{}
	byFence := map[int64]tenure{}
	for w := range stats {
		s := &stats[w]
		for _, tn := range s.tenures {
			if h, ok := fenceHolder[tn.fence]; ok && h != tn.holder {
				t.Errorf("fence %d was returned to %s and to %s", tn.fence, h, tn.holder)
			}
			fenceHolder[tn.fence] = tn.holder
			byFence[tn.fence] = tn
		}
		total.tenures = append(total.tenures, s.tenures...)
		total.refusals += s.refusals
		total.writes += s.writes
		total.lostWrites += s.lostWrites
		total.releases += s.releases
		total.expiries += s.expiries
	}
	fences := make([]int64, 0, len(fenceHolder))
	for f := range fenceHolder {
		fences = append(fences, f)
	}
	slices.Sort(fences)
	for i, f := range fences {
		if f != int64(i+1) {
			t.Fatalf("fences granted: got %v, want 1 to %d without gaps", fences, len(fences))
		}
	}
	if len(fences) < 2 {
		t.Fatalf("tenures: got %d, want several", len(fences))
	}
	// Mutual exclusion by the server clock: a tenure starts at its
	// expires_at - ttl, which must not be before the previous tenure's
	// expiry unless that one was released.
	for _, f := range fences[1:] {
		prev, cur := byFence[f-1], byFence[f]
		if start := cur.expiresAt.Add(-ttl); !prev.released && start.Before(prev.expiresAt) {
			t.Errorf("tenure %d of %s began at %v, before tenure %d of %s (not released) expired at %v",
				f, cur.holder, start, f-1, prev.holder, prev.expiresAt)
		}
	}

	// The log in commit order.
	rows, err := pool.Query(ctx, `SELECT id, fence, holder FROM public.fenced_log ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var logRows, prevFence int64
	logHolder := map[int64]string{}
	for rows.Next() {
		var id, fence int64
		var holder string
		if err := rows.Scan(&id, &fence, &holder); err != nil {
			t.Fatal(err)
		}
		logRows++
		if fence < prevFence {
			t.Errorf("log id %d: fence %d after fence %d, want non-decreasing", id, fence, prevFence)
		}
		prevFence = fence
		if h, ok := logHolder[fence]; ok && h != holder {
			t.Errorf("log id %d: fence %d written by %s and by %s", id, fence, h, holder)
		}
		logHolder[fence] = holder
		if h, ok := fenceHolder[fence]; !ok || h != holder {
			t.Errorf("log id %d: fence %d written by %s, but it was granted to %q", id, fence, holder, h)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if logRows != int64(total.writes) {
		t.Errorf("log rows: got %d, want the %d committed fenced writes", logRows, total.writes)
	}
	t.Logf("%d tenures (%d released, %d left to expire), %d refused acquires, %d fenced writes, %d refused with PGL01",
		len(fences), total.releases, total.expiries, total.refusals, total.writes, total.lostWrites)
}

func leaseRaceWorker(ctx context.Context, pool *pgxpool.Pool, w int, ttl time.Duration, until time.Time, st *raceStats) error {
	rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
	generation := 0
	holder := fmt.Sprintf("w%02d.%d", w, generation)
	for time.Now().Before(until) {
		r, err := tryAcquire(ctx, pool, "contested", holder, ttl)
		if err != nil {
			return fmt.Errorf("acquire: %w", err)
		}
		if !r.Acquired {
			st.refusals++
			// Pacing, not synchronisation: don't spin the CPU the
			// holder needs.
			time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond)
			continue
		}
		st.tenures = append(st.tenures, tenure{fence: r.Fence, holder: holder, expiresAt: r.ExpiresAt})
		for range 3 {
			err := fencedWrite(ctx, pool, r.Fence, holder)
			if pgCode(err) == "PGL01" {
				st.lostWrites++
				break
			}
			if err != nil {
				return fmt.Errorf("fenced write with fence %d: %w", r.Fence, err)
			}
			st.writes++
		}
		// The first tenure expires and the second is released, so both
		// endings happen; after that it is random.
		expire := r.Fence == 1 || (r.Fence != 2 && rng.IntN(2) == 0)
		if expire {
			// Walk away: a new identity, so the old tenure is not renewed
			// by a re-entrant acquire and must expire.
			st.expiries++
			generation++
			holder = fmt.Sprintf("w%02d.%d", w, generation)
			continue
		}
		var released bool
		err = pool.QueryRow(ctx, `SELECT released FROM pglease.release($1, $2, $3)`,
			"contested", holder, r.Fence).Scan(&released)
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		if released {
			st.releases++
			st.tenures[len(st.tenures)-1].released = true
		} else {
			st.expiries++ // it ran out during the writes
		}
		time.Sleep(time.Duration(1+rng.IntN(4)) * time.Millisecond) // pacing: let others in
	}
	return nil
}

func fencedWrite(ctx context.Context, pool *pgxpool.Pool, fence int64, holder string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if err := assertHeld(ctx, tx, "contested", fence); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO public.fenced_log (fence, holder) VALUES ($1, $2)`, fence, holder); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// testClaimSlotRace has 64 goroutines claim one slot of capacity 5 at once,
// five rounds with fresh scopes: exactly 5 win, slots 1 to 5.
func testClaimSlotRace(t *testing.T, db *testDB) {
	const (
		claimers = 64
		capacity = 5
		rounds   = 5
	)
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	for round := range rounds {
		scope := n(fmt.Sprintf("round-%d", round))
		results := make([]claimResult, claimers)
		errs := make([]error, claimers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for g := range claimers {
			wg.Go(func() {
				<-start
				results[g], errs[g] = tryClaimSlot(ctx, pool, scope, fmt.Sprintf("g%02d", g), capacity, time.Minute)
			})
		}
		close(start)
		wg.Wait()

		var slots []int32
		for g, r := range results {
			if errs[g] != nil {
				t.Fatalf("round %d claimer %d: %v", round, g, errs[g])
			}
			if !r.Claimed {
				if r.Slot != nil || r.Fence != nil || r.InUse != capacity {
					t.Errorf("round %d claimer %d refused: got %s, want slot and fence NULL, in_use %d", round, g, r, capacity)
				}
				continue
			}
			if *r.Fence != 1 {
				t.Errorf("round %d claimer %d: got fence %d, want 1 on a fresh scope", round, g, *r.Fence)
			}
			slots = append(slots, *r.Slot)
		}
		slices.Sort(slots)
		if want := []int32{1, 2, 3, 4, 5}; !slices.Equal(slots, want) {
			t.Fatalf("round %d: slots won: got %v, want %v", round, slots, want)
		}
		if inUse, n := scopeStatus(t, pool, scope); inUse != capacity || n != capacity {
			t.Fatalf("round %d: slot_scope_status: got in_use %d slots %d, want %d, %d", round, inUse, n, capacity, capacity)
		}
	}

	// The cap is on live holders, not on slot rows: after the capacity
	// shrinks to 3 with slots 4 and 5 live, racing claimers may take one
	// of slots 1 to 3, and only one of them.
	scope := n("shrunk")
	for i := int32(1); i <= capacity; i++ {
		mustClaimSlot(t, pool, scope, fmt.Sprintf("first-%d", i), capacity, time.Minute, i, 1)
	}
	for i := int32(1); i <= 3; i++ {
		releaseSlot(t, pool, scope, i, fmt.Sprintf("first-%d", i), 1)
	}
	results := make([]claimResult, claimers)
	errs := make([]error, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Go(func() {
			<-start
			results[g], errs[g] = tryClaimSlot(ctx, pool, scope, fmt.Sprintf("g%02d", g), 3, time.Minute)
		})
	}
	close(start)
	wg.Wait()
	winners := 0
	for g, r := range results {
		if errs[g] != nil {
			t.Fatalf("shrunk claimer %d: %v", g, errs[g])
		}
		if r.Claimed {
			winners++
			if *r.Slot > 3 || r.InUse != 3 {
				t.Errorf("shrunk claimer %d: got %s, want a slot numbered 1..3 and in_use 3", g, r)
			}
		}
	}
	if winners != 1 {
		t.Fatalf("claims won with capacity 3 and 2 live: got %d, want 1", winners)
	}
}

// testClaimSlotsRace has 16 goroutines claim one slot in each of two scopes
// of capacity 3, half of them naming the scopes in the other order: no
// deadlock, exactly 3 win both, and the losers hold nothing.
func testClaimSlotsRace(t *testing.T, db *testDB) {
	const claimers = 16
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	claimed := make([]bool, claimers)
	errs := make([]error, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for g := range claimers {
		wg.Go(func() {
			scopes := []string{n("left"), n("right")}
			if g%2 == 1 {
				scopes = []string{n("right"), n("left")}
			}
			<-start
			errs[g] = pool.QueryRow(ctx, `SELECT claimed FROM pglease.claim_slots($1, $2, ARRAY[3, 3], '1 min')`,
				n(fmt.Sprintf("g%02d", g)), scopes).Scan(&claimed[g])
		})
	}
	close(start)
	wg.Wait()

	winners := 0
	for g := range claimers {
		if errs[g] != nil {
			t.Fatalf("claimer %d: %v", g, errs[g])
		}
		var held int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pglease.slot_status WHERE holder = $1 AND state = 'held'`,
			n(fmt.Sprintf("g%02d", g))).Scan(&held); err != nil {
			t.Fatal(err)
		}
		want := 0
		if claimed[g] {
			winners++
			want = 2
		}
		if held != want {
			t.Errorf("claimer %d (claimed=%v): holds %d slots, want %d", g, claimed[g], held, want)
		}
	}
	if winners != 3 {
		t.Fatalf("winners: got %d, want 3", winners)
	}
}
