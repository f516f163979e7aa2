package contract

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// The batched calls (sql/functions/15_batch.sql): each element decided as
// the single call decides it, results in input order, bad elements
// reported per element, whole-call errors raised, the role binding kept.
func TestBatch(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"ElementsDecidedAlone", testBatchElementsDecidedAlone},
		{"WholeCallErrors", testBatchWholeCallErrors},
		{"Release", testBatchRelease},
		{"OtherRoleBatchIsAnotherHolder", testBatchOtherRole},
		{"GrantLikeSingleCall", testBatchGrantLikeSingle},
		{"SetBasedWaitsForLockedRow", testBatchSetBasedWaits},
	})
}

// batchRow is one acquire_batch result.
type batchRow struct {
	Acquired  []bool
	Fences    []*int64
	Holders   []*string
	Fresh     []bool
	Sqlstates []*string
}

func acquireBatch(t testing.TB, q querier, names []*string, holder string, ttls []string, values []*string) (batchRow, error) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var r batchRow
	err := q.QueryRow(ctx, `SELECT acquired, fences, holders, fresh, sqlstates
		FROM pglease.acquire_batch($1, $2, $3::interval[], $4)`, names, holder, ttls, values).
		Scan(&r.Acquired, &r.Fences, &r.Holders, &r.Fresh, &r.Sqlstates)
	return r, err
}

func releaseBatch(t testing.TB, q querier, names []string, holder string, fences []int64) ([]bool, []*string, error) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var released []bool
	var states []*string
	err := q.QueryRow(ctx, `SELECT released, sqlstates FROM pglease.release_batch($1, $2, $3)`, names, holder, fences).
		Scan(&released, &states)
	return released, states, err
}

func strs(ss ...string) []*string {
	out := make([]*string, len(ss))
	for i := range ss {
		if ss[i] != "<null>" {
			out[i] = &ss[i]
		}
	}
	return out
}

func deref[T any](p *T, zero T) T {
	if p == nil {
		return zero
	}
	return *p
}

// testBatchElementsDecidedAlone: one batch mixing a grant, a refusal, the
// holder's own re-acquire, a duplicate and bad elements: each element is
// what the single call returns, in input order; bad elements change
// nothing and fail nobody else.
func testBatchElementsDecidedAlone(t *testing.T, db *testDB) {
	n := namer(t)
	mustAcquire(t, db.pool, n("theirs"), "other", time.Hour, 1)
	mustAcquire(t, db.pool, n("mine"), "me", time.Hour, 1)
	long := strings.Repeat("x", 257)
	names := strs(n("new"), n("theirs"), n("mine"), "", "<null>", long, n("new"), n("zero-ttl"))
	ttls := []string{"1 min", "1 min", "1 min", "1 min", "1 min", "1 min", "1 min", "0"}
	r, err := acquireBatch(t, db.pool, names, "me", ttls, nil)
	if err != nil {
		t.Fatalf("acquire_batch: %v", err)
	}
	want := []struct {
		acquired bool
		fence    int64
		holder   string
		fresh    bool
		state    string
	}{
		{true, 1, "me", true, ""},      // free: a new tenure
		{false, 1, "other", false, ""}, // refused, the holder's tenure
		{true, 1, "me", false, ""},     // our own: re-pinned, same fence
		{false, 0, "", false, "22023"}, // empty name
		{false, 0, "", false, "22004"}, // NULL name
		{false, 0, "", false, "22023"}, // name over 256 bytes
		{true, 1, "me", false, ""},     // duplicate: the re-acquire of element 1
		{false, 0, "", false, "22023"}, // TTL not in (0, 24h]
	}
	if len(r.Acquired) != len(want) {
		t.Fatalf("acquire_batch returned %d elements for %d", len(r.Acquired), len(want))
	}
	for i, w := range want {
		got := []any{r.Acquired[i], deref(r.Fences[i], 0), deref(r.Holders[i], ""), r.Fresh[i], deref(r.Sqlstates[i], "")}
		if !slices.Equal(got, []any{w.acquired, w.fence, w.holder, w.fresh, w.state}) {
			t.Fatalf("element %d: got (acquired, fence, holder, fresh, sqlstate) %v, want %v", i+1, got, w)
		}
	}
	if row, found := leaseStatus(t, db.pool, n("zero-ttl")); found {
		t.Fatalf("a bad element created lease %q: %+v", n("zero-ttl"), row)
	}
	// The single call agrees with the batch on the refused name.
	if r := acquire(t, db.pool, n("theirs"), "me", time.Minute); r.Acquired || r.Holder != "other" || r.Fence != 1 {
		t.Fatalf("single acquire of a name held by another: %+v, want refused by other at fence 1", r)
	}
}

// testBatchWholeCallErrors: what the contract raises for the whole call.
func testBatchWholeCallErrors(t *testing.T, db *testDB) {
	n := namer(t)
	cases := []struct {
		what   string
		names  []*string
		holder string
		ttls   []string
		code   string
	}{
		{"NULL names", nil, "me", []string{}, "22004"},
		{"NULL ttls", strs(n("a")), "me", nil, "22004"},
		{"empty holder", strs(n("a")), "", []string{"1 min"}, "22023"},
		{"fewer ttls than names", strs(n("a"), n("b")), "me", []string{"1 min"}, "22023"},
	}
	for _, c := range cases {
		_, err := acquireBatch(t, db.pool, c.names, c.holder, c.ttls, nil)
		requirePgError(t, err, c.code, "acquire_batch")
	}
	many := make([]*string, 1001)
	ttls := make([]string, 1001)
	for i := range many {
		many[i] = new(n("x"))
		ttls[i] = "1 min"
	}
	_, err := acquireBatch(t, db.pool, many, "me", ttls, nil)
	requirePgError(t, err, "22023", "at most 1000")
	_, _, err = releaseBatch(t, db.pool, []string{n("a")}, "me", []int64{1, 2})
	requirePgError(t, err, "22023", "release_batch")
	if row, found := leaseStatus(t, db.pool, n("a")); found {
		t.Fatalf("a refused call created lease %q: %+v", n("a"), row)
	}
	// An empty batch is no error.
	r, err := acquireBatch(t, db.pool, []*string{}, "me", []string{}, nil)
	if err != nil || len(r.Acquired) != 0 {
		t.Fatalf("empty acquire_batch: got %+v, %v; want no elements, no error", r, err)
	}
}

// testBatchRelease: release_batch ends the caller's live tenures, returns
// false for another holder's, a stale fence and a duplicate, and reports a
// bad element without failing the others.
func testBatchRelease(t *testing.T, db *testDB) {
	n := namer(t)
	mustAcquire(t, db.pool, n("a"), "me", time.Hour, 1)
	mustAcquire(t, db.pool, n("b"), "other", time.Hour, 1)
	mustAcquire(t, db.pool, n("c"), "me", time.Hour, 1)
	released, states, err := releaseBatch(t, db.pool,
		[]string{n("a"), n("b"), n("c"), n("a"), "", n("c")}, "me", []int64{1, 1, 2, 1, 1, 1})
	if err != nil {
		t.Fatalf("release_batch: %v", err)
	}
	if want := []bool{true, false, false, false, false, true}; !slices.Equal(released, want) {
		t.Fatalf("released: got %v, want %v (a; b is other's; c fence 2 is stale; a again; bad; c)", released, want)
	}
	if got := deref(states[4], ""); got != "22023" {
		t.Fatalf("sqlstate of the empty name: got %q, want 22023", got)
	}
	for _, name := range []string{n("a"), n("c")} {
		if row := mustLeaseStatus(t, db.pool, name); row.State != "free" || row.Fence != 1 {
			t.Fatalf("%s after release_batch: %+v, want free at fence 1", name, row)
		}
	}
	if row := mustLeaseStatus(t, db.pool, n("b")); row.State != "held" {
		t.Fatalf("%s, another holder's: %+v, want still held", n("b"), row)
	}
}

// testBatchOtherRole (docs/security.md): role B's batches with A's holder
// string and fences neither take nor release A's tenures, nor any of A's
// names, and change nothing.
func testBatchOtherRole(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	a := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	b := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	holder := n("service-a")
	mustAcquire(t, a, n("v1"), holder, time.Hour, 1)
	mustAcquire(t, a, n("v2"), holder, time.Hour, 1)
	r, err := acquireBatch(t, b, strs(n("v1"), n("v2"), n("free")), holder, []string{"1 us", "1 min", "1 min"}, nil)
	if err != nil {
		t.Fatalf("acquire_batch from role B: %v", err)
	}
	if !slices.Equal(r.Acquired, []bool{false, false, true}) {
		t.Fatalf("acquire_batch with A's holder from role B: acquired %v, want [false false true] (A's names refused)", r.Acquired)
	}
	released, _, err := releaseBatch(t, b, []string{n("v1"), n("v2")}, holder, []int64{1, 1})
	if err != nil {
		t.Fatalf("release_batch from role B: %v", err)
	}
	if !slices.Equal(released, []bool{false, false}) {
		t.Fatalf("release_batch of A's tenures from role B: got %v, want [false false]", released)
	}
	for _, name := range []string{n("v1"), n("v2")} {
		if row := mustLeaseStatus(t, db.pool, name); row.State != "held" || row.Fence != 1 || deref(row.ExpiresIn, 0) < 30*time.Minute {
			t.Fatalf("%s after role B's batches: %+v, want A's tenure unchanged (held, fence 1, about an hour left)", name, row)
		}
	}
	// A's own batch releases them.
	released, _, err = releaseBatch(t, a, []string{n("v1"), n("v2")}, holder, []int64{1, 1})
	if err != nil || !slices.Equal(released, []bool{true, true}) {
		t.Fatalf("release_batch from role A: got %v, %v; want [true true]", released, err)
	}
}

// testBatchGrantLikeSingle: acquire_batch's grants of names that are ours
// to take must leave the row and return what the four-argument single
// call does, on twin leases set up alike: a released lease, an expired
// tenure of another holder, and the caller's own live tenure with a new
// value (which observers hear of). Once on the set-based path (a batch of
// only such names), once on the per-element path (a refused name in the
// batch sends every element there).
func testBatchGrantLikeSingle(t *testing.T, db *testDB) {
	for _, path := range []string{"set-based", "per-element"} {
		t.Run(path, func(t *testing.T) { batchGrantLikeSingle(t, db, path == "per-element") })
	}
}

func batchGrantLikeSingle(t *testing.T, db *testDB, refusal bool) {
	n := namer(t)
	ctx := testContext(t)
	type twin struct{ batch, single string }
	released := twin{n("released-b"), n("released-s")}
	expired := twin{n("expired-b"), n("expired-s")}
	mine := twin{n("mine-b"), n("mine-s")}
	for _, name := range []string{released.batch, released.single} {
		ok, fence, _ := acquireValue(t, db.pool, name, "me", time.Hour, "v0")
		if !ok || !release(t, db.pool, name, "me", fence) {
			t.Fatalf("setting up %s: acquire then release failed", name)
		}
	}
	for _, name := range []string{expired.batch, expired.single} {
		acquireValue(t, db.pool, name, "other", time.Hour, "theirs")
		mustExec(t, db.pool, `UPDATE pglease.leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, name)
	}
	for _, name := range []string{mine.batch, mine.single} {
		acquireValue(t, db.pool, name, "me", time.Hour, "v0")
	}
	listener := connect(t, db.url)
	mustExec(t, listener, `LISTEN pglease`)
	mustExec(t, db.pool, `SELECT pglease.observe($1, '1 minute')`, mine.batch)

	type result struct {
		Acquired  bool
		Fence     int64
		Holder    string
		Value     *string
		ExpiresIn time.Duration
	}
	var (
		acquired, fresh []bool
		fences          []int64
		holders, values []*string
		expiresIn       []time.Duration
	)
	names := []string{released.batch, expired.batch, mine.batch}
	if refusal {
		mustAcquire(t, db.pool, n("theirs"), "other", time.Hour, 1)
		names = append(names, n("theirs"))
	}
	err := db.pool.QueryRow(ctx, `SELECT acquired, fences, holders, lease_values, expires_in, fresh
		FROM pglease.acquire_batch($1, 'me', array_fill('90 s'::interval, ARRAY[cardinality($1::text[])]),
			($2::text[])[1:cardinality($1::text[])])`,
		names, []string{"v1", "v1", "v2", "v3"}).Scan(&acquired, &fences, &holders, &values, &expiresIn, &fresh)
	if err != nil {
		t.Fatalf("acquire_batch: %v", err)
	}
	if refusal && (acquired[3] || fresh[3]) {
		t.Fatalf("%s, another holder's live tenure: acquired %v, fresh %v; want refused", names[3], acquired[3], fresh[3])
	}
	for i, tw := range []twin{released, expired, mine} {
		value := []string{"v1", "v1", "v2"}[i]
		var single result
		err := db.pool.QueryRow(ctx, `SELECT acquired, fence, holder, value, expires_in FROM pglease.acquire($1, 'me', '90 s', $2)`,
			tw.single, value).Scan(&single.Acquired, &single.Fence, &single.Holder, &single.Value, &single.ExpiresIn)
		if err != nil {
			t.Fatalf("single acquire of %s: %v", tw.single, err)
		}
		got := result{acquired[i], fences[i], deref(holders[i], ""), values[i], expiresIn[i]}
		if got.Acquired != single.Acquired || got.Fence != single.Fence || got.Holder != single.Holder ||
			deref(got.Value, "<null>") != deref(single.Value, "<null>") || got.ExpiresIn != single.ExpiresIn {
			t.Fatalf("%s: batch element %+v, single call %+v", tw.batch, got, single)
		}
		if wantFresh := i < 2; fresh[i] != wantFresh {
			t.Fatalf("%s: fresh = %v, want %v", tw.batch, fresh[i], wantFresh)
		}
		// The rows agree in every column but the name and the clock.
		const cols = `SELECT holder, holder_role, fence, value, expires_at - acquired_at > interval '0',
			release_requested_at IS NULL AND release_to IS NULL AND release_for IS NULL FROM pglease.leases WHERE name = $1`
		var rows [2][6]any
		for j, name := range []string{tw.batch, tw.single} {
			vals := make([]any, 6)
			ptrs := make([]any, 6)
			for k := range ptrs {
				ptrs[k] = &vals[k]
			}
			mustScan(t, db.pool, cols, []any{name}, ptrs...)
			copy(rows[j][:], vals)
		}
		if rows[0] != rows[1] {
			t.Fatalf("%s: row after the batch %v, after the single call %v", tw.batch, rows[0], rows[1])
		}
	}
	// The observed lease's new value was notified.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		nt, err := listener.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("waiting for the notification of the batch's new value of %s: %v", mine.batch, err)
		}
		if strings.Contains(nt.Payload, `"event" : "changed"`) && strings.Contains(nt.Payload, `"`+mine.batch+`"`) {
			return
		}
	}
}

// testBatchSetBasedWaits: a set-based batch (only names ours to take)
// that finds one of its rows locked by another transaction neither fails
// (its NOWAIT attempt is rolled back) nor skips the name: it waits for the
// lock as the single call would, then decides every element: granted the
// free name, refused the one the other transaction took. Likewise a
// set-based release waits for a locked row and then releases.
func testBatchSetBasedWaits(t *testing.T, db *testDB) {
	n := namer(t)
	for _, name := range []string{n("p"), n("q")} {
		if !release(t, db.pool, name, "me", mustAcquire(t, db.pool, name, "me", time.Hour, 1).Fence) {
			t.Fatalf("setting up %s: release failed", name)
		}
	}
	other := connect(t, db.url)
	otherPID := backendPID(t, other)
	mustExec(t, other, `BEGIN`)
	mustExec(t, other, `SELECT pglease.acquire($1, 'other', '1 hour')`, n("q"))
	type batchResult struct {
		r   batchRow
		err error
	}
	done := make(chan batchResult, 1)
	batcher := connect(t, db.url)
	pid := backendPID(t, batcher)
	go func() {
		r, err := acquireBatch(t, batcher, strs(n("q"), n("p")), "me", []string{"1 min", "1 min"}, nil)
		done <- batchResult{r, err}
	}()
	waitBlockedBy(t, db.pool, pid, otherPID)
	mustExec(t, other, `COMMIT`)
	res := <-done
	if res.err != nil {
		t.Fatalf("acquire_batch with a row locked by another transaction: %v (want it to wait, then decide)", res.err)
	}
	if !slices.Equal(res.r.Acquired, []bool{false, true}) || deref(res.r.Holders[0], "") != "other" || deref(res.r.Fences[1], 0) != 2 {
		t.Fatalf("acquire_batch after the wait: acquired %v, holders %v, fences %v; want q refused (other), p granted at fence 2",
			res.r.Acquired, []string{deref(res.r.Holders[0], "<null>"), deref(res.r.Holders[1], "<null>")},
			[]int64{deref(res.r.Fences[0], 0), deref(res.r.Fences[1], 0)})
	}

	// The release: p's row locked by a fenced transaction of ours.
	mustExec(t, other, `BEGIN`)
	mustExec(t, other, `SELECT 1 FROM pglease.leases WHERE name = $1 FOR NO KEY UPDATE`, n("p"))
	relDone := make(chan error, 1)
	var released []bool
	go func() {
		var err error
		released, _, err = releaseBatch(t, batcher, []string{n("p")}, "me", []int64{2})
		relDone <- err
	}()
	waitBlockedBy(t, db.pool, pid, otherPID)
	mustExec(t, other, `COMMIT`)
	if err := <-relDone; err != nil || !slices.Equal(released, []bool{true}) {
		t.Fatalf("release_batch with its row locked by another transaction: got %v, %v; want [true] after the wait", released, err)
	}
	if row := mustLeaseStatus(t, db.pool, n("p")); row.State != "free" || row.Fence != 2 {
		t.Fatalf("%s after release_batch: %+v, want free at fence 2", n("p"), row)
	}
}
