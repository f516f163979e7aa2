package contract

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestLeadership checks sql/functions/60_leader.sql: the holder's value,
// observation, and release on request, with their bad input and the rows
// of docs/security.md's threat table.
func TestLeadership(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"ValueLivesWithTheTenure", testValueLivesWithTheTenure},
		{"ValueTooLongChangesNothing", testValueTooLongChangesNothing},
		{"RequestReleaseNotHeld", testRequestReleaseNotHeld},
		{"RequestReleaseUnknownPreferred", testRequestReleaseUnknownPreferred},
		{"RefusalWritesCandidateOnlyWhenLapsing", testRefusalWritesCandidateOnlyWhenLapsing},
		{"RequestFloodingMovesLeadershipOnce", testRequestFloodingMovesLeadershipOnce},
		{"PreferredHolderThatNeverComes", testPreferredHolderThatNeverComes},
		{"StrangerCannotRequestRelease", testStrangerCannotRequestRelease},
		{"ObservedChangesNotify", testObservedChangesNotify},
		{"PurgeDropsLapsedRegistrations", testPurgeDropsLapsedRegistrations},
		{"RenewLeaseDecidesAsRenew", testRenewLeaseDecidesAsRenew},
		{"RenewLeaseWaitsForARowLockedInFlight", testRenewLeaseWaitsForARowLockedInFlight},
	})
}

// testRenewLeaseDecidesAsRenew: renew_lease, which renews on a path of its
// own, decides every case as renew does: the same tenure on two leases set
// up alike, one renewed by each; and its request is false with none.
func testRenewLeaseDecidesAsRenew(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	for k, c := range []struct {
		name   string
		setup  func(lease string) // after holder a acquired lease with fence 1
		holder string
		fence  int64
	}{
		{"own live tenure", func(string) {}, "a", 1},
		{"another holder", func(string) {}, "b", 1},
		{"another fence", func(string) {}, "a", 2},
		{"released", func(l string) { release(t, db.pool, l, "a", 1) }, "a", 1},
		{"expired", func(l string) {
			mustExec(t, db.pool, `UPDATE pglease.leases SET expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, l)
		}, "a", 1},
	} {
		type outcome struct {
			renewed      bool
			expiresIn    *time.Duration
			moved        bool
			holderRole   *string
			fence        int64
			requestFalse bool
		}
		var got [2]outcome
		for i, call := range []string{
			`SELECT renewed, expires_in, expires_at, true FROM pglease.renew($1, $2, $3, '2 hours')`,
			`SELECT renewed, expires_in, expires_at, NOT release_requested FROM pglease.renew_lease($1, $2, $3, '2 hours')`,
		} {
			lease := n(fmt.Sprintf("decides%d-%d", k, i))
			acquire(t, db.pool, lease, "a", time.Hour)
			c.setup(lease)
			var before *time.Time
			mustScan(t, db.pool, `SELECT expires_at FROM pglease.leases WHERE name = $1`, []any{lease}, &before)
			var o outcome
			var at *time.Time
			if err := db.pool.QueryRow(ctx, call, lease, c.holder, c.fence).Scan(&o.renewed, &o.expiresIn, &at, &o.requestFalse); err != nil {
				t.Fatalf("%s: %s: %v", c.name, call, err)
			}
			var after *time.Time
			mustScan(t, db.pool, `SELECT expires_at, holder_role, fence FROM pglease.leases WHERE name = $1`, []any{lease}, &after, &o.holderRole, &o.fence)
			o.moved = !equalTimes(before, after)
			if o.renewed && !equalTimes(at, after) {
				t.Fatalf("%s: %s returned expires_at %v, the row has %v", c.name, call, at, after)
			}
			got[i] = o
		}
		if !reflect.DeepEqual(got[0], got[1]) {
			t.Fatalf("%s: renew %+v, renew_lease %+v", c.name, got[0], got[1])
		}
		if want := c.name == "own live tenure"; got[1].renewed != want || got[1].moved != want || !got[1].requestFalse {
			t.Fatalf("%s: renew_lease %+v, want renewed and moved %v, no request", c.name, got[1], want)
		}
	}
}

// equalTimes reports whether two nullable times are the same instant.
func equalTimes(a, b *time.Time) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
}

// testRenewLeaseWaitsForARowLockedInFlight: a renew_lease that finds its
// tenure's row locked by a transaction in flight (a fenced write) waits for
// it, renews, and reads the request made before.
func testRenewLeaseWaitsForARowLockedInFlight(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	lease := n("lead")
	acquireValue(t, db.pool, lease, "a", time.Hour, "addr-a")
	acquireValue(t, db.pool, lease, "b", time.Hour, "addr-b") // refused: b is a candidate
	var ok bool
	mustScan(t, db.pool, `SELECT requested FROM pglease.request_release($1, 'b')`, []any{lease}, &ok)
	if !ok {
		t.Fatal("request_release for b was refused")
	}
	blocker, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(context.Background()) }()
	if err := assertHeld(ctx, blocker, lease, 1); err != nil {
		t.Fatalf("assert_held: %v", err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid, blockerPID := backendPID(t, conn), backendPID(t, blocker)
	type result struct {
		renewed, asked bool
		err            error
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.err = conn.QueryRow(ctx, `SELECT renewed, release_requested FROM pglease.renew_lease($1, 'a', 1, '2 hours')`, lease).
			Scan(&r.renewed, &r.asked)
		done <- r
	}()
	waitBlockedBy(t, db.pool, pid, blockerPID)
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.err != nil || !r.renewed || !r.asked {
		t.Fatalf("renew_lease after the fenced write: renewed %v, release_requested %v, %v; want true, true", r.renewed, r.asked, r.err)
	}
}

// valueOf reads the value and state lease_status shows for name.
func valueOf(t testing.TB, q querier, name string) (value *string, state string) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	if err := q.QueryRow(ctx, `SELECT value, state FROM pglease.lease_status WHERE name = $1`, name).Scan(&value, &state); err != nil {
		t.Fatalf("lease_status of %s: %v", name, err)
	}
	return value, state
}

// acquireValue calls the four-argument acquire and returns acquired, fence
// and value.
func acquireValue(t testing.TB, q querier, name, holder string, ttl time.Duration, value string) (bool, int64, *string) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var (
		ok    bool
		fence int64
		v     *string
	)
	err := q.QueryRow(ctx, `SELECT acquired, fence, value FROM pglease.acquire($1, $2, $3, $4)`,
		name, holder, ttl, value).Scan(&ok, &fence, &v)
	if err != nil {
		t.Fatalf("acquire(%s, %s, value): %v", name, holder, err)
	}
	return ok, fence, v
}

// testValueLivesWithTheTenure: a grant publishes its value, a refusal
// returns the holder's, set_value is a compare-and-set on (holder, fence),
// and a release or a new tenure (also one of the 0.2.0 acquire) clears it.
func testValueLivesWithTheTenure(t *testing.T, db *testDB) {
	n := namer(t)
	lease := n("lead")
	if ok, fence, v := acquireValue(t, db.pool, lease, "a", time.Hour, "addr-a"); !ok || fence != 1 || v == nil || *v != "addr-a" {
		t.Fatalf("grant: got %v fence %d value %v, want true, 1, addr-a", ok, fence, v)
	}
	if ok, _, v := acquireValue(t, db.pool, lease, "b", time.Hour, "addr-b"); ok || v == nil || *v != "addr-a" {
		t.Fatalf("refusal: got %v value %v, want false and the holder's addr-a", ok, v)
	}
	var set bool
	ctx := testContext(t)
	for _, c := range []struct {
		holder string
		fence  int64
		want   bool
	}{{"a", 2, false}, {"b", 1, false}, {"a", 1, true}} {
		if err := db.pool.QueryRow(ctx, `SELECT value_set FROM pglease.set_value($1, $2, $3, 'addr-a2')`, lease, c.holder, c.fence).Scan(&set); err != nil || set != c.want {
			t.Fatalf("set_value as %s fence %d: got %v (%v), want %v", c.holder, c.fence, set, err, c.want)
		}
	}
	if v, state := valueOf(t, db.pool, lease); state != "held" || v == nil || *v != "addr-a2" {
		t.Fatalf("after set_value: got %v %s, want addr-a2 held", v, state)
	}
	if !release(t, db.pool, lease, "a", 1) {
		t.Fatal("release refused")
	}
	var raw *string
	mustScan(t, db.pool, `SELECT value FROM pglease.leases WHERE name = $1`, []any{lease}, &raw)
	if raw != nil {
		t.Fatalf("value after release: got %q, want NULL", *raw)
	}
	// A tenure of the 0.2.0 acquire starts without a value.
	acquireValue(t, db.pool, lease, "c", time.Hour, "addr-c")
	release(t, db.pool, lease, "c", 2)
	mustAcquire(t, db.pool, lease, "d", time.Hour, 3)
	if v, _ := valueOf(t, db.pool, lease); v != nil {
		t.Fatalf("value of a 0.2.0 acquire's tenure: got %q, want NULL", *v)
	}
}

func mustScan(t testing.TB, q querier, sql string, args []any, dest ...any) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	if err := q.QueryRow(ctx, sql, args...).Scan(dest...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// testValueTooLongChangesNothing: a value over 1024 bytes is refused with
// 22023 by acquire and set_value, and nothing changes.
func testValueTooLongChangesNothing(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	long := strings.Repeat("x", 1025)
	_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.acquire($1, 'a', '1 hour', $2)`, n("new"), long)
	requirePgError(t, err, "22023", "p_value must be at most 1024 bytes")
	var rows int
	mustScan(t, db.pool, `SELECT count(*) FROM pglease.leases WHERE name = $1`, []any{n("new")}, &rows)
	if rows != 0 {
		t.Fatalf("a refused acquire left %d rows", rows)
	}
	acquireValue(t, db.pool, n("held"), "a", time.Hour, "ok")
	_, err = db.pool.Exec(ctx, `SELECT * FROM pglease.set_value($1, 'a', 1, $2)`, n("held"), long)
	requirePgError(t, err, "22023", "p_value must be at most 1024 bytes")
	if v, _ := valueOf(t, db.pool, n("held")); v == nil || *v != "ok" {
		t.Fatalf("value after a refused set_value: got %v, want ok", v)
	}
	// Exactly 1024 bytes is accepted.
	if ok, _, _ := acquireValue(t, db.pool, n("held"), "a", time.Hour, strings.Repeat("y", 1024)); !ok {
		t.Fatal("a 1024-byte value was refused")
	}
}

// requested reads release_requested_at and preferred_holder of name.
func requested(t testing.TB, q querier, name string) (at *time.Time, to *string) {
	t.Helper()
	mustScan(t, q, `SELECT release_requested_at, preferred_holder FROM pglease.lease_status WHERE name = $1`, []any{name}, &at, &to)
	return at, to
}

// testRequestReleaseNotHeld: a request for a free, expired or unknown lease
// raises PGL04 and changes nothing; bad arguments raise 22023/22004.
func testRequestReleaseNotHeld(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.request_release($1)`, n("unknown"))
	requirePgError(t, err, "PGL04", "is not held")
	mustAcquire(t, db.pool, n("free"), "a", time.Hour, 1)
	release(t, db.pool, n("free"), "a", 1)
	_, err = db.pool.Exec(ctx, `SELECT * FROM pglease.request_release($1)`, n("free"))
	requirePgError(t, err, "PGL04", "is not held")
	if at, _ := requested(t, db.pool, n("free")); at != nil {
		t.Fatal("a refused request left a request behind")
	}
	mustAcquire(t, db.pool, n("held"), "a", time.Hour, 1)
	for _, c := range []struct{ sql, code string }{
		{`SELECT * FROM pglease.request_release(NULL)`, "22004"},
		{`SELECT * FROM pglease.request_release($1, '')`, "22023"},
		{`SELECT * FROM pglease.request_release($1, NULL, '2 hours')`, "22023"},
		{`SELECT * FROM pglease.request_release($1, NULL, '-1 s')`, "22023"},
		{`SELECT * FROM pglease.observe($1, '0 s')`, "22023"},
	} {
		args := []any{n("held")}
		if !strings.Contains(c.sql, "$1") {
			args = nil
		}
		_, err := db.pool.Exec(ctx, c.sql, args...)
		requirePgError(t, err, c.code)
	}
	if at, _ := requested(t, db.pool, n("held")); at != nil {
		t.Fatal("a refused request left a request behind")
	}
}

// testRequestReleaseUnknownPreferred: a preferred holder that never asked
// for the lease, or the holder itself, raises PGL05 and changes nothing; a
// refused acquire with a value makes a holder a candidate.
func testRequestReleaseUnknownPreferred(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	lease := n("lead")
	acquireValue(t, db.pool, lease, "a", time.Hour, "addr-a")
	for _, to := range []string{"ghost", "a"} {
		_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.request_release($1, $2)`, lease, to)
		requirePgError(t, err, "PGL05", "is not a candidate")
	}
	if at, _ := requested(t, db.pool, lease); at != nil {
		t.Fatal("a refused request left a request behind")
	}
	acquireValue(t, db.pool, lease, "b", time.Hour, "addr-b") // refused: b is a candidate now
	var ok bool
	mustScan(t, db.pool, `SELECT requested FROM pglease.request_release($1, 'b')`, []any{lease}, &ok)
	if at, to := requested(t, db.pool, lease); !ok || at == nil || to == nil || *to != "b" {
		t.Fatalf("request for b: got %v at %v to %v", ok, at, to)
	}
	var asked bool
	mustScan(t, db.pool, `SELECT release_requested FROM pglease.renew_lease($1, 'a', 1, '1 hour')`, []any{lease}, &asked)
	if !asked {
		t.Fatal("renew_lease did not report the request")
	}
}

// testRefusalWritesCandidateOnlyWhenLapsing: a refused caller is a
// candidate until the refusing expiry plus its TTL; refusals of the same
// tenure end write nothing more (the row version stays), and a refusal
// after the holder renewed moves the registration to the new end.
func testRefusalWritesCandidateOnlyWhenLapsing(t *testing.T, db *testDB) {
	n := namer(t)
	lease := n("lead")
	candidate := func() (until time.Time, xmin string) {
		t.Helper()
		mustScan(t, db.pool, `SELECT until, xmin::text FROM pglease.candidates WHERE name = $1 AND holder = 'b'`,
			[]any{lease}, &until, &xmin)
		return until, xmin
	}
	holderEnd := func() (end time.Time) {
		t.Helper()
		mustScan(t, db.pool, `SELECT expires_at FROM pglease.leases WHERE name = $1`, []any{lease}, &end)
		return end
	}
	acquireValue(t, db.pool, lease, "a", time.Hour, "")
	acquireValue(t, db.pool, lease, "b", time.Minute, "")
	until, xmin := candidate()
	if want := holderEnd().Add(time.Minute); !until.Equal(want) {
		t.Fatalf("candidate b until %v, want the holder's end + 1 minute = %v", until, want)
	}
	for range 3 {
		acquireValue(t, db.pool, lease, "b", time.Minute, "")
	}
	if u, x := candidate(); !u.Equal(until) || x != xmin {
		t.Fatalf("refusals of the same tenure end rewrote the candidate: until %v xmin %s, was %v xmin %s", u, x, until, xmin)
	}
	mustExec(t, db.pool, `SELECT pglease.renew($1, 'a', 1, '2 hours')`, lease)
	acquireValue(t, db.pool, lease, "b", time.Minute, "")
	if u, _ := candidate(); !u.Equal(holderEnd().Add(time.Minute)) {
		t.Fatalf("after the holder renewed: candidate b until %v, want %v", u, holderEnd().Add(time.Minute))
	}
}

// testRequestFloodingMovesLeadershipOnce (docs/security.md): a permitted
// role that requests a release over and over asks each tenure once: the
// first request stands (its time and preferred holder), the others return
// false and change nothing, so a flood moves leadership once per tenure,
// no faster than the holder hands over.
func testRequestFloodingMovesLeadershipOnce(t *testing.T, db *testDB) {
	n := namer(t)
	lease := n("lead")
	acquireValue(t, db.pool, lease, "a", time.Hour, "addr-a")
	acquireValue(t, db.pool, lease, "b", time.Hour, "")
	acquireValue(t, db.pool, lease, "c", time.Hour, "")
	var ok bool
	mustScan(t, db.pool, `SELECT requested FROM pglease.request_release($1, 'b')`, []any{lease}, &ok)
	first, _ := requested(t, db.pool, lease)
	for i := range 200 {
		to := []string{"c", "b"}[i%2]
		mustScan(t, db.pool, `SELECT requested FROM pglease.request_release($1, $2)`, []any{lease, to}, &ok)
		if ok {
			t.Fatalf("request %d of the same tenure: requested = true, want false", i+2)
		}
	}
	if at, to := requested(t, db.pool, lease); at == nil || !at.Equal(*first) || to == nil || *to != "b" {
		t.Fatalf("after the flood: requested at %v (first %v) for %v, want the first request for b", at, first, to)
	}
	// The holder hands over once; the next tenure starts unasked.
	release(t, db.pool, lease, "a", 1)
	mustAcquire(t, db.pool, lease, "b", time.Hour, 2)
	if at, _ := requested(t, db.pool, lease); at != nil {
		t.Fatal("the new tenure starts with a release requested")
	}
}

// testPreferredHolderThatNeverComes (docs/security.md): the reservation for
// a preferred holder that never acquires ends p_for after the tenure ended;
// others are refused until then (holder = the preferred holder, expires_in
// at most p_for) and granted after it.
func testPreferredHolderThatNeverComes(t *testing.T, db *testDB) {
	n := namer(t)
	lease := n("lead")
	acquireValue(t, db.pool, lease, "a", time.Hour, "addr-a")
	acquireValue(t, db.pool, lease, "gone", time.Hour, "") // a candidate, which then goes away
	var ok bool
	mustScan(t, db.pool, `SELECT requested FROM pglease.request_release($1, 'gone', '2 seconds')`, []any{lease}, &ok)
	release(t, db.pool, lease, "a", 1)
	r := acquire(t, db.pool, lease, "x", time.Hour)
	if r.Acquired || r.Holder != "gone" || r.ExpiresIn <= 0 || r.ExpiresIn > 2*time.Second {
		t.Fatalf("acquire during the reservation: got %+v, want refused for gone, expires_in in (0, 2s]", r)
	}
	waitFor(t, 30*time.Second, "the reservation to end", func() (bool, error) {
		r, err := tryAcquire(testContext(t), db.pool, lease, "x", time.Hour)
		return r.Acquired && r.Fence == 2, err
	})
}

// testStrangerCannotRequestRelease (docs/security.md): a role with no grant
// and another service's pglease_client role get 42501 from
// request_release and change nothing; a pglease_operator may.
func testStrangerCannotRequestRelease(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	stranger := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, false))
	client := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	opRole := createLoginRole(t, adminURL, db.url, false)
	mustExec(t, connect(t, adminURL), `GRANT pglease_operator TO `+pgx.Identifier{opRole.name}.Sanitize())
	operator := connectAs(t, db.url, opRole)
	ctx := testContext(t)
	lease := n("lead")
	acquireValue(t, client, lease, "svc", time.Hour, "addr")
	for _, q := range []*pgx.Conn{stranger, client} {
		_, err := q.Exec(ctx, `SELECT * FROM pglease.request_release($1)`, lease)
		requirePgError(t, err, "42501")
	}
	if at, _ := requested(t, db.pool, lease); at != nil {
		t.Fatal("a refused request left a request behind")
	}
	var ok bool
	mustScan(t, operator, `SELECT requested FROM pglease.request_release($1)`, []any{lease}, &ok)
	if !ok {
		t.Fatal("pglease_operator's request: requested = false")
	}
	// The operator may not take or set anything.
	_, err := operator.Exec(ctx, `SELECT * FROM pglease.set_value($1, 'svc', 1, 'x')`, lease)
	requirePgError(t, err, "42501")
}

// testObservedChangesNotify: changes of an observed lease NOTIFY 'changed'
// (a new tenure, a value, a request, a release), those of a lease nobody
// observes send nothing, except a release request: that one always
// notifies, since its holder listens without observing
// (pglease.WatchReleaseRequests).
func testObservedChangesNotify(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	listener := connect(t, db.url)
	mustExec(t, listener, `LISTEN pglease`)
	watched, unwatched := n("watched"), n("unwatched")
	var state string
	mustScan(t, db.pool, `SELECT state FROM pglease.observe($1, '1 minute')`, []any{watched}, &state)
	if state != "free" {
		t.Fatalf("observe of an unknown lease: state %q, want free", state)
	}
	// next waits for the watched lease's 'changed'; with both, the
	// unwatched lease's must come first, and without, must not come.
	nextAfter := func(what string, both bool) {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		sawUnwatched := false
		for {
			nt, err := listener.WaitForNotification(wctx)
			if err != nil {
				t.Fatalf("waiting for the notification of %s: %v", what, err)
			}
			if strings.Contains(nt.Payload, `"event" : "changed"`) && strings.Contains(nt.Payload, unwatched) {
				if !both {
					t.Fatalf("%s: a change of a lease nobody observes was notified: %s", what, nt.Payload)
				}
				sawUnwatched = true
			}
			if strings.Contains(nt.Payload, `"event" : "changed"`) && strings.Contains(nt.Payload, `"`+watched+`"`) {
				if both && !sawUnwatched {
					t.Fatalf("%s of a lease nobody observes was not notified", what)
				}
				return
			}
		}
	}
	next := func(what string) { t.Helper(); nextAfter(what, false) }
	// Each change of the unwatched lease comes first: its notification, if
	// one were sent, would arrive before the watched lease's.
	acquireValue(t, db.pool, unwatched, "a", time.Hour, "v")
	acquireValue(t, db.pool, watched, "a", time.Hour, "v")
	next("a new tenure")
	mustExec(t, db.pool, `SELECT pglease.set_value($1, 'a', 1, 'w')`, unwatched)
	mustExec(t, db.pool, `SELECT pglease.set_value($1, 'a', 1, 'w')`, watched)
	next("a new value")
	mustExec(t, db.pool, `SELECT pglease.request_release($1)`, unwatched)
	mustExec(t, db.pool, `SELECT pglease.request_release($1)`, watched)
	nextAfter("a release request", true)
	release(t, db.pool, unwatched, "a", 1)
	release(t, db.pool, watched, "a", 1)
	next("a release")
	// A release after a hold the tenure has outlived (the cron form) frees
	// at once, as a release does: observers hear it, the value goes.
	acquireValue(t, db.pool, unwatched, "a", time.Hour, "v")
	acquireValue(t, db.pool, watched, "a", time.Hour, "v")
	next("a new tenure")
	mustExec(t, db.pool, `SELECT pglease.release_after($1, 'a', 2, interval '1 microsecond')`, unwatched)
	mustExec(t, db.pool, `SELECT pglease.release_after($1, 'a', 2, interval '1 microsecond')`, watched)
	next("a release after its hold")
	// The three-argument acquire takes the freed row (no value).
	mustExec(t, db.pool, `SELECT pglease.acquire($1, 'b', '1 hour')`, unwatched)
	mustExec(t, db.pool, `SELECT pglease.acquire($1, 'b', '1 hour')`, watched)
	next("a new tenure of a freed lease")
	var values int
	mustScan(t, db.pool, `SELECT count(value) FROM pglease.leases WHERE name IN ($1, $2)`, []any{watched, unwatched}, &values)
	if values != 0 {
		t.Fatalf("release_after left %d values on freed leases, want none", values)
	}
}

// testPurgeDropsLapsedRegistrations: purge deletes observer and candidate
// registrations past their until, and keeps live ones.
func testPurgeDropsLapsedRegistrations(t *testing.T, db *testDB) {
	n := namer(t)
	mustExec(t, db.pool, `INSERT INTO pglease.observers VALUES ($1, now() - interval '1 second', session_user), ($2, now() + interval '1 hour', session_user)`, n("lapsed"), n("live"))
	mustExec(t, db.pool, `INSERT INTO pglease.candidates VALUES ($1, 'h', now() - interval '1 second', session_user), ($2, 'h', now() + interval '1 hour', session_user)`, n("lapsed"), n("live"))
	mustExec(t, db.pool, `SELECT pglease.purge('1 day')`)
	var observers, candidates []string
	mustScan(t, db.pool, `SELECT array(SELECT name FROM pglease.observers WHERE name LIKE $1 ORDER BY 1),
		array(SELECT name FROM pglease.candidates WHERE name LIKE $1 ORDER BY 1)`, []any{n("%")}, &observers, &candidates)
	if len(observers) != 1 || observers[0] != n("live") || len(candidates) != 1 || candidates[0] != n("live") {
		t.Fatalf("after purge: observers %v, candidates %v; want only %s in each", observers, candidates, n("live"))
	}
}
