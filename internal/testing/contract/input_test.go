package contract

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// argKind says which bad values an argument must refuse.
type argKind int

const (
	textArg     argKind = iota // 1 to 256 bytes
	ttlArg                     // more than 0, at most 24 hours
	fenceArg                   // 0 or more
	intArg                     // 1 to 1000000 (capacities, slot numbers)
	scopesArg                  // claim_slots' text[]
	capacityArg                // claim_slots' integer[]
	regexArg                   // metrics' p_names: a regular expression of at most 1024 bytes
	maxNamesArg                // metrics' p_max_names: 0 to 1000000
	windowArg                  // run_begin's p_window: more than 0, at most 366 days
	exitArg                    // run_end's p_exit_status: 0 to 255
	limitArg                   // run_history's p_limit: 1 to 10000
	keepArg                    // history_enable's p_keep: more than 0, at most 100 years
	sinceArg                   // a point in time, NULL for none: no bad value
)

type fnArg struct {
	name  string
	kind  argKind
	valid any
}

type fnSpec struct {
	name string
	args []fnArg
}

func (f fnSpec) sql() string {
	params := make([]string, len(f.args))
	for i := range f.args {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	return fmt.Sprintf("SELECT * FROM pglease.%s(%s)", f.name, strings.Join(params, ", "))
}

type badValue struct {
	label    string
	value    any
	code     string
	mentions string // besides the function name; defaults to the argument name
}

func ptr[T any](v T) *T { return &v }

func scopesN(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("scope-%d", i)
	}
	return s
}

func badValues(a fnArg) []badValue {
	switch a.kind {
	case textArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"empty", "", "22023", ""},
			{"257 bytes", strings.Repeat("x", 257), "22023", ""},
			{"129 two-byte runes", strings.Repeat("ß", 129), "22023", ""},
		}
	case ttlArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"zero", time.Duration(0), "22023", ""},
			{"negative", -time.Second, "22023", ""},
			{"24h and 1µs", 24*time.Hour + time.Microsecond, "22023", ""},
		}
	case fenceArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"negative", int64(-1), "22023", ""},
		}
	case intArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"zero", int32(0), "22023", ""},
			{"1000001", int32(1000001), "22023", ""},
		}
	case scopesArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"empty", []string{}, "22023", ""},
			{"longer than capacities", []string{"scope-a", "scope-b", "scope-c"}, "22023", ""},
			{"duplicate", []string{"scope-a", "scope-a"}, "22023", ""},
			{"NULL element", []*string{ptr("scope-a"), nil}, "22004", "p_scopes[2]"},
			{"empty element", []string{"scope-a", ""}, "22023", "p_scopes[2]"},
			{"257-byte element", []string{"scope-a", strings.Repeat("x", 257)}, "22023", "p_scopes[2]"},
			{"two-dimensional", [][]string{{"scope-a"}, {"scope-b"}}, "22023", ""},
		}
	case capacityArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"empty", []int32{}, "22023", ""},
			{"shorter than scopes", []int32{5}, "22023", ""},
			{"NULL element", []*int32{ptr[int32](5), nil}, "22004", "p_capacities[2]"},
			{"zero element", []int32{5, 0}, "22023", "p_capacities[2]"},
			{"1000001 element", []int32{5, 1000001}, "22023", "p_capacities[2]"},
		}
	case regexArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"1025 bytes", strings.Repeat("x", 1025), "22023", ""},
			{"unbalanced", "(", "22023", "not a valid regular expression"},
			{"bad class", "[[:nope:]]", "22023", "not a valid regular expression"},
		}
	case maxNamesArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"negative", int32(-1), "22023", ""},
			{"1000001", int32(1000001), "22023", ""},
		}
	case windowArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"zero", time.Duration(0), "22023", ""},
			{"negative", -time.Minute, "22023", ""},
			{"366 days and 1µs", 366*24*time.Hour + time.Microsecond, "22023", ""},
		}
	case exitArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"negative", int32(-1), "22023", ""},
			{"256", int32(256), "22023", ""},
		}
	case sinceArg:
		return nil
	case keepArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"zero", time.Duration(0), "22023", ""},
			{"negative", -time.Second, "22023", ""},
			{"101 years", 101 * 366 * 24 * time.Hour, "22023", ""},
		}
	case limitArg:
		return []badValue{
			{"NULL", nil, "22004", ""},
			{"zero", int32(0), "22023", ""},
			{"10001", int32(10001), "22023", ""},
		}
	}
	panic("unknown argument kind")
}

// publicFunctions lists every public function with arguments that would
// succeed and change rows seeded by seedForInput, so that a check made too
// late shows up as a changed table.
var publicFunctions = []fnSpec{
	{"acquire", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_ttl", ttlArg, time.Hour}}},
	{"renew", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}, {"p_ttl", ttlArg, time.Hour}}},
	{"release", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}}},
	{"assert_held", []fnArg{{"p_name", textArg, "seeded"}, {"p_fence", fenceArg, int64(1)}}},
	{"claim_slot", []fnArg{{"p_scope", textArg, "scope-a"}, {"p_holder", textArg, "h2"}, {"p_capacity", intArg, int32(5)}, {"p_ttl", ttlArg, time.Hour}}},
	{"claim_slots", []fnArg{{"p_holder", textArg, "h2"}, {"p_scopes", scopesArg, []string{"scope-a", "scope-b"}}, {"p_capacities", capacityArg, []int32{5, 5}}, {"p_ttl", ttlArg, time.Hour}}},
	{"renew_slot", []fnArg{{"p_scope", textArg, "scope-a"}, {"p_slot", intArg, int32(1)}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}, {"p_ttl", ttlArg, time.Hour}}},
	{"release_slot", []fnArg{{"p_scope", textArg, "scope-a"}, {"p_slot", intArg, int32(1)}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}}},
	{"renew_holder", []fnArg{{"p_holder", textArg, "h"}, {"p_ttl", ttlArg, time.Hour}}},
	{"force_release", []fnArg{{"p_name", textArg, "seeded"}}},
	{"metrics", []fnArg{{"p_names", regexArg, "^seed"}, {"p_max_names", maxNamesArg, int32(10)}}},
	// The cron functions (0.3.0).
	{"release_after", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}, {"p_hold_at_least", ttlArg, time.Hour}}},
	{"run_begin", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}, {"p_window", windowArg, time.Hour}}},
	{"run_end", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}, {"p_exit_status", exitArg, int32(0)}}},
	{"run_history", []fnArg{{"p_name", textArg, "seeded"}, {"p_limit", limitArg, int32(10)}}},
	{"run_summary", []fnArg{{"p_names", regexArg, "^seed"}, {"p_max_names", maxNamesArg, int32(10)}}},
	// Leadership (0.3.0).
	{"renew_lease", []fnArg{{"p_name", textArg, "seeded"}, {"p_holder", textArg, "h"}, {"p_fence", fenceArg, int64(1)}, {"p_ttl", ttlArg, time.Hour}}},
	// Tenure history (0.4.0, #52): "seed" is on (see TestBadInputRefused).
	{"history_enable", []fnArg{{"p_prefix", textArg, "seeded"}, {"p_keep", keepArg, time.Hour}}},
	{"history_disable", []fnArg{{"p_prefix", textArg, "seed"}}},
	{"history_delete", []fnArg{{"p_prefix", textArg, "seed"}, {"p_before", sinceArg, nil}}},
	{"tenures", []fnArg{{"p_name", textArg, "seeded"}, {"p_since", sinceArg, nil}}},
}

// tablesSnapshot returns the full contents of pglease's tables.
func tablesSnapshot(t testing.TB, q querier) string {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var s string
	err := q.QueryRow(ctx, `SELECT concat_ws(E'\n',
		(SELECT jsonb_agg(to_jsonb(l) ORDER BY l.name) FROM pglease.leases AS l),
		(SELECT jsonb_agg(to_jsonb(s) ORDER BY s.scope, s.slot) FROM pglease.slots AS s),
		(SELECT jsonb_agg(to_jsonb(c) ORDER BY c.scope) FROM pglease.slot_scopes AS c),
		(SELECT jsonb_agg(to_jsonb(r) ORDER BY r.name, r.fence) FROM pglease.runs AS r),
		(SELECT jsonb_agg(to_jsonb(h) ORDER BY h.name, h.slot, h.fence) FROM pglease.tenures AS h),
		(SELECT jsonb_agg(to_jsonb(p) ORDER BY p.prefix) FROM pglease.history_prefixes AS p))`).Scan(&s)
	if err != nil {
		t.Fatalf("snapshot pglease tables: %v", err)
	}
	return s
}

// TestBadInputRefused calls every public function with each argument in
// turn NULL or out of range: each call must raise 22004 or 22023 naming the
// function and the argument, and leave pglease's tables as they were.
func TestBadInputRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	ctx := testContext(t)

	mustExec(t, pool, `SELECT pglease.history_enable('seed', '1 day')`)
	mustAcquire(t, pool, "seeded", "h", time.Hour, 1)
	mustClaimSlot(t, pool, "scope-a", "h", 5, time.Hour, 1, 1)
	before := tablesSnapshot(t, pool)

	// claim_slots' arrays may hold at most 64 scopes.
	extra := []struct {
		label  string
		scopes []string
		caps   []int32
	}{
		{"65 scopes", scopesN(65), slices.Repeat([]int32{5}, 65)},
	}

	for _, fn := range publicFunctions {
		t.Run(fn.name, func(t *testing.T) {
			valid := make([]any, len(fn.args))
			for i, a := range fn.args {
				valid[i] = a.valid
			}
			// The base arguments work (in a transaction rolled back), so
			// each refusal below is due to the one bad argument.
			t.Run("valid", func(t *testing.T) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(context.Background()) }()
				if _, err := tx.Exec(ctx, fn.sql(), valid...); err != nil {
					t.Fatalf("%s with valid arguments: %v", fn.name, err)
				}
			})
			for i, a := range fn.args {
				for _, bad := range badValues(a) {
					t.Run(a.name+"="+bad.label, func(t *testing.T) {
						args := slices.Clone(valid)
						args[i] = bad.value
						_, err := pool.Exec(ctx, fn.sql(), args...)
						requirePgError(t, err, bad.code, "pglease."+fn.name, cmp.Or(bad.mentions, a.name))
						if after := tablesSnapshot(t, pool); after != before {
							t.Fatalf("tables changed by a refused call:\ngot  %s\nwant %s", after, before)
						}
					})
				}
			}
			if fn.name == "claim_slots" {
				for _, e := range extra {
					t.Run(e.label, func(t *testing.T) {
						_, err := pool.Exec(ctx, fn.sql(), "h2", e.scopes, e.caps, time.Hour)
						requirePgError(t, err, "22023", "pglease.claim_slots")
						if after := tablesSnapshot(t, pool); after != before {
							t.Fatalf("tables changed by a refused call:\ngot  %s\nwant %s", after, before)
						}
					})
				}
			}
		})
	}

	// The bounds themselves are accepted: 24 hours, 256 bytes, capacity
	// 1000000, 64 scopes.
	t.Run("bounds accepted", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		long := strings.Repeat("n", 256)
		for _, call := range []struct {
			sql  string
			args []any
		}{
			{`SELECT * FROM pglease.acquire($1, $2, $3)`, []any{long, long, 24 * time.Hour}},
			{`SELECT * FROM pglease.acquire('one-day', 'h', '1 day')`, nil},
			{`SELECT * FROM pglease.acquire('one-µs', 'h', '1 microsecond')`, nil},
			{`SELECT * FROM pglease.claim_slot($1, $2, 1000000, '1 s')`, []any{long, long}},
			{`SELECT * FROM pglease.claim_slots('h', $1, $2, '1 s')`, []any{scopesN(64), slices.Repeat([]int32{1000000}, 64)}},
			{`SELECT * FROM pglease.renew('seeded', 'h', 0, '1 s')`, nil},
			{`SELECT * FROM pglease.metrics($1, 1000000)`, []any{strings.Repeat("x", 1024)}},
			{`SELECT * FROM pglease.metrics('', 0)`, nil},
		} {
			if _, err := tx.Exec(ctx, call.sql, call.args...); err != nil {
				t.Fatalf("%s: %v", call.sql, err)
			}
		}
	})
}

// testNamesRoundTrip checks that names and holders reach the tables and come
// back exactly as given: quotes, semicolons, backslashes, unicode, spaces,
// and the 256-byte boundary counted in bytes. The names are not in the
// test's namespace (that would move the boundary), but cannot meet the
// other tests' names, which all start with "Test".
func testNamesRoundTrip(t *testing.T, db *testDB) {
	pool := db.pool
	ctx := testContext(t)

	names := []string{
		`it's`,
		`"double"`,
		`semi;colon'); DROP TABLE pglease.leases; --`,
		`back\slash\\ \n`,
		"ß日本🔒",
		"  padded  ",
		" ",
		"\ttab\nnewline",
		"%s %I %L $1",
		strings.Repeat("x", 256),
		strings.Repeat("🔒", 64),
		strings.Repeat("ß", 128),
	}
	for i, name := range names {
		holder := "holder " + name
		if len(holder) > 256 {
			holder = name
		}
		r := mustAcquire(t, pool, name, holder, time.Minute, 1)
		if r.Holder != holder {
			t.Fatalf("name %d: acquire holder: got %q, want %q", i, r.Holder, holder)
		}
		st := mustLeaseStatus(t, pool, name)
		if st.Name != name || st.Holder == nil || *st.Holder != holder {
			t.Fatalf("name %d: lease_status: got name %q holder %s, want %q, %q", i, st.Name, ptrString(st.Holder), name, holder)
		}
		// Another holder sees exactly that holder.
		if other := acquire(t, pool, name, "other", time.Minute); other.Acquired || other.Holder != holder {
			t.Fatalf("name %d: acquire by another: got acquired=%v holder %q, want false, %q", i, other.Acquired, other.Holder, holder)
		}
		if err := assertHeld(ctx, pool, name, 1); err != nil {
			t.Fatalf("name %d: assert_held: %v", i, err)
		}
		mustClaimSlot(t, pool, name, holder, 1, time.Minute, 1, 1)
		if st := mustSlotStatus(t, pool, name, 1); st.Scope != name || *st.Holder != holder {
			t.Fatalf("name %d: slot_status: got scope %q holder %s, want %q, %q", i, st.Scope, ptrString(st.Holder), name, holder)
		}
		if !release(t, pool, name, holder, 1) {
			t.Fatalf("name %d: release: got false, want true", i)
		}
	}

	// Each name is one row of its own: none was trimmed, folded or
	// truncated into another.
	rows, err := pool.Query(ctx, `SELECT name FROM pglease.lease_status WHERE name = ANY($1)`, names)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(names)); !slices.Equal(got, want) {
		t.Fatalf("lease names: got %q, want %q", got, want)
	}

	// One byte more is refused, however few characters that is.
	for _, name := range []string{
		strings.Repeat("x", 257),
		strings.Repeat("🔒", 64) + "x",
		"x" + strings.Repeat("ß", 128),
	} {
		_, err := tryAcquire(ctx, pool, name, "h", time.Minute)
		requirePgError(t, err, "22023", "257 bytes")
		_, err = tryAcquire(ctx, pool, "h", name, time.Minute)
		requirePgError(t, err, "22023", "257 bytes")
	}
}
