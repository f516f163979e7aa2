package contract

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/pgtest"
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
	})
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
