package contract

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestLimitStatus: pglease.limit_status (sql/functions/83_limit_views.sql)
// shows each configured limit's level, to each role what peek shows it.
func TestLimitStatus(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"Levels", testLimitStatusLevels},
		{"Visibility", testLimitStatusVisibility},
		{"BadInput", testLimitStatusBadInput},
	})
}

// limitLevels returns limit_status's rows of t's own targets as text:
// "target burst buckets limited min_remaining reserved owner".
func limitLevels(t *testing.T, q querier, prefix string) string {
	t.Helper()
	var s string
	mustScan(t, q, `SELECT coalesce(string_agg(format('%s %s %s %s %s %s %s', s.target, s.burst, s.buckets,
			s.limited, s.min_remaining, s.reserved, coalesce(s.owner_role, '-')), '; ' ORDER BY s.target), '')
		FROM pglease.limit_status(100000) AS s WHERE starts_with(s.target, $1)`, []any{prefix}, &s)
	return s
}

// testLimitStatusLevels: buckets spent, limited, the fewest tokens left
// and the reserved tokens, by each key's longest matching target.
func testLimitStatusLevels(t *testing.T, db *testDB) {
	n := namer(t)
	setLimit(t, db.pool, n("t/"), 1, time.Hour, 5, false)
	setLimit(t, db.pool, n("t/gold/"), 1, time.Hour, 10, false)
	setLimit(t, db.pool, n("q/"), 1, time.Hour, 1000, false)
	if got, want := limitLevels(t, db.pool, n("")),
		fmt.Sprintf("%s 1000 0 0 1000 0 -; %s 5 0 0 5 0 -; %s 10 0 0 10 0 -", n("q/"), n("t/"), n("t/gold/")); got != want {
		t.Fatalf("levels before any take:\n got %s\nwant %s", got, want)
	}
	take(t, db.pool, n("t/a"), 5)      // empty: limited
	take(t, db.pool, n("t/b"), 2)      // 3 left
	take(t, db.pool, n("t/gold/c"), 1) // the gold tier's, not t/'s
	var reservation int64
	mustScan(t, db.pool, `SELECT reservation FROM pglease.reserve($1, 400, '1 hour')`, []any{n("q/x")}, &reservation)
	want := fmt.Sprintf("%s 1000 1 0 600 400 -; %s 5 2 1 0 0 -; %s 10 1 0 9 0 -", n("q/"), n("t/"), n("t/gold/"))
	if got := limitLevels(t, db.pool, n("")); got != want {
		t.Fatalf("levels after the takes:\n got %s\nwant %s", got, want)
	}
	// Settled: the reservation no longer holds tokens, the rest came back.
	mustExec(t, db.pool, `SELECT pglease.settle($1, $2, 100)`, n("q/x"), reservation)
	want = strings.Replace(want, n("q/")+" 1000 1 0 600 400", n("q/")+" 1000 1 0 900 0", 1)
	if got := limitLevels(t, db.pool, n("")); got != want {
		t.Fatalf("levels after the settle:\n got %s\nwant %s", got, want)
	}
	// The cut: p_max rows by target, limits counts them all.
	var rows, limits int64
	mustScan(t, db.pool, `SELECT count(*), max(s.limits) FROM pglease.limit_status(1) AS s`, nil, &rows, &limits)
	if rows != 1 || limits < 3 {
		t.Fatalf("limit_status(1): got %d rows of %d limits, want 1 row of at least 3", rows, limits)
	}
}

// testLimitStatusVisibility: a client sees shared limits and its own
// prefix's, and only its own buckets; the owner sees every bucket.
func testLimitStatusVisibility(t *testing.T, db *testDB) {
	n := namer(t)
	a, b, roleA, _ := limitRoles(t, db) // n("a/") A's (burst 2), n("shared/") (burst 2)
	take(t, a, n("a/k"), 1)
	take(t, a, n("shared/k"), 2)
	take(t, b, n("shared/k"), 1)
	if got, want := limitLevels(t, a, n("")),
		fmt.Sprintf("%s 2 1 0 1 0 %s; %s 2 1 1 0 0 -", n("a/"), roleA.name, n("shared/")); got != want {
		t.Fatalf("A's view:\n got %s\nwant %s", got, want)
	}
	if got, want := limitLevels(t, b, n("")), fmt.Sprintf("%s 2 1 0 1 0 -", n("shared/")); got != want {
		t.Fatalf("B's view (not A's prefix, only B's bucket of the shared key):\n got %s\nwant %s", got, want)
	}
	if got, want := limitLevels(t, db.pool, n("")),
		fmt.Sprintf("%s 2 1 0 1 0 %s; %s 2 2 1 0 0 -", n("a/"), roleA.name, n("shared/")); got != want {
		t.Fatalf("the owner's view:\n got %s\nwant %s", got, want)
	}
}

// testLimitStatusBadInput: p_max out of range is refused.
func testLimitStatusBadInput(t *testing.T, db *testDB) {
	ctx := testContext(t)
	for _, c := range []struct {
		arg  any
		code string
	}{{nil, "22004"}, {0, "22023"}, {100001, "22023"}} {
		_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.limit_status($1)`, c.arg)
		requirePgError(t, err, c.code, "pglease.limit_status: p_max")
	}
}
