package contract

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// reserveAllResult is one row of pglease.reserve_all.
type reserveAllResult struct {
	Reserved    bool
	Reservation *int64
	RefusedBy   *string
	Remaining   int32
	RetryIn     *time.Duration
}

func tryReserveAll(ctx context.Context, q querier, keys []string, amount int, ttl time.Duration) (reserveAllResult, error) {
	var r reserveAllResult
	err := q.QueryRow(ctx, `SELECT reserved, reservation, refused_by, remaining, retry_in
		FROM pglease.reserve_all($1, $2, $3)`, keys, amount, ttl).
		Scan(&r.Reserved, &r.Reservation, &r.RefusedBy, &r.Remaining, &r.RetryIn)
	return r, err
}

func reserveAll(t testing.TB, q querier, keys []string, amount int, ttl time.Duration) reserveAllResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	r, err := tryReserveAll(ctx, q, keys, amount, ttl)
	if err != nil {
		t.Fatalf("reserve_all(%q, %d, %v): %v", keys, amount, ttl, err)
	}
	return r
}

// reserveSnapshot is limitSnapshot with the test's reservations.
func reserveSnapshot(t testing.TB, db *testDB) string {
	t.Helper()
	var s string
	mustScan(t, db.pool, `SELECT coalesce((SELECT string_agg(r::text, ';' ORDER BY r.id, r.key) FROM pglease.limit_reservations AS r
			WHERE starts_with(r.key, $1)), '')`, []any{namer(t)("")}, &s)
	return limitSnapshot(t, db) + " | " + s
}

// testReserveAll: a reservation over a user, its tenant and their pool is
// all or nothing; one settle, through any of its keys, gives the rest back
// at every level; a key not in the reservation settles nothing; the
// single-key reserve and settle answer as before.
func testReserveAll(t *testing.T, db *testDB) {
	n := namer(t)
	setLimit(t, db.pool, n("p"), 1, time.Hour, 10, false)
	setLimit(t, db.pool, n("p/t"), 1, time.Hour, 6, false)
	user, tenant, pool := n("p/t/u1"), n("p/t"), n("p")
	levels := []string{user, tenant, pool}
	r := reserveAll(t, db.pool, levels, 5, time.Hour)
	if !r.Reserved || r.Reservation == nil || r.RefusedBy != nil || r.Remaining != 1 {
		t.Fatalf("reserve_all(5): got %+v, want reserved, 1 left at the tightest level", r)
	}
	before := reserveSnapshot(t, db)
	// The tenant has 1 left: a second user's 2 are refused by it, and the
	// second user's own bucket is untouched.
	r2 := reserveAll(t, db.pool, []string{n("p/t/u2"), tenant, pool}, 2, time.Hour)
	if r2.Reserved || r2.RefusedBy == nil || *r2.RefusedBy != tenant || r2.Reservation != nil || r2.RetryIn == nil {
		t.Fatalf("reserve_all(2) over a spent tenant: got %+v, want refused by %q", r2, tenant)
	}
	if after := reserveSnapshot(t, db); after != before {
		t.Fatalf("a refused reserve_all changed something:\n got %s\nwant %s", after, before)
	}
	// A key not in the reservation settles nothing.
	if s := settle(t, db.pool, n("p/t/u2"), *r.Reservation, 0); s.Settled || s.Refunded != 0 {
		t.Fatalf("settle through a key not in the reservation: got %+v, want not settled", s)
	}
	if after := reserveSnapshot(t, db); after != before {
		t.Fatalf("a settle through another key changed something:\n got %s\nwant %s", after, before)
	}
	// Settled through the pool's key: 3 back at each level.
	if s := settle(t, db.pool, pool, *r.Reservation, 2); !s.Settled || s.Refunded != 3 || s.Remaining != 8 {
		t.Fatalf("settle at 2 of 5 through the pool: got %+v, want settled, 3 refunded, 8 left at the pool", s)
	}
	for key, want := range map[string]int32{user: 4, tenant: 4, pool: 8} {
		if p := peek(t, db.pool, key); p.Remaining != want {
			t.Fatalf("%s after the settle: got %s, want %d remaining", key, p, want)
		}
	}
	if s := settle(t, db.pool, user, *r.Reservation, 0); s.Settled {
		t.Fatalf("settle again through the user: got %+v, want not settled", s)
	}
	if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.limit_reservations WHERE id = $1`, *r.Reservation); got != 0 {
		t.Fatalf("rows of the settled reservation: got %d, want 0", got)
	}
}

// testReserveAllExpires: a reservation over several levels never settled
// gives its amount back at every level at its expiry on the server's
// clock: peek counts it back at each; a take at one level gives back that
// level's only, and a settle through another level is refused and gives
// back the levels it locks; at no level does it come back twice.
func testReserveAllExpires(t *testing.T, db *testDB) {
	n := namer(t)
	setLimit(t, db.pool, n(""), 1, time.Hour, 5, false)
	levels := []string{n("t/u"), n("t"), n("")}
	r := reserveAll(t, db.pool, levels, 3, 100*time.Millisecond)
	var expires time.Time
	mustScan(t, db.pool, `SELECT max(expires_at) FROM pglease.limit_reservations WHERE id = $1`, []any{*r.Reservation}, &expires)
	waitServerPast(t, db.pool, expires)
	for _, key := range levels {
		if p := peek(t, db.pool, key); p.Remaining != 5 {
			t.Fatalf("%s after the expiry: got %s, want 5 remaining (the 3 back)", key, p)
		}
	}
	if tk := take(t, db.pool, levels[0], 1); !tk.Allowed || tk.Remaining != 4 {
		t.Fatalf("take of the user after the expiry: got %s, want allowed, 4 remaining", tk)
	}
	if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.limit_reservations WHERE id = $1`, *r.Reservation); got != 2 {
		t.Fatalf("rows of the reservation after the user's take: got %d, want the tenant's and the pool's 2", got)
	}
	if s := settle(t, db.pool, levels[1], *r.Reservation, 0); s.Settled || s.Refunded != 0 || s.Remaining != 5 {
		t.Fatalf("settle through the tenant after the expiry: got %+v, want not settled, 5 left (the 3 came back)", s)
	}
	if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.limit_reservations WHERE id = $1`, *r.Reservation); got != 0 {
		t.Fatalf("rows of the reservation after the late settle: got %d, want 0", got)
	}
	for key, want := range map[string]int32{levels[0]: 4, levels[1]: 5, levels[2]: 5} {
		if p := peek(t, db.pool, key); p.Remaining != want {
			t.Fatalf("%s at the end: got %s, want %d remaining (back once)", key, p, want)
		}
	}
}

// testReserveAllBadInput: every refused argument raises its SQLSTATE and
// changes nothing, at any level.
func testReserveAllBadInput(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 1, time.Hour, 3, false)
	held := reserveAll(t, db.pool, []string{n("u"), n("t")}, 2, time.Hour)
	many := make([]string, 65)
	for i := range many {
		many[i] = n(strings.Repeat("k", i+1))
	}
	huge := n(strings.Repeat("x", 1<<20))
	for _, tc := range []struct {
		name   string
		keys   any
		amount any
		ttl    any
		code   string
		msg    string
	}{
		{"NULL keys", nil, 1, time.Hour, "22004", "p_keys must not be NULL"},
		{"no key", []string{}, 1, time.Hour, "22023", "p_keys must hold 1 to 64 keys"},
		{"65 keys", many, 1, time.Hour, "22023", "p_keys must hold 1 to 64 keys, got 65"},
		{"a key twice", []string{n("a"), n("b"), n("a")}, 1, time.Hour, "22023", "must not name a key twice"},
		{"a NULL key", []*string{ptr(n("a")), nil}, 1, time.Hour, "22004", "p_keys must not be NULL"},
		{"an empty key", []string{n("a"), ""}, 1, time.Hour, "22023", "p_keys must be 1 to 256 bytes"},
		{"a 1 MB key", []string{n("a"), huge}, 1, time.Hour, "22023", "p_keys must be 1 to 256 bytes"},
		{"two dimensions", [][]string{{n("a")}, {n("b")}}, 1, time.Hour, "22023", "p_keys must hold 1 to 64 keys"},
		{"amount 0", []string{n("a")}, 0, time.Hour, "22023", "p_amount must be from 1"},
		{"amount -1", []string{n("a")}, -1, time.Hour, "22023", "p_amount must be from 1"},
		{"NULL amount", []string{n("a")}, nil, time.Hour, "22004", "p_amount must not be NULL"},
		{"amount over a burst", []string{n("a"), n("b")}, 4, time.Hour, "PGL21", "more than the burst 3"},
		{"TTL 0", []string{n("a")}, 1, time.Duration(0), "22023", "p_ttl must be more than 0"},
		{"TTL over 24 h", []string{n("a")}, 1, 25 * time.Hour, "22023", "p_ttl must be more than 0"},
		{"NULL TTL", []string{n("a")}, 1, nil, "22004", "p_ttl"},
		{"a key of no limit", []string{n("a"), "no limit here"}, 1, time.Hour, "PGL20", "no rate limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := reserveSnapshot(t, db)
			_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.reserve_all($1, $2, $3)`, tc.keys, tc.amount, tc.ttl)
			requirePgError(t, err, tc.code, "pglease.reserve_all", tc.msg)
			if after := reserveSnapshot(t, db); after != before {
				t.Fatalf("changed something:\n got %s\nwant %s", after, before)
			}
		})
	}
	// settle of a reservation over two keys: an actual over its amount, a
	// negative one, a 1 MB key.
	for _, tc := range []struct {
		key    string
		actual int
		code   string
		msg    string
	}{
		{n("t"), 3, "22023", "more than the 2 tokens"},
		{n("u"), -1, "22023", "p_actual must be from 0"},
		{huge, 0, "22023", "p_key must be 1 to 256 bytes"},
	} {
		before := reserveSnapshot(t, db)
		_, err := trySettle(ctx, db.pool, tc.key, *held.Reservation, tc.actual)
		requirePgError(t, err, tc.code, "pglease.settle", tc.msg)
		if after := reserveSnapshot(t, db); after != before {
			t.Fatalf("settle(%.20q, %d) changed something:\n got %s\nwant %s", tc.key, tc.actual, after, before)
		}
	}
}

// testReserveAllRoles: another role can neither reserve over a key of a
// prefix it does not own (42501, even after keys of its own, nothing
// changed) nor settle another role's reservation: through the owner's key
// 42501, through a shared key of its own false; nothing changes.
func testReserveAllRoles(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, roleA, roleB := limitRoles(t, db)
	ra := reserveAll(t, a, []string{n("a/u"), n("a/")}, 1, time.Hour)
	rs := reserveAll(t, a, []string{n("shared/u"), n("shared/")}, 1, time.Hour)
	before := reserveSnapshot(t, db)
	_, err := tryReserveAll(ctx, b, []string{n("shared/u"), n("a/u")}, 1, time.Hour)
	requirePgError(t, err, "42501", "pglease.reserve_all", roleB.name, roleA.name)
	_, err = trySettle(ctx, b, n("a/u"), *ra.Reservation, 0)
	requirePgError(t, err, "42501", "pglease.settle")
	if s, err := trySettle(ctx, b, n("shared/u"), *rs.Reservation, 0); err != nil || s.Settled || s.Refunded != 0 {
		t.Fatalf("B's settle of A's reservation through the shared key: got %+v, %v; want not settled", s, err)
	}
	if after := reserveSnapshot(t, db); after != before {
		t.Fatalf("B's refused calls changed something:\n got %s\nwant %s", after, before)
	}
	// B's reservation of the shared keys is B's own buckets'.
	if r := reserveAll(t, b, []string{n("shared/u"), n("shared/")}, 2, time.Hour); !r.Reserved {
		t.Fatalf("B's reserve_all of its own buckets of the shared keys: got %+v, want reserved", r)
	}
}

// testReserveAllCannotDelay: calls left open in a transaction, with every
// timeout off, delay nobody's take, reserve, reserve_all or settle of a
// different key or bucket: another role's open reserve_all, its settle of
// its own reservation, its settle naming the other role's reservation,
// its refused reserve_all, and its take and purge that give back its own
// expired reservation. The victim's calls run with lock_timeout 100ms.
func testReserveAllCannotDelay(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, _, _ := limitRoles(t, db)
	setLimit(t, db.pool, n("shared/"), 1000, time.Second, 1000, false)
	rb := reserveAll(t, b, []string{n("shared/bu"), n("shared/")}, 1, time.Hour)
	ra := reserveAll(t, a, []string{n("shared/ar"), n("shared/")}, 1, time.Hour)
	// B's reservations over its own buckets, expired and not given back
	// yet: one for its take, one for its purge; and one of A's, which B's
	// purge must leave alone.
	bx := []*int64{
		reserveAll(t, b, []string{n("shared/bx"), n("shared/")}, 1, 50*time.Millisecond).Reservation,
		reserveAll(t, b, []string{n("shared/by"), n("shared/")}, 1, 50*time.Millisecond).Reservation,
		reserveAll(t, a, []string{n("shared/ax")}, 1, 50*time.Millisecond).Reservation,
	}
	var expires time.Time
	mustScan(t, db.pool, `SELECT max(expires_at) FROM pglease.limit_reservations WHERE id = ANY ($1)`, []any{bx}, &expires)
	waitServerPast(t, db.pool, expires)
	mustExec(t, a, `SET lock_timeout = '100ms'`)
	mustExec(t, b, `SET lock_timeout = 0; SET statement_timeout = 0; SET idle_in_transaction_session_timeout = 0`)
	victim := func(what string) {
		t.Helper()
		ra := reserveAll(t, a, []string{n("shared/au"), n("shared/")}, 1, time.Hour)
		if !ra.Reserved {
			t.Fatalf("A's reserve_all while B's %s is open: got %+v, want reserved", what, ra)
		}
		if s, err := trySettle(ctx, a, n("shared/"), *ra.Reservation, 0); err != nil || !s.Settled {
			t.Fatalf("A's settle while B's %s is open: got %+v, %v", what, s, err)
		}
		if _, err := tryTake(ctx, a, n("shared/u"), 1); err != nil {
			t.Fatalf("A's take while B's %s is open: %v", what, err)
		}
		if _, err := tryReserve(ctx, a, n("a/k"), 1, time.Hour); err != nil {
			t.Fatalf("A's reserve while B's %s is open: %v", what, err)
		}
	}
	for _, hostile := range []struct {
		what string
		sql  string
		args []any
	}{
		{"reserve_all", `SELECT * FROM pglease.reserve_all($1, 1, '1 hour')`, []any{[]string{n("shared/bu"), n("shared/")}}},
		{"settle of its own", `SELECT * FROM pglease.settle($1, $2, 0)`, []any{n("shared/"), *rb.Reservation}},
		{"settle naming A's reservation", `SELECT * FROM pglease.settle($1, $2, 0)`, []any{n("shared/ar"), *ra.Reservation}},
		{"refused reserve_all", `SELECT * FROM pglease.reserve_all($1, 1, '1 hour')`, []any{[]string{n("shared/bu"), n("a/k")}}},
		{"take giving back its expired reservation", `SELECT * FROM pglease.take($1, 1)`, []any{n("shared/bx")}},
		{"purge giving back its expired reservations", `SELECT pglease.purge('0')`, nil},
	} {
		tx, err := b.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, hostile.sql, hostile.args...); err != nil && hostile.what != "refused reserve_all" {
			t.Fatalf("B's %s: %v", hostile.what, err)
		}
		victim(hostile.what)
		if hostile.what == "purge giving back its expired reservations" {
			if r, err := tryTake(ctx, a, n("shared/ax"), 1); err != nil || !r.Allowed || r.Remaining != 999 {
				t.Fatalf("A's take of its key with an expired reservation while B's purge is open: got %s, %v; want allowed, the 1 back", r, err)
			}
		}
		if hostile.what == "settle naming A's reservation" {
			if s, err := trySettle(ctx, a, n("shared/ar"), *ra.Reservation, 0); err != nil || !s.Settled {
				t.Fatalf("A's settle of the reservation B's open settle named: got %+v, %v; want settled", s, err)
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testReserveAllIsolation: under REPEATABLE READ and SERIALIZABLE, a
// reserve_all or settle whose snapshot predates a committed reset of its
// keys, or a purge of its reservation, never decides on the state the
// snapshot shows: it raises 40001 (nothing spent), or decides on the
// committed state.
func testReserveAllIsolation(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 1, time.Hour, 3, false)
	c, other := ownRoleSessions(t, db)
	levels := []string{n("u"), n("t")}
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		reserveAll(t, c, levels, 3, time.Hour) // every level spent
		tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, tx, `SELECT 1`) // the snapshot
		for _, key := range levels {
			mustExec(t, db.pool, `SELECT pglease.limit_reset($1)`, key)
		}
		r, err := tryReserveAll(ctx, tx, levels, 3, time.Hour)
		if err == nil && !r.Reserved {
			t.Fatalf("%s: reserve_all after a committed reset: got %+v, want reserved (the buckets are full) or 40001", level, r)
		}
		if err != nil {
			requirePgError(t, err, "40001")
		}
		_ = tx.Rollback(ctx)

		// A reservation expired and purged after the snapshot: the settle
		// is refused (it expired) or raises 40001; it never refunds.
		rr := reserveAll(t, c, levels, 1, 50*time.Millisecond)
		var expires time.Time
		mustScan(t, db.pool, `SELECT max(expires_at) FROM pglease.limit_reservations WHERE id = $1`, []any{*rr.Reservation}, &expires)
		waitServerPast(t, c, expires)
		tx, err = c.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, tx, `SELECT 1`)
		mustExec(t, other, `SELECT pglease.purge('0')`)
		s, err := trySettle(ctx, tx, levels[0], *rr.Reservation, 0)
		if err == nil && (s.Settled || s.Refunded != 0) {
			t.Fatalf("%s: settle of a purged reservation: got %+v, want not settled or 40001", level, s)
		}
		if err != nil {
			requirePgError(t, err, "40001")
		}
		_ = tx.Rollback(ctx)
		for _, key := range levels {
			mustExec(t, db.pool, `SELECT pglease.limit_reset($1)`, key)
		}
	}
}
