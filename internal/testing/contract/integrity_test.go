package contract

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestIntegrity: the findings of a hostile-client review, one subtest each.
// Each fails on the behavior the review found and passes on the contracts
// of sql/functions (docs/security.md).
func TestIntegrity(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"ReservationIsForTheRoleThatAsked", testReservationIsForTheRoleThatAsked},
		{"PurgeKeepsReservedRows", testPurgeKeepsReservedRows},
		{"RequestReleaseAmbiguousCandidate", testRequestReleaseAmbiguousCandidate},
		{"ClientPurgeDeletesOnlyItsOwnRows", testClientPurgeDeletesOnlyItsOwnRows},
		{"SuccessKeepsItsWindowClosed", testSuccessKeepsItsWindowClosed},
		{"HeadOfAnotherRoleBlockedByItsOwnUnits", testHeadOfAnotherRoleBlockedByItsOwnUnits},
		{"HeadKeepsRoomThirtySecondsAtMost", testHeadKeepsRoomThirtySecondsAtMost},
		{"Input", testIntegrityInput},
		{"ObserveHoldsNoLock", testObserveHoldsNoLock},
	})
}

// integrityPurges orders the purges of TestIntegrity's subtests, which
// share a database: the owner's purge deletes every subtest's free rows and
// moves the purge sequences. A subtest that counts on rows it freed
// surviving, or on the sequences standing still, holds it exclusively; one
// that runs an owner's purge holds it shared.
var integrityPurges sync.RWMutex

// clientPair creates two pglease_client login roles, A and B, and connects
// as each.
func clientPair(t *testing.T, db *testDB) (a, b *pgx.Conn, roleA loginRole) {
	t.Helper()
	adminURL := pgtest.AdminURL(t)
	roleA = createLoginRole(t, adminURL, db.url, true)
	roleB := createLoginRole(t, adminURL, db.url, true)
	return connectAs(t, db.url, roleA), connectAs(t, db.url, roleB), roleA
}

// grant acquires a new name and fails unless granted; it returns the
// fence, which is above the fence floor that other subtests' purges raise.
func grant(t *testing.T, q querier, name, holder string, ttl time.Duration) int64 {
	t.Helper()
	r := acquire(t, q, name, holder, ttl)
	if !r.Acquired || r.Holder != holder {
		t.Fatalf("acquire(%q, %q): got acquired=%v holder=%q, want acquired=true holder=%q", name, holder, r.Acquired, r.Holder, holder)
	}
	return r.Fence
}

// reserveForA2 sets up lease name reserved for A's holder "a-2": A's "a-1"
// holds it, A's "a-2" is refused with a value (a candidate), the owner
// requests the release for "a-2" for an hour, and "a-1" releases. It
// returns the fence of "a-1"'s tenure.
func reserveForA2(t *testing.T, db *testDB, a *pgx.Conn, name string) (fence int64) {
	t.Helper()
	fence = grant(t, a, name, "a-1", time.Hour)
	if ok, _, _ := acquireValue(t, a, name, "a-2", time.Hour, "addr-a2"); ok {
		t.Fatal(`A's "a-2" while "a-1" holds the lease: got acquired, want refused`)
	}
	var requested bool
	mustScan(t, db.pool, `SELECT requested FROM pglease.request_release($1, 'a-2', '1 hour')`, []any{name}, &requested)
	if !requested {
		t.Fatal(`request_release for "a-2": got requested = false, want true`)
	}
	if !release(t, a, name, "a-1", fence) {
		t.Fatal(`release by "a-1": got false, want true`)
	}
	return fence
}

// requireRefused fails unless role B's acquire of name under A's preferred
// holder string "a-2" is refused.
func requireRefused(t *testing.T, b *pgx.Conn, name, what string) {
	t.Helper()
	if r := acquire(t, b, name, "a-2", time.Hour); r.Acquired {
		t.Fatalf(`%s: B's acquire as "a-2": got acquired with fence %d, want refused (reserved for A's "a-2")`, what, r.Fence)
	}
}

// testReservationIsForTheRoleThatAsked: a release requested for candidate
// "a-2" of role A reserves the lease for that pair; role B under the same
// string is refused during the reservation (it was granted), and A's "a-2"
// gets the next fence.
func testReservationIsForTheRoleThatAsked(t *testing.T, db *testDB) {
	n := namer(t)
	a, b, _ := clientPair(t, db)
	lease := n("lead")
	fence := reserveForA2(t, db, a, lease)
	requireRefused(t, b, lease, "during the reservation")
	mustAcquire(t, a, lease, "a-2", time.Hour, fence+1)
}

// testPurgeKeepsReservedRows: a purge, by the owner or by a client, keeps a
// free lease row while it is reserved; deleting it let anyone create the row
// anew and take the reservation.
func testPurgeKeepsReservedRows(t *testing.T, db *testDB) {
	n := namer(t)
	a, b, _ := clientPair(t, db)
	lease := n("lead")
	fence := reserveForA2(t, db, a, lease)
	integrityPurges.RLock()
	mustExec(t, db.pool, `SELECT pglease.purge('0')`)
	mustExec(t, b, `SELECT pglease.purge('0')`)
	integrityPurges.RUnlock()
	var rows int
	mustScan(t, db.pool, `SELECT count(*) FROM pglease.leases WHERE name = $1`, []any{lease}, &rows)
	if rows != 1 {
		t.Fatalf("rows of the reserved lease after purges by the owner and by B: got %d, want 1", rows)
	}
	requireRefused(t, b, lease, "after the purges")
	// The row's own next fence, above every earlier one.
	mustAcquire(t, a, lease, "a-2", time.Hour, fence+1)
}

// testRequestReleaseAmbiguousCandidate: a holder string that is a candidate
// under two roles does not say whose the reservation would be: PGL05, and
// nothing changes.
func testRequestReleaseAmbiguousCandidate(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, _ := clientPair(t, db)
	lease := n("lead")
	grant(t, a, lease, "h", time.Hour)
	for _, q := range []*pgx.Conn{a, b} {
		if ok, _, _ := acquireValue(t, q, lease, "x", time.Hour, "addr-x"); ok {
			t.Fatal(`"x" while "h" holds the lease: got acquired, want refused`)
		}
	}
	snapshot := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT concat_ws(E'\n',
			(SELECT to_jsonb(l) FROM pglease.leases AS l WHERE l.name = $1),
			(SELECT jsonb_agg(to_jsonb(c) ORDER BY to_jsonb(c)::text) FROM pglease.candidates AS c WHERE c.name = $1))`,
			[]any{lease}, &s)
		return s
	}
	before := snapshot()
	_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.request_release($1, 'x', '1 hour')`, lease)
	requirePgError(t, err, "PGL05", "under 2 roles")
	if after := snapshot(); after != before {
		t.Fatalf("a refused request_release changed the lease:\ngot  %s\nwant %s", after, before)
	}
}

// testClientPurgeDeletesOnlyItsOwnRows: a client's purge deletes the free
// and expired lease rows and the free slot scopes its own role last held,
// not another role's; the owner's purge deletes those too.
func testClientPurgeDeletesOnlyItsOwnRows(t *testing.T, db *testDB) {
	n := namer(t)
	a, b, _ := clientPair(t, db)
	integrityPurges.Lock()
	defer integrityPurges.Unlock()
	for _, c := range []struct {
		q    *pgx.Conn
		role string
	}{{a, "a"}, {b, "b"}} {
		fence := grant(t, c.q, n(c.role+"-free"), "h", time.Hour)
		release(t, c.q, n(c.role+"-free"), "h", fence)
		grant(t, c.q, n(c.role+"-expired"), "h", time.Millisecond)
		waitLeaseState(t, db.pool, n(c.role+"-expired"), "expired")
		s := claimSlot(t, c.q, n(c.role+"-scope"), "h", 2, time.Hour)
		if !s.Claimed || !releaseSlot(t, c.q, n(c.role+"-scope"), *s.Slot, "h", *s.Fence) {
			t.Fatalf("claim and release in %s: got %s, want claimed and released", n(c.role+"-scope"), s)
		}
	}
	// present reports which of role's lease and scope rows exist.
	present := func(role string) string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT format('free %s, expired %s, scope %s, slots %s',
			(SELECT count(*) FROM pglease.leases WHERE name = $1),
			(SELECT count(*) FROM pglease.leases WHERE name = $2),
			(SELECT count(*) FROM pglease.slot_scopes WHERE scope = $3),
			(SELECT count(*) FROM pglease.slots WHERE scope = $3))`,
			[]any{n(role + "-free"), n(role + "-expired"), n(role + "-scope")}, &s)
		return s
	}
	const kept, gone = "free 1, expired 1, scope 1, slots 1", "free 0, expired 0, scope 0, slots 0"
	mustExec(t, b, `SELECT pglease.purge('0')`)
	if got := present("b"); got != gone {
		t.Fatalf("B's rows after B's purge: got %s, want %s", got, gone)
	}
	if got := present("a"); got != kept {
		t.Fatalf("A's rows after B's purge: got %s, want %s", got, kept)
	}
	mustExec(t, db.pool, `SELECT pglease.purge('0')`)
	if got := present("a"); got != gone {
		t.Fatalf("A's rows after the owner's purge: got %s, want %s", got, gone)
	}
}

// testSuccessKeepsItsWindowClosed: a purge keeps a success whose window has
// not ended, also when a newer success of the job exists (it deleted it,
// and the next tenure ran the job again in the same window).
func testSuccessKeepsItsWindowClosed(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, _, roleA := clientPair(t, db)
	job := n("job")
	// Both run_begin calls must land in one window: stay clear of the
	// half hour, where round(now / 1 hour) moves on.
	waitFor(t, 30*time.Second, "the server clock to be clear of the half hour", func() (bool, error) {
		var s float64
		err := db.pool.QueryRow(ctx, `SELECT mod(extract(epoch FROM clock_timestamp())::numeric, 3600)::float8`).Scan(&s)
		return s < 1770 || s >= 1800, err
	})
	fence := grant(t, a, job, "a", time.Hour)
	var run bool
	var window time.Time
	mustScan(t, a, `SELECT run, window_start FROM pglease.run_begin($1, 'a', $2, '1 hour')`, []any{job, fence}, &run, &window)
	if !run {
		t.Fatal("run_begin of the first tenure: got run = false, want true")
	}
	var recorded bool
	mustScan(t, a, `SELECT recorded FROM pglease.run_end($1, 'a', $2, 0)`, []any{job, fence}, &recorded)
	if !recorded {
		t.Fatal("run_end(0): got recorded = false, want true")
	}
	// A newer success (a later end) of a later, one-minute window of the
	// same job.
	mustExec(t, db.pool, `INSERT INTO pglease.runs (name, fence, window_start, run_window, holder, holder_role,
			started_at, ended_at, exit_status, outcome)
		VALUES ($1, $4::bigint + 100, $2::timestamptz + interval '1 minute', interval '1 minute', 'z', $3,
			clock_timestamp(), clock_timestamp(), 0, 'succeeded')`,
		job, window, roleA.name, fence)
	integrityPurges.RLock()
	mustExec(t, db.pool, `SELECT pglease.purge('0')`)
	integrityPurges.RUnlock()
	var kept int
	mustScan(t, db.pool, `SELECT count(*) FROM pglease.runs WHERE name = $1 AND fence = $2 AND outcome = 'succeeded'`,
		[]any{job, fence}, &kept)
	if kept != 1 {
		t.Fatalf("A's success after a purge, its window not ended: got %d rows, want 1", kept)
	}
	release(t, a, job, "a", fence)
	mustAcquire(t, a, job, "b", time.Hour, fence+1)
	var again time.Time
	var doneFence *int64
	mustScan(t, a, `SELECT run, window_start, done_fence FROM pglease.run_begin($1, 'b', $2, '1 hour')`,
		[]any{job, fence + 1}, &run, &again, &doneFence)
	if run || !again.Equal(window) || doneFence == nil || *doneFence != fence {
		t.Fatalf("run_begin of the next tenure: got run %v window %v done_fence %s, want false, %v, %d",
			run, again, ptrString(doneFence), window, fence)
	}
}

// testHeadOfAnotherRoleBlockedByItsOwnUnits: the queue's head keeps no room
// from other roles that it could only take once its own role released
// units; within one role it keeps its room whatever that role holds.
func testHeadOfAnotherRoleBlockedByItsOwnUnits(t *testing.T, db *testDB) {
	n := namer(t)
	a, b, _ := clientPair(t, db)
	queued := func(scope string) (entries int) {
		t.Helper()
		mustScan(t, db.pool, `SELECT count(*) FROM pglease.slot_queue WHERE scope = $1`, []any{scope}, &entries)
		return entries
	}
	// Capacity 4 (claimUnits). B's head of 4 units cannot fit beside B's
	// own unit: A's unit is granted.
	other := n("other")
	if claimed, _ := claimUnits(t, b, other, "b-s1", 1, false); !claimed {
		t.Fatal(`B's "b-s1", 1 unit of 4 in an empty scope: got refused, want claimed`)
	}
	if claimed, _ := claimUnits(t, b, other, "b-s2", 4, true); claimed || queued(other) != 1 {
		t.Fatalf(`B's "b-s2", 4 units with p_wait beside B's 1: got claimed %v, %d queued; want refused, 1 queued`, claimed, queued(other))
	}
	if claimed, inUse := claimUnits(t, a, other, "a-1", 1, false); !claimed || inUse != 2 {
		t.Fatalf("A's 1 unit while B's 4-unit head waits on B's own unit: got claimed %v, in_use %d; want claimed, 2", claimed, inUse)
	}
	// Within one role the head keeps its room.
	own := n("own")
	if claimed, _ := claimUnits(t, a, own, "a-1", 1, false); !claimed {
		t.Fatal(`A's "a-1", 1 unit of 4 in an empty scope: got refused, want claimed`)
	}
	if claimed, _ := claimUnits(t, a, own, "a-big", 4, true); claimed || queued(own) != 1 {
		t.Fatalf(`A's "a-big", 4 units with p_wait beside A's 1: got claimed %v, %d queued; want refused, 1 queued`, claimed, queued(own))
	}
	if claimed, inUse := claimUnits(t, a, own, "a-2", 1, false); claimed || inUse != 1 {
		t.Fatalf("A's 1 unit while A's own 4-unit claim is the head: got claimed %v, in_use %d; want refused, 1", claimed, inUse)
	}
}

// testHeadKeepsRoomThirtySecondsAtMost: roles working together (C holds a
// unit, B queues a claim of the whole capacity, which fits once C lets go)
// keep room from A's one-shot claims for 30 seconds from B's first refusal
// at most; then A's unit is granted while B still waits. The wait is not
// slept: B's entry is dated 31 seconds back, as the owner.
func testHeadKeepsRoomThirtySecondsAtMost(t *testing.T, db *testDB) {
	n := namer(t)
	a, b, _ := clientPair(t, db)
	c := connectAs(t, db.url, createLoginRole(t, pgtest.AdminURL(t), db.url, true))
	scope := n("s")
	if claimed, _ := claimUnits(t, c, scope, "c-1", 1, false); !claimed {
		t.Fatal("C's 1 unit of 4 in an empty scope: got refused, want claimed")
	}
	if claimed, _ := claimUnits(t, b, scope, "b-all", 4, true); claimed {
		t.Fatal("B's 4 units with p_wait beside C's 1: got claimed, want refused and queued")
	}
	if claimed, inUse := claimUnits(t, a, scope, "a-1", 1, false); claimed || inUse != 1 {
		t.Fatalf("A's 1 unit while B's fresh 4-unit head waits: got claimed %v, in_use %d; want refused, 1", claimed, inUse)
	}
	mustExec(t, db.pool, `UPDATE pglease.slot_queue SET since = clock_timestamp() - interval '31 seconds' WHERE scope = $1`, scope)
	if claimed, _ := claimUnits(t, b, scope, "b-all", 4, true); claimed {
		t.Fatal("B's 4 units again beside C's 1: got claimed, want refused (still queued)")
	}
	if claimed, inUse := claimUnits(t, a, scope, "a-1", 1, false); !claimed || inUse != 2 {
		t.Fatalf("A's 1 unit once B's head has waited 31 s: got claimed %v, in_use %d; want claimed, 2", claimed, inUse)
	}
}

// testIntegrityInput: NULL p_wait, ages over 100 years and a NULL p_for
// raise 22004/22023 naming the argument (not 22008, not p_ttl), and change
// nothing, the purge sequences included.
func testIntegrityInput(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	integrityPurges.Lock()
	defer integrityPurges.Unlock()
	held, free, scope := n("held"), n("free"), n("scope")
	grant(t, db.pool, held, "h", time.Hour)
	release(t, db.pool, free, "h", grant(t, db.pool, free, "h", time.Hour))
	if c := claimSlot(t, db.pool, scope, "h", 4, time.Hour); !c.Claimed {
		t.Fatalf("claim in an empty scope: got %s, want claimed", c)
	}
	snapshot := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT concat_ws(E'\n',
			(SELECT jsonb_agg(to_jsonb(l) ORDER BY l.name) FROM pglease.leases AS l WHERE l.name IN ($1, $2)),
			(SELECT jsonb_agg(to_jsonb(o)) FROM pglease.observers AS o WHERE o.name IN ($1, $2)),
			(SELECT jsonb_agg(to_jsonb(c)) FROM pglease.candidates AS c WHERE c.name IN ($1, $2)),
			(SELECT jsonb_agg(to_jsonb(s) ORDER BY s.slot) FROM pglease.slots AS s WHERE s.scope = $3),
			(SELECT jsonb_agg(to_jsonb(c)) FROM pglease.slot_scopes AS c WHERE c.scope = $3),
			(SELECT jsonb_agg(to_jsonb(q)) FROM pglease.slot_queue AS q WHERE q.scope = $3),
			(SELECT jsonb_agg(to_jsonb(h) ORDER BY h.name, h.slot, h.fence) FROM pglease.tenures AS h
			 WHERE h.name IN ($1, $2, $3)),
			-- The history's end counters move with the other subtests'
			-- ends (runGroup turns the history on): these names' tenures
			-- above stand for them.
			(SELECT jsonb_object_agg(sequencename, last_value) FROM pg_catalog.pg_sequences
			 WHERE schemaname = 'pglease' AND sequencename NOT LIKE 'tenures\_%'))`,
			[]any{held, free, scope}, &s)
		return s
	}
	before := snapshot()
	for _, c := range []struct {
		sql  string
		arg  any
		code string
		name string
	}{
		{`SELECT * FROM pglease.claim_slot($1, 'x', 4, '1 hour', 1, NULL)`, scope, "22004", "p_wait"},
		{`SELECT * FROM pglease.claim_slots('x', ARRAY[$1], ARRAY[4], '1 hour', ARRAY[1], NULL)`, scope, "22004", "p_wait"},
		{`SELECT pglease.purge('200 years')`, nil, "22023", "p_free_for"},
		{`SELECT pglease.purge_due('1 hour', '200 years')`, nil, "22023", "p_free_for"},
		{`SELECT pglease.purge_due('200 years', '1 day')`, nil, "22023", "p_every"},
		{`SELECT * FROM pglease.observe($1, NULL)`, held, "22004", "p_for"},
		{`SELECT * FROM pglease.request_release($1, NULL, NULL)`, held, "22004", "p_for"},
	} {
		var args []any
		if c.arg != nil {
			args = []any{c.arg}
		}
		_, err := db.pool.Exec(ctx, c.sql, args...)
		if pgCode(err) != c.code || !strings.Contains(err.Error(), c.name) || strings.Contains(err.Error(), "p_ttl") {
			t.Errorf("%s: got %v, want SQLSTATE %s naming %s", c.sql, err, c.code, c.name)
		}
		if after := snapshot(); after != before {
			t.Errorf("%s changed the tables or sequences:\ngot  %s\nwant %s", c.sql, after, before)
			before = after
		}
	}
}

// testObserveHoldsNoLock: an observe left open in a transaction holds no
// lock on the lease row, so neither the holder's renewal nor the owner's
// force_release waits for it.
func testObserveHoldsNoLock(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, _ := clientPair(t, db)
	lease := n("lead")
	fence := grant(t, a, lease, "a", time.Hour)
	tx, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	mustExec(t, tx, `SET LOCAL lock_timeout = 0`)
	mustExec(t, tx, `SET LOCAL statement_timeout = 0`)
	var state string
	mustScan(t, tx, `SELECT state FROM pglease.observe($1, '1 minute')`, []any{lease}, &state)
	if state != "held" {
		t.Fatalf("B's observe of A's lease: got state %q, want held", state)
	}
	mustExec(t, a, `SET lock_timeout = '100ms'`)
	var renewed bool
	if err := a.QueryRow(ctx, `SELECT renewed FROM pglease.renew($1, 'a', $2, '1 hour')`, lease, fence).Scan(&renewed); err != nil || !renewed {
		t.Fatalf("A's renewal while B's observe is open: got %v, %v; want true at once", renewed, err)
	}
	owner, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = owner.Rollback(context.Background()) }()
	mustExec(t, owner, `SET LOCAL lock_timeout = '100ms'`)
	var released bool
	if err := owner.QueryRow(ctx, `SELECT released FROM pglease.force_release($1)`, lease).Scan(&released); err != nil || !released {
		t.Fatalf("the owner's force_release while B's observe is open: got %v, %v; want true at once", released, err)
	}
	if err := owner.Commit(ctx); err != nil {
		t.Fatalf("commit force_release: %v", err)
	}
}
