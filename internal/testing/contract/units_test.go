package contract

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// Weighted slot claims and the scope's queue (docs/sql.md#slots), and
// their rows of docs/security.md's threat table.
func TestWeightedSlots(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"UnitsAllOrNothing", testUnitsAllOrNothing},
		{"BadUnitsChangeNothing", testBadUnitsChangeNothing},
		{"HeadKeepsItsRoom", testHeadKeepsItsRoom},
		{"DeadWaiterLapses", testDeadWaiterLapses},
		{"OneShotClaimsAreNotQueued", testOneShotClaimsAreNotQueued},
		{"ClaimInOpenTransactionDelaysNoRenewal", testClaimInOpenTransactionDelaysNoRenewal},
		{"TakeInPlaceDecidesAsEveryClaim", testTakeInPlaceDecidesAsEveryClaim},
		{"ReleaseWaitsWithoutTheScopeLock", testReleaseWaitsWithoutTheScopeLock},
		{"QueueFollowsTheClaims", testQueueFollowsTheClaims},
		{"QueuedReleaseLocksTheScopeFirst", testQueuedReleaseLocksTheScopeFirst},
	})
}

// TestQueueSurvivesPurge: a purge deletes a scope's row but not its live
// queue entries; the next claim in the scope reads them, so the queue's
// head keeps its room (a database of its own: purge is global).
func TestQueueSurvivesPurge(t *testing.T) {
	t.Parallel()
	runGroup(t, 4, []subtest{{"HeadKeepsItsRoom", testQueueSurvivesPurge}})
}

func testQueueSurvivesPurge(t *testing.T, db *testDB) {
	n := namer(t)
	for _, h := range []string{"x", "y", "z"} {
		claimUnits(t, db.pool, n("s"), h, 1, false)
	}
	if claimed, _ := claimUnits(t, db.pool, n("s"), "big", 4, true); claimed {
		t.Fatal("4 units with 3 of 4 in use: claimed")
	}
	admin := pgtest.Pool(t, db.url)
	// The three tenures over two hours ago, then a purge of what has been
	// free for an hour: the scope's slots and row go, its queue stays.
	mustExec(t, admin, `UPDATE pglease.slots SET expires_at = clock_timestamp() - interval '2 hours',
		check_at = clock_timestamp() - interval '2 hours' WHERE scope = $1`, n("s"))
	mustExec(t, admin, `SELECT pglease.purge('1 hour')`)
	var rows, queued int
	mustScan(t, admin, `SELECT (SELECT count(*) FROM pglease.slot_scopes WHERE scope = $1),
		(SELECT count(*) FROM pglease.slot_queue WHERE scope = $1)`, []any{n("s")}, &rows, &queued)
	if rows != 0 || queued != 1 {
		t.Fatalf("after the purge: %d scope rows, %d queue entries; want 0 and 1", rows, queued)
	}
	if claimed, inUse := claimUnits(t, db.pool, n("s"), "small", 1, false); claimed || inUse != 0 {
		t.Fatalf("1 unit in the purged scope while a 4-unit claim is queued: got claimed %v, in_use %d; want refused, 0", claimed, inUse)
	}
	if claimed, inUse := claimUnits(t, db.pool, n("s"), "big", 4, true); !claimed || inUse != 4 {
		t.Fatalf("the head's claim again: got claimed %v, in_use %d; want claimed, 4", claimed, inUse)
	}
}

// testReleaseWaitsWithoutTheScopeLock: a release of a slot whose row a
// transaction in flight holds (a renewal) waits for it, and holds no
// scope lock meanwhile: another holder's claim in the scope goes ahead.
// (release_slot takes the slot's lock and the scope's in one statement;
// the slot's must come first.)
func testReleaseWaitsWithoutTheScopeLock(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	c := mustClaimSlot(t, db.pool, n("s"), "a", 4, time.Hour, 1, 1)
	renewer, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = renewer.Rollback(context.Background()) }()
	if r := renewSlot(t, renewer, n("s"), *c.Slot, "a", *c.Fence, time.Hour); !r.Renewed {
		t.Fatal("a's renewal in a transaction: not renewed")
	}
	releaser := connect(t, db.url)
	releaserPID, renewerPID := backendPID(t, releaser), backendPID(t, renewer)
	released := make(chan error, 1)
	go func() {
		var ok bool
		err := releaser.QueryRow(ctx, `SELECT released FROM pglease.release_slot($1, $2, 'a', $3)`, n("s"), *c.Slot, *c.Fence).Scan(&ok)
		if err == nil && !ok {
			err = errors.New("released = false")
		}
		released <- err
	}()
	waitBlockedBy(t, db.pool, releaserPID, renewerPID)
	claimer := connect(t, db.url)
	mustExec(t, claimer, `SET lock_timeout = '5s'`)
	var claimed bool
	if err := claimer.QueryRow(ctx, `SELECT claimed FROM pglease.claim_slot($1, 'b', 4, '1 hour', 1)`, n("s")).Scan(&claimed); err != nil || !claimed {
		t.Fatalf("b's claim while a's release waits for a's renewal: got %v, %v; want claimed without waiting", claimed, err)
	}
	if err := renewer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatalf("a's release after the renewal committed: %v", err)
	}
}

// testQueuedReleaseLocksTheScopeFirst: while the scope's queue has a
// waiter, a release that finds the scope's row locked waits for that lock
// before it locks its slot, as claims take them (scope, then the holder's
// slot rows). A claim in flight is played by a transaction that holds the
// scope's row and then locks the releasing holder's rows, as a re-entrant
// claim of that holder does: it must get them once the release is
// waiting, and no deadlock may be found (before, the release locked its
// slot first and then waited for the scope: 40P01 after deadlock_timeout).
func testQueuedReleaseLocksTheScopeFirst(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	held := claimUnitsOf(t, db.pool, n("s"), "a", 1, 1, false)
	if claimed, _ := claimUnits(t, db.pool, n("s"), "w", 1, true); claimed {
		t.Fatal("w's claim of a full scope: claimed, want queued")
	}
	claim, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = claim.Rollback(context.Background()) }()
	mustExec(t, claim, `SET LOCAL lock_timeout = '5s'`)
	mustExec(t, claim, `SELECT 1 FROM pglease.slot_scopes WHERE scope = $1 FOR UPDATE`, n("s"))
	releaser := connect(t, db.url)
	releaserPID, claimPID := backendPID(t, releaser), backendPID(t, claim)
	released := make(chan error, 1)
	go func() {
		var ok bool
		err := releaser.QueryRow(ctx, `SELECT released FROM pglease.release_slot($1, $2, 'a', $3)`, n("s"), *held.slot, *held.fence).Scan(&ok)
		if err == nil && !ok {
			err = errors.New("released = false")
		}
		released <- err
	}()
	waitBlockedBy(t, db.pool, releaserPID, claimPID)
	if _, err := claim.Exec(ctx, `SELECT 1 FROM pglease.slots WHERE scope = $1 AND holder = 'a' FOR NO KEY UPDATE`, n("s")); err != nil {
		t.Fatalf("the claim in flight locking a's rows while a's release waits: %v", err)
	}
	if err := claim.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatalf("a's release after the claim committed: %v", err)
	}
}

// testQueueFollowsTheClaims: a refused claim that waits is queued, its
// entry goes with its grant, and a one-shot claim is never queued.
func testQueueFollowsTheClaims(t *testing.T, db *testDB) {
	n := namer(t)
	queued := func() bool {
		t.Helper()
		var queued bool
		mustScan(t, db.pool, `SELECT EXISTS (SELECT 1 FROM pglease.slot_queue WHERE scope = $1)`, []any{n("s")}, &queued)
		return queued
	}
	var held []unitsClaim
	for _, h := range []string{"x", "y", "z"} {
		held = append(held, claimUnitsOf(t, db.pool, n("s"), h, 4, 1, false))
	}
	if queued() {
		t.Fatal("an entry in the queue after three granted claims")
	}
	if claimed, _ := claimUnits(t, db.pool, n("s"), "big", 4, true); claimed || !queued() {
		t.Fatalf("a refused 4-unit claim that waits: claimed %v, queued %v; want refused, queued", claimed, queued())
	}
	// x, y, z release (the releases count: the queue has a waiter); the
	// head gets its 4 units, and its entry goes with the claim.
	for i, h := range []string{"x", "y", "z"} {
		if !releaseSlot(t, db.pool, n("s"), *held[i].slot, h, *held[i].fence) {
			t.Fatalf("%s's release: refused", h)
		}
	}
	big := claimUnitsOf(t, db.pool, n("s"), "big", 4, 4, true)
	if !big.claimed || queued() {
		t.Fatalf("the head's claim: claimed %v, queued %v; want claimed, the queue empty", big.claimed, queued())
	}
	if !releaseSlot(t, db.pool, n("s"), *big.slot, "big", *big.fence) {
		t.Fatal("big's release: refused")
	}
	if c := claimUnitsOf(t, db.pool, n("s"), "small", 4, 1, false); !c.claimed || queued() {
		t.Fatalf("a one-shot claim on the empty queue: claimed %v, queued %v; want claimed, not queued", c.claimed, queued())
	}
}

// claimUnits claims units of scope (capacity 4, an hour) and returns
// claimed and in_use.
func claimUnits(t testing.TB, q querier, scope, holder string, units int, wait bool) (bool, int32) {
	t.Helper()
	var claimed bool
	var inUse int32
	mustScan(t, q, `SELECT claimed, in_use FROM pglease.claim_slot($1, $2, 4, '1 hour', $3, $4)`,
		[]any{scope, holder, units, wait}, &claimed, &inUse)
	return claimed, inUse
}

func testUnitsAllOrNothing(t *testing.T, db *testDB) {
	n := namer(t)
	for _, c := range []struct {
		holder  string
		units   int
		claimed bool
		inUse   int32
	}{{"a", 3, true, 3}, {"b", 2, false, 3}, {"c", 1, true, 4}, {"d", 1, false, 4}} {
		if claimed, inUse := claimUnits(t, db.pool, n("s"), c.holder, c.units, false); claimed != c.claimed || inUse != c.inUse {
			t.Fatalf("claim of %d units as %s: got claimed %v, in_use %d; want %v, %d", c.units, c.holder, claimed, inUse, c.claimed, c.inUse)
		}
	}
	var units int32
	mustScan(t, db.pool, `SELECT units_in_use FROM pglease.slot_scope_status WHERE scope = $1`, []any{n("s")}, &units)
	if units != 4 {
		t.Fatalf("units_in_use: got %d, want 4", units)
	}
}

// testBadUnitsChangeNothing: k = 0, k > capacity (22023) and k above a
// live holder's smaller capacity (PGL06) are refused, nothing changed.
func testBadUnitsChangeNothing(t *testing.T, db *testDB) {
	n := namer(t)
	mustClaimSlot(t, db.pool, n("s"), "small", 2, time.Hour, 1, 1)
	before := scopeSnapshot(t, db.pool, n("s"))
	for _, c := range []struct {
		sql   string
		code  string
		units int
	}{
		{`SELECT * FROM pglease.claim_slot($1, 'x', 4, '1 hour', $2)`, "22023", 0},
		{`SELECT * FROM pglease.claim_slot($1, 'x', 4, '1 hour', $2)`, "22023", 5},
		{`SELECT * FROM pglease.claim_slot($1, 'x', 4, '1 hour', $2)`, "PGL06", 3},
		{`SELECT * FROM pglease.claim_slots('x', ARRAY[$1], ARRAY[4], '1 hour', ARRAY[$2::integer])`, "PGL06", 3},
		{`SELECT * FROM pglease.claim_slots('x', ARRAY[$1], ARRAY[4], '1 hour', ARRAY[$2::integer])`, "22023", 0},
	} {
		_, err := db.pool.Exec(testContext(t), c.sql, n("s"), c.units)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != c.code {
			t.Fatalf("%s with %d units: got %v, want SQLSTATE %s", c.sql, c.units, err, c.code)
		}
	}
	if after := scopeSnapshot(t, db.pool, n("s")); after != before {
		t.Fatalf("a refused claim changed the tables:\nbefore %s\nafter  %s", before, after)
	}
}

// scopeSnapshot returns the rows of scope in the slot tables, for a subtest
// that shares its database with parallel ones (tablesSnapshot would see
// theirs change).
func scopeSnapshot(t testing.TB, q querier, scope string) string {
	t.Helper()
	var s string
	mustScan(t, q, `SELECT concat_ws(E'\n',
		(SELECT jsonb_agg(to_jsonb(s) ORDER BY s.slot) FROM pglease.slots AS s WHERE s.scope = $1),
		(SELECT jsonb_agg(to_jsonb(c)) FROM pglease.slot_scopes AS c WHERE c.scope = $1),
		(SELECT jsonb_agg(to_jsonb(w) ORDER BY w.holder) FROM pglease.slot_queue AS w WHERE w.scope = $1))`,
		[]any{scope}, &s)
	return s
}

// testHeadKeepsItsRoom: a blocking 4-unit claim refused first keeps the
// free unit against later 1-unit claims, blocking or not.
func testHeadKeepsItsRoom(t *testing.T, db *testDB) {
	n := namer(t)
	for _, h := range []string{"x", "y", "z"} {
		claimUnits(t, db.pool, n("s"), h, 1, false)
	}
	if claimed, _ := claimUnits(t, db.pool, n("s"), "big", 4, true); claimed {
		t.Fatal("4 units with 3 of 4 in use: claimed")
	}
	for _, wait := range []bool{false, true} {
		if claimed, inUse := claimUnits(t, db.pool, n("s"), "small", 1, wait); claimed || inUse != 3 {
			t.Fatalf("1 unit (p_wait %v) while a 4-unit claim is the head: got claimed %v, in_use %d; want refused, 3", wait, claimed, inUse)
		}
	}
}

// testDeadWaiterLapses: a queued waiter that never claims again holds its
// room only until its entry lapses (made to lapse here by moving until,
// as the clock would: min(retry_in, 5 s) + 2 s after its refusal).
func testDeadWaiterLapses(t *testing.T, db *testDB) {
	n := namer(t)
	for _, h := range []string{"x", "y", "z"} {
		claimUnits(t, db.pool, n("s"), h, 1, false)
	}
	claimUnits(t, db.pool, n("s"), "dead", 4, true)
	var bounded bool
	mustScan(t, db.pool, `SELECT until - clock_timestamp() <= interval '7 seconds' FROM pglease.slot_queue WHERE scope = $1`,
		[]any{n("s")}, &bounded)
	if !bounded {
		t.Fatal("a queued entry lasts more than 5 s + 2 s")
	}
	admin := pgtest.Pool(t, db.url)
	mustExec(t, admin, `UPDATE pglease.slot_queue SET until = clock_timestamp() - interval '1 ms' WHERE scope = $1`, n("s"))
	if claimed, inUse := claimUnits(t, db.pool, n("s"), "small", 1, false); !claimed || inUse != 4 {
		t.Fatalf("1 unit once the dead waiter lapsed: got claimed %v, in_use %d; want claimed, 4", claimed, inUse)
	}
	var queued int
	mustScan(t, db.pool, `SELECT count(*) FROM pglease.slot_queue WHERE scope = $1`, []any{n("s")}, &queued)
	if queued != 0 {
		t.Fatalf("the lapsed entry is still queued (%d entries)", queued)
	}
}

// testOneShotClaimsAreNotQueued: refused claims without p_wait (and the
// 0.2.0 forms) join no queue, so they hold no room.
func testOneShotClaimsAreNotQueued(t *testing.T, db *testDB) {
	n := namer(t)
	mustClaimSlot(t, db.pool, n("s"), "x", 1, time.Hour, 1, 1)
	mustExec(t, db.pool, `SELECT * FROM pglease.claim_slot($1, 'a', 1, '1 hour')`, n("s"))
	mustExec(t, db.pool, `SELECT * FROM pglease.claim_slot($1, 'b', 1, '1 hour', 1)`, n("s"))
	mustExec(t, db.pool, `SELECT * FROM pglease.claim_slots('c', ARRAY[$1], ARRAY[1], '1 hour')`, n("s"))
	var queued int
	mustScan(t, db.pool, `SELECT count(*) FROM pglease.slot_queue WHERE scope = $1`, []any{n("s")}, &queued)
	if queued != 0 {
		t.Fatalf("one-shot refused claims queued: %d entries, want 0", queued)
	}
}

// testClaimInOpenTransactionDelaysNoRenewal: a claim never writes a live
// holder's row, also one renewed after claims last looked at it, so a
// claim left open in a transaction delays no renewal.
func testClaimInOpenTransactionDelaysNoRenewal(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	mustClaimSlot(t, db.pool, n("s"), "a", 4, time.Hour, 1, 1)
	// As if a's row were due for a look (check_at passed, tenure renewed).
	admin := pgtest.Pool(t, db.url)
	mustExec(t, admin, `UPDATE pglease.slots SET check_at = '-infinity' WHERE scope = $1`, n("s"))
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if claimed, _ := claimUnits(t, tx, n("s"), "b", 2, true); !claimed {
		t.Fatal("claim of 2 units beside a's 1: refused")
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var renewed bool
	if err := db.pool.QueryRow(callCtx, `SELECT renewed FROM pglease.renew_slot($1, 1, 'a', 1, '1 hour')`, n("s")).Scan(&renewed); err != nil || !renewed {
		t.Fatalf("a's renewal while a claim's transaction is open: got %v, %v; want true at once", renewed, err)
	}
}

// unitsClaim is one claim_slot of units with its own capacity.
type unitsClaim struct {
	claimed bool
	slot    *int32
	fence   *int64
	inUse   int32
}

func claimUnitsOf(t testing.TB, q querier, scope, holder string, capacity, units int, wait bool) unitsClaim {
	t.Helper()
	var c unitsClaim
	mustScan(t, q, `SELECT claimed, slot, fence, in_use FROM pglease.claim_slot($1, $2, $3, '1 hour', $4, $5)`,
		[]any{scope, holder, capacity, units, wait}, &c.claimed, &c.slot, &c.fence, &c.inUse)
	return c
}

// testTakeInPlaceDecidesAsEveryClaim: claim_slot takes the one counted slot
// that ended in place in a single statement when nothing else is to do,
// and leaves every other case to the full decision. Each case here is one
// that single statement must leave alone (or get its count right); each
// fails if the statement loses the test that sends it there.
func testTakeInPlaceDecidesAsEveryClaim(t *testing.T, db *testDB) {
	n := namer(t)
	release := func(scope, holder string, c unitsClaim) {
		t.Helper()
		if !c.claimed || !releaseSlot(t, db.pool, scope, *c.slot, holder, *c.fence) {
			t.Fatalf("%s in %s: claimed %v, not released", holder, scope, c.claimed)
		}
	}
	// The scope's counter is the units of its counted slots, after every
	// claim.
	counted := func(scope string) {
		t.Helper()
		var ok bool
		mustScan(t, db.pool, `SELECT sc.counted = coalesce((SELECT sum(s.units) FROM pglease.slots AS s
			WHERE s.scope = sc.scope AND s.counted), 0) FROM pglease.slot_scopes AS sc WHERE sc.scope = $1`,
			[]any{scope}, &ok)
		if !ok {
			t.Fatalf("scope %s: its counter is not the units of its counted slots:\n%s", scope, scopeSnapshot(t, db.pool, scope))
		}
	}
	want := func(what string, c unitsClaim, claimed bool, slot, inUse int32) {
		t.Helper()
		if c.claimed != claimed || (claimed && (c.slot == nil || *c.slot != slot)) || c.inUse != inUse {
			t.Fatalf("%s: got claimed %v, slot %s, in_use %d; want claimed %v, slot %d, in_use %d",
				what, c.claimed, ptrString(c.slot), c.inUse, claimed, slot, inUse)
		}
	}

	// Other units than the ended tenure's: the counter follows.
	s := n("units")
	release(s, "a", claimUnitsOf(t, db.pool, s, "a", 4, 3, false))
	want("1 unit in place of 3", claimUnitsOf(t, db.pool, s, "b", 4, 1, false), true, 1, 1)
	counted(s)

	// Two counted slots ended: the other one is un-counted.
	s = n("two")
	a, b := claimUnitsOf(t, db.pool, s, "a", 4, 1, false), claimUnitsOf(t, db.pool, s, "b", 4, 1, false)
	release(s, "a", a)
	release(s, "b", b)
	want("1 unit after two releases", claimUnitsOf(t, db.pool, s, "c", 4, 1, false), true, 1, 1)
	counted(s)

	// A live holder claimed with a smaller capacity: 2 units do not fit
	// in its 2 beside it, although they would in the claim's 4.
	s = n("smaller")
	claimUnitsOf(t, db.pool, s, "a", 2, 1, false)
	release(s, "b", claimUnitsOf(t, db.pool, s, "b", 4, 1, false))
	want("2 units beside a holder of capacity 2", claimUnitsOf(t, db.pool, s, "c", 4, 2, false), false, 0, 1)
	counted(s)

	// The queue's head keeps its room: a release does not let a smaller
	// claim in ahead of it.
	s = n("queued")
	claimUnitsOf(t, db.pool, s, "x", 4, 2, false)
	y := claimUnitsOf(t, db.pool, s, "y", 4, 2, false)
	if c := claimUnitsOf(t, db.pool, s, "big", 4, 4, true); c.claimed {
		t.Fatal("4 units with 4 of 4 in use: claimed")
	}
	release(s, "y", y)
	want("1 unit while a 4-unit claim is the head", claimUnitsOf(t, db.pool, s, "w", 4, 1, false), false, 0, 2)
	counted(s)

	// The only counted slot that ended is numbered above the claim's
	// capacity: the claim takes the lowest free slot instead.
	s = n("above")
	a, b = claimUnitsOf(t, db.pool, s, "a", 4, 1, false), claimUnitsOf(t, db.pool, s, "b", 4, 1, false)
	c := claimUnitsOf(t, db.pool, s, "c", 4, 1, false)
	release(s, "c", c)
	release(s, "a", a)
	release(s, "b", b)
	d := claimUnitsOf(t, db.pool, s, "d", 4, 1, false)
	want("1 unit after three releases", d, true, 3, 1)
	release(s, "d", d)
	want("1 unit of capacity 2, slot 3 ended", claimUnitsOf(t, db.pool, s, "e", 2, 1, false), true, 1, 1)
	counted(s)
}

// TestQueueUnderPurgeTraffic: while workers claim (half of them queuing
// when refused) and release units in three small scopes, and a purger
// deletes free scopes as fast as it can, no scope has more units in use
// than its capacity (a database of its own: purge is global). With
// 0.2.0's pglease._scope_lock, which could
// return without the lock when a purge deleted the scope's row under it,
// four runs of four granted more than the capacity.
func TestQueueUnderPurgeTraffic(t *testing.T) {
	t.Parallel()
	runGroup(t, 10, []subtest{{"Traffic", testQueueUnderPurgeTraffic}})
}

func testQueueUnderPurgeTraffic(t *testing.T, db *testDB) {
	n := namer(t)
	ctx, cancel := context.WithTimeout(testContext(t), 3*time.Second)
	defer cancel()
	scopes := []string{n("a"), n("b"), n("c")}
	var wg sync.WaitGroup
	var claims, queued, checks atomic.Int64
	errs := make(chan error, 16)
	fail := func(err error) {
		if ctx.Err() == nil {
			select {
			case errs <- err:
			default:
			}
			cancel()
		}
	}
	for w := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 30))
			holder := fmt.Sprintf("w%d", w)
			for ctx.Err() == nil {
				scope := scopes[rng.IntN(len(scopes))]
				units, wait := 1+rng.IntN(3), w%2 == 0
				var claimed bool
				var slot *int32
				var fence *int64
				err := db.pool.QueryRow(ctx, `SELECT claimed, slot, fence FROM pglease.claim_slot($1, $2, 4, '1 hour', $3, $4)`,
					scope, holder, units, wait).Scan(&claimed, &slot, &fence)
				if err != nil {
					fail(fmt.Errorf("claim of %d units in %s as %s: %w", units, scope, holder, err))
					return
				}
				if !claimed {
					if wait {
						queued.Add(1)
					}
					continue
				}
				claims.Add(1)
				var released bool
				if err := db.pool.QueryRow(ctx, `SELECT released FROM pglease.release_slot($1, $2, $3, $4)`,
					scope, *slot, holder, *fence).Scan(&released); err != nil || !released {
					fail(fmt.Errorf("release of %s's slot %d in %s: %v, %w", holder, *slot, scope, released, err))
					return
				}
			}
		})
	}
	admin := pgtest.Pool(t, db.url)
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, err := admin.Exec(ctx, `SELECT pglease.purge('0')`); err != nil {
				fail(fmt.Errorf("purge: %w", err))
			}
		}
	})
	wg.Go(func() {
		for ctx.Err() == nil {
			var over int
			err := admin.QueryRow(ctx, `SELECT count(*) FROM pglease.slot_scope_status AS st
				WHERE st.scope = ANY ($1) AND st.units_in_use > 4`, scopes).Scan(&over)
			if err != nil {
				fail(fmt.Errorf("check: %w", err))
				return
			}
			if over != 0 {
				fail(fmt.Errorf("%d scopes over capacity 4", over))
				return
			}
			checks.Add(1)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if claims.Load() < 50 || queued.Load() < 10 || checks.Load() < 50 {
		t.Errorf("too little happened: %d claims granted, %d queued refusals, %d checks", claims.Load(), queued.Load(), checks.Load())
	}
	t.Logf("%d claims granted, %d queued refusals, %d checks", claims.Load(), queued.Load(), checks.Load())
}
