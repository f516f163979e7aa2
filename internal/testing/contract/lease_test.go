package contract

import (
	"context"
	"testing"
	"time"
)

// shortTTL is the TTL of leases and slots whose expiry is the subject of a
// test: the test waits until the server reports them expired.
const shortTTL = 250 * time.Millisecond

// liveThenExpiredTTL is the TTL of a lease that a test must use live and
// then wait out: long enough to stay live for a few calls on a loaded
// machine.
const liveThenExpiredTTL = 1500 * time.Millisecond

// TestLeases covers the lease functions: acquire, renew, release,
// assert_held, force_release and the lease_status view.
func TestLeases(t *testing.T) {
	t.Parallel()
	runGroup(t, 16, []subtest{
		{"AcquireFreeLease", testAcquireFreeLease},
		{"AcquireReentrant", testAcquireReentrant},
		{"AcquireHeldByOther", testAcquireHeldByOther},
		{"RefusalExpiresInOnDecidingClock", testRefusalExpiresInOnDecidingClock},
		{"ExpiredLeaseTakenOver", testExpiredLeaseTakenOver},
		{"ExpiredLeaseNotRenewable", testExpiredLeaseNotRenewable},
		{"RenewCompareAndSwap", testRenewCompareAndSwap},
		{"ReleaseCompareAndSwap", testReleaseCompareAndSwap},
		{"FenceNeverGoesBackwards", testFenceNeverGoesBackwards},
		{"AssertHeld", testAssertHeld},
		{"AssertHeldReadsClockAfterLock", testAssertHeldReadsClockAfterLock},
		{"AssertHeldBlocksTakeover", testAssertHeldBlocksTakeover},
		{"RefusedAcquireTakesNoLock", testRefusedAcquireTakesNoLock},
		{"LeaseStatusStates", testLeaseStatusStates},
		{"ForceRelease", testForceRelease},
		{"NotifyLease", testNotifyLease},
		{"ServerClockPerCall", testServerClockPerCall},
		{"Psql", testPsql},
		{"NamesRoundTrip", testNamesRoundTrip},
	})
}

func testAcquireFreeLease(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	r := acquire(t, pool, n("free"), "a", 30*time.Second)
	if !r.Acquired || r.Fence != 1 || r.Holder != "a" {
		t.Fatalf("acquire: got acquired=%v fence=%d holder=%q, want true, 1, \"a\"", r.Acquired, r.Fence, r.Holder)
	}
	if r.ExpiresIn != 30*time.Second {
		t.Fatalf("expires_in: got %v, want exactly the TTL 30s", r.ExpiresIn)
	}

	st := mustLeaseStatus(t, pool, n("free"))
	if st.State != "held" || st.Holder == nil || *st.Holder != "a" || st.Fence != 1 {
		t.Fatalf("lease_status: got state=%s holder=%s fence=%d, want held, a, 1", st.State, ptrString(st.Holder), st.Fence)
	}
	if st.ExpiresAt == nil || !st.ExpiresAt.Equal(r.ExpiresAt) {
		t.Fatalf("lease_status expires_at: got %s, want %v", ptrString(st.ExpiresAt), r.ExpiresAt)
	}
	requireAtMostAbout(t, "lease_status expires_in", *st.ExpiresIn, 30*time.Second, 5*time.Second)
}

// testRefusalExpiresInOnDecidingClock: a refused acquire's expires_in is
// the holder's expiry minus the clock reading that decided the refusal,
// also when registering the refused caller as a waiter then waits past
// that expiry (for a lock on its waiters row): it stays > 0 and is not
// read again after the wait (before 0.3.0 it was, and came out negative).
func testRefusalExpiresInOnDecidingClock(t *testing.T, db *testDB) {
	url, pool := db.url, db.pool
	n := namer(t)
	connA := connect(t, url)
	connB := connect(t, url)
	ctx := testContext(t)

	held := mustAcquire(t, pool, n("held"), "a", liveThenExpiredTTL, 1)
	// A registration of a waiter of the lease by the same role, uncommitted:
	// the refusal's own registration must wait for it.
	txA, err := connA.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txA.Rollback(context.Background()) }()
	if _, err := txA.Exec(ctx, `INSERT INTO pglease.waiters AS w (kind, name, until, caller_role) VALUES ('lease', $1, clock_timestamp(), session_user)
		ON CONFLICT ON CONSTRAINT waiters_pkey DO UPDATE SET until = excluded.until`, n("held")); err != nil {
		t.Fatal(err)
	}

	pidA, pidB := backendPID(t, connA), backendPID(t, connB)
	type outcome struct {
		r   acquireResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := tryAcquire(ctx, connB, n("held"), "b", 10*time.Second)
		done <- outcome{r, err}
	}()
	waitBlockedBy(t, pool, pidB, pidA)
	waitLeaseState(t, pool, n("held"), "expired")
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("refused acquire still blocked 10s after the waiter registration it waited for committed")
	}
	if o.err != nil {
		t.Fatalf("acquire of a held lease: %v", o.err)
	}
	if o.r.Acquired || o.r.Holder != "a" || o.r.Fence != 1 || !o.r.ExpiresAt.Equal(held.ExpiresAt) {
		t.Fatalf("acquire of a held lease: got %+v, want refused, naming a, fence 1, expires_at %v", o.r, held.ExpiresAt)
	}
	if o.r.ExpiresIn <= 0 || o.r.ExpiresIn > liveThenExpiredTTL {
		t.Fatalf("refusal's expires_in: got %v, want in (0, %v]: the time left on the clock reading that decided, not after the wait",
			o.r.ExpiresIn, liveThenExpiredTTL)
	}
}

func testAcquireReentrant(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	first := mustAcquire(t, pool, n("re"), "a", 30*time.Second, 1)
	second := mustAcquire(t, pool, n("re"), "a", 30*time.Second, 1)
	if !second.ExpiresAt.After(first.ExpiresAt) {
		t.Fatalf("re-entrant acquire expires_at: got %v, want after the first %v (re-pinned to now + ttl)",
			second.ExpiresAt, first.ExpiresAt)
	}
	if second.ExpiresIn != 30*time.Second {
		t.Fatalf("re-entrant acquire expires_in: got %v, want 30s", second.ExpiresIn)
	}

	// Re-pinned, not extended: a shorter TTL moves the expiry back.
	third := mustAcquire(t, pool, n("re"), "a", 2*time.Second, 1)
	if !third.ExpiresAt.Before(second.ExpiresAt) || third.ExpiresIn != 2*time.Second {
		t.Fatalf("re-entrant acquire with 2s: got expires_at=%v expires_in=%v, want before %v and 2s",
			third.ExpiresAt, third.ExpiresIn, second.ExpiresAt)
	}
	st := mustLeaseStatus(t, pool, n("re"))
	if st.Fence != 1 || !st.ExpiresAt.Equal(third.ExpiresAt) {
		t.Fatalf("lease_status: got fence=%d expires_at=%v, want 1, %v", st.Fence, *st.ExpiresAt, third.ExpiresAt)
	}
	requireAtMostAbout(t, "lease_status expires_in", *st.ExpiresIn, 2*time.Second, 2*time.Second)
}

func testAcquireHeldByOther(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	a := mustAcquire(t, pool, n("busy"), "a", 10*time.Second, 1)
	// b asks for an hour: what it learns is a's tenure, not its own request.
	b := acquire(t, pool, n("busy"), "b", time.Hour)
	if b.Acquired {
		t.Fatalf("acquire by b: got acquired=true, want false while a holds the lease")
	}
	if b.Holder != "a" || b.Fence != 1 || !b.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("acquire by b: got holder=%q fence=%d expires_at=%v, want a, 1, %v",
			b.Holder, b.Fence, b.ExpiresAt, a.ExpiresAt)
	}
	if b.ExpiresIn <= 0 || b.ExpiresIn > 10*time.Second {
		t.Fatalf("acquire by b: got expires_in=%v, want in (0, 10s]", b.ExpiresIn)
	}

	st := mustLeaseStatus(t, pool, n("busy"))
	if st.State != "held" || *st.Holder != "a" || st.Fence != 1 || !st.ExpiresAt.Equal(a.ExpiresAt) {
		t.Fatalf("lease_status after refused acquire: got %s %s fence %d expires_at %v, want held by a, fence 1, %v",
			st.State, *st.Holder, st.Fence, *st.ExpiresAt, a.ExpiresAt)
	}
}

func testExpiredLeaseTakenOver(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	mustAcquire(t, pool, n("exp"), "a", shortTTL, 1)
	waitLeaseState(t, pool, n("exp"), "expired")

	b := mustAcquire(t, pool, n("exp"), "b", 10*time.Second, 2)
	if b.ExpiresIn != 10*time.Second {
		t.Fatalf("takeover expires_in: got %v, want 10s", b.ExpiresIn)
	}
	requireNotRenewed(t, renew(t, pool, n("exp"), "a", 1, 10*time.Second))
	if st := mustLeaseStatus(t, pool, n("exp")); st.State != "held" || *st.Holder != "b" || st.Fence != 2 {
		t.Fatalf("lease_status: got %s %s fence %d, want held by b with fence 2", st.State, ptrString(st.Holder), st.Fence)
	}
}

func testExpiredLeaseNotRenewable(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	first := mustAcquire(t, pool, n("gone"), "a", shortTTL, 1)
	waitLeaseState(t, pool, n("gone"), "expired")

	requireNotRenewed(t, renew(t, pool, n("gone"), "a", 1, 10*time.Second))
	st := mustLeaseStatus(t, pool, n("gone"))
	if st.State != "expired" || !st.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("lease_status after refused renew: got %s expires_at %v, want expired at %v",
			st.State, *st.ExpiresAt, first.ExpiresAt)
	}

	// The last holder acquiring again starts a new tenure.
	mustAcquire(t, pool, n("gone"), "a", 10*time.Second, 2)
	requireNotRenewed(t, renew(t, pool, n("gone"), "a", 1, 10*time.Second))
	if r := renew(t, pool, n("gone"), "a", 2, 10*time.Second); !r.Renewed {
		t.Fatalf("renew with the new fence 2: got renewed=false, want true")
	}
}

func testRenewCompareAndSwap(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	held := mustAcquire(t, pool, n("held"), "a", 10*time.Second, 1)
	mustAcquire(t, pool, n("released"), "a", 10*time.Second, 1)
	if !release(t, pool, n("released"), "a", 1) {
		t.Fatalf("release: got false, want true")
	}

	for _, tc := range []struct {
		desc   string
		name   string
		holder string
		fence  int64
	}{
		{"wrong holder", "held", "b", 1},
		{"wrong fence", "held", "a", 2},
		{"fence zero", "held", "a", 0},
		{"released", "released", "a", 1},
		{"unknown name", "unknown", "a", 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			requireNotRenewed(t, renew(t, pool, n(tc.name), tc.holder, tc.fence, time.Hour))
		})
	}
	st := mustLeaseStatus(t, pool, n("held"))
	if st.State != "held" || *st.Holder != "a" || st.Fence != 1 || !st.ExpiresAt.Equal(held.ExpiresAt) {
		t.Fatalf("lease after refused renewals: got %s %s fence %d expires_at %v, want unchanged held by a, 1, %v",
			st.State, ptrString(st.Holder), st.Fence, *st.ExpiresAt, held.ExpiresAt)
	}
	if st := mustLeaseStatus(t, pool, n("released")); st.State != "free" {
		t.Fatalf("released lease after refused renewal: got state %s, want free", st.State)
	}
	if _, found := leaseStatus(t, pool, n("unknown")); found {
		t.Fatalf("renew of an unknown name created a row")
	}

	// Success re-pins to now + ttl: 1s when 10s remain leaves about 1s.
	r := renew(t, pool, n("held"), "a", 1, time.Second)
	if !r.Renewed || r.ExpiresIn == nil || *r.ExpiresIn != time.Second || r.ExpiresAt == nil {
		t.Fatalf("renew: got renewed=%v expires_in=%s, want true, 1s", r.Renewed, ptrString(r.ExpiresIn))
	}
	if !r.ExpiresAt.Before(held.ExpiresAt) {
		t.Fatalf("renew expires_at: got %v, want before the old %v (re-pinned, not added)", *r.ExpiresAt, held.ExpiresAt)
	}
	st = mustLeaseStatus(t, pool, n("held"))
	requireAtMostAbout(t, "expires_in after renewing with 1s", *st.ExpiresIn, time.Second, 900*time.Millisecond)
}

func testReleaseCompareAndSwap(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	held := mustAcquire(t, pool, n("rel"), "a", 10*time.Second, 1)
	for _, tc := range []struct {
		desc   string
		holder string
		fence  int64
	}{
		{"wrong holder", "b", 1},
		{"wrong fence", "a", 2},
	} {
		if release(t, pool, n("rel"), tc.holder, tc.fence) {
			t.Fatalf("release with %s: got true, want false", tc.desc)
		}
		st := mustLeaseStatus(t, pool, n("rel"))
		if st.State != "held" || *st.Holder != "a" || st.Fence != 1 || !st.ExpiresAt.Equal(held.ExpiresAt) {
			t.Fatalf("after release with %s: got %s %s fence %d, want unchanged held by a, fence 1",
				tc.desc, st.State, ptrString(st.Holder), st.Fence)
		}
	}

	if !release(t, pool, n("rel"), "a", 1) {
		t.Fatalf("release by the holder: got false, want true")
	}
	st := mustLeaseStatus(t, pool, n("rel"))
	if st.State != "free" || st.Holder != nil || st.Fence != 1 || st.ExpiresIn == nil || *st.ExpiresIn != 0 ||
		st.ExpiresAt == nil || !st.ExpiresAt.Before(held.ExpiresAt) {
		t.Fatalf("after release: got state=%s holder=%s fence=%d expires_at=%s expires_in=%s, want free, NULL, 1 (kept), the release time, 0",
			st.State, ptrString(st.Holder), st.Fence, ptrString(st.ExpiresAt), ptrString(st.ExpiresIn))
	}
	if release(t, pool, n("rel"), "a", 1) {
		t.Fatalf("second release: got true, want false")
	}
	if release(t, pool, n("unknown"), "a", 1) {
		t.Fatalf("release of an unknown name: got true, want false")
	}

	mustAcquire(t, pool, n("exp"), "a", shortTTL, 1)
	waitLeaseState(t, pool, n("exp"), "expired")
	if release(t, pool, n("exp"), "a", 1) {
		t.Fatalf("release of an expired lease: got true, want false (the tenure already ended)")
	}
}

func testFenceNeverGoesBackwards(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	type step struct {
		holder string
		end    string // how the tenure ends: release, expire or force
	}
	steps := []step{
		{"a", "release"},
		{"b", "expire"},
		{"a", "force"},
		{"c", "release"},
		{"c", "expire"},  // same holder again after a release
		{"c", "release"}, // same holder again after an expiry
		{"a", "expire"},
	}
	for i, s := range steps {
		want := int64(i + 1)
		ttl := 30 * time.Second
		if s.end == "expire" {
			ttl = shortTTL
		}
		mustAcquire(t, pool, n("seq"), s.holder, ttl, want)
		switch s.end {
		case "release":
			if !release(t, pool, n("seq"), s.holder, want) {
				t.Fatalf("step %d: release: got false, want true", i+1)
			}
			waitLeaseState(t, pool, n("seq"), "free")
		case "expire":
			waitLeaseState(t, pool, n("seq"), "expired")
		case "force":
			if _, err := pool.Exec(ctx, `SELECT pglease.force_release($1)`, n("seq")); err != nil {
				t.Fatalf("step %d: force_release: %v", i+1, err)
			}
		}
		if st := mustLeaseStatus(t, pool, n("seq")); st.Fence != want {
			t.Fatalf("step %d: fence after %s: got %d, want %d (kept)", i+1, s.end, st.Fence, want)
		}
	}
}

func testAssertHeld(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	mustAcquire(t, pool, n("live"), "a", 30*time.Second, 1)
	mustAcquire(t, pool, n("released"), "a", 30*time.Second, 1)
	release(t, pool, n("released"), "a", 1)
	mustAcquire(t, pool, n("expired"), "a", shortTTL, 1)
	mustAcquire(t, pool, n("retaken"), "a", 30*time.Second, 1)
	release(t, pool, n("retaken"), "a", 1)
	mustAcquire(t, pool, n("retaken"), "a", 30*time.Second, 2)
	waitLeaseState(t, pool, n("expired"), "expired")

	t.Run("live fence", func(t *testing.T) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if err := assertHeld(ctx, tx, n("live"), 1); err != nil {
			t.Fatalf("assert_held on the live fence: got %v, want success", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	})

	for _, tc := range []struct {
		desc  string
		name  string
		fence int64
		says  string
	}{
		{"wrong fence", "live", 2, ": current fence is 1"},
		{"older tenure", "retaken", 1, ": current fence is 2"},
		{"released", "released", 1, ": it was released"},
		{"expired", "expired", 1, ": it expired"},
		{"unknown name", "unknown", 1, ": no such lease"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(context.Background()) }()
			requirePgError(t, assertHeld(ctx, tx, n(tc.name), tc.fence), "PGL01", tc.says)
		})
	}
}

// testAssertHeldReadsClockAfterLock checks that assert_held judges expiry by
// the clock when it runs, not by the start of the caller's transaction.
func testAssertHeldReadsClockAfterLock(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	// The transaction starts (now() is fixed) before the lease is taken.
	tx := beginBefore(t, pool)
	mustAcquire(t, pool, n("clock"), "a", shortTTL, 1)
	waitLeaseState(t, pool, n("clock"), "expired")
	requirePgError(t, assertHeld(ctx, tx, n("clock"), 1), "PGL01", ": it expired")
}

func testAssertHeldBlocksTakeover(t *testing.T, db *testDB) {
	url, pool := db.url, db.pool
	n := namer(t)
	connA := connect(t, url)
	connB := connect(t, url)
	ctx := testContext(t)

	mustAcquire(t, pool, n("guarded"), "a", liveThenExpiredTTL, 1)

	txA, err := connA.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txA.Rollback(context.Background()) }()
	if err := assertHeld(ctx, txA, n("guarded"), 1); err != nil {
		t.Fatalf("assert_held: %v", err)
	}
	// assert_held bounds the transaction: its idle timeout becomes the
	// tenure's time left + 100 ms, so it would end 100 ms after the expiry
	// this test waits for, and on a loaded machine before the test has
	// seen the takeover blocked (TestFencedTransactionBound tests that
	// bound). A client of the holder's role may raise the timeouts again:
	// this one does, so that the lock is held until its commit.
	if _, err := txA.Exec(ctx, `SELECT pg_catalog.set_config(s, '0', true)
		FROM unnest(ARRAY['idle_in_transaction_session_timeout', 'statement_timeout']
		            || CASE WHEN current_setting('server_version_num')::int >= 170000
		                    THEN ARRAY['transaction_timeout'] ELSE '{}' END) AS s`); err != nil {
		t.Fatalf("raise the fenced transaction's timeouts: %v", err)
	}
	if _, err := txA.Exec(ctx, `CREATE TEMP TABLE guarded_write AS SELECT 1 AS fence`); err != nil {
		t.Fatal(err)
	}
	waitLeaseState(t, pool, n("guarded"), "expired")

	pidA, pidB := backendPID(t, connA), backendPID(t, connB)
	type outcome struct {
		r   acquireResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := tryAcquire(ctx, connB, n("guarded"), "b", 10*time.Second)
		done <- outcome{r, err}
	}()
	waitBlockedBy(t, pool, pidB, pidA)
	select {
	case o := <-done:
		t.Fatalf("takeover returned while the asserting transaction is open: %+v, %v", o.r, o.err)
	default:
	}

	if err := txA.Commit(ctx); err != nil {
		t.Fatalf("commit the fenced write: %v", err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("takeover still blocked 10s after the asserting transaction committed")
	}
	if o.err != nil {
		t.Fatalf("takeover: %v", o.err)
	}
	if !o.r.Acquired || o.r.Fence != 2 || o.r.Holder != "b" {
		t.Fatalf("takeover: got acquired=%v fence=%d holder=%q, want true, 2, b", o.r.Acquired, o.r.Fence, o.r.Holder)
	}
}

// testRefusedAcquireTakesNoLock checks the promise that a refused acquire
// never delays the holder's renewals, and is not delayed by them.
func testRefusedAcquireTakesNoLock(t *testing.T, db *testDB) {
	url, pool := db.url, db.pool
	n := namer(t)
	other := connect(t, url)
	holder := connect(t, url)
	ctx := testContext(t)

	mustAcquire(t, pool, n("nolock"), "a", 30*time.Second, 1)

	// A refused acquire inside an open transaction...
	txO, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txO.Rollback(context.Background()) }()
	if r := acquire(t, txO, n("nolock"), "b", 30*time.Second); r.Acquired {
		t.Fatalf("acquire by b: got acquired=true, want false")
	}
	// ...does not hold up the holder's renewal (the call is bounded by
	// callTimeout: a lock wait fails it).
	if r := renew(t, pool, n("nolock"), "a", 1, 30*time.Second); !r.Renewed {
		t.Fatalf("renew by the holder: got false, want true")
	}
	if err := txO.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// And a renewal in an open transaction does not hold up a refusal.
	txH, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txH.Rollback(context.Background()) }()
	if r := renew(t, txH, n("nolock"), "a", 1, 30*time.Second); !r.Renewed {
		t.Fatalf("renew in transaction: got false, want true")
	}
	if r := acquire(t, pool, n("nolock"), "b", 30*time.Second); r.Acquired || r.Holder != "a" {
		t.Fatalf("acquire by b while a renews: got acquired=%v holder=%q, want false, a", r.Acquired, r.Holder)
	}
}

func testLeaseStatusStates(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	mustAcquire(t, pool, n("held"), "a", 30*time.Second, 1)
	// The view reads the clock, not the transaction start: a transaction
	// begun before the lease was taken sees it expire.
	tx := beginBefore(t, pool)
	mustAcquire(t, pool, n("expired"), "a", shortTTL, 1)
	mustAcquire(t, pool, n("free"), "a", 30*time.Second, 1)
	release(t, pool, n("free"), "a", 1)
	waitLeaseState(t, pool, n("expired"), "expired")
	if st := mustLeaseStatus(t, tx, n("expired")); st.State != "expired" {
		t.Fatalf("lease_status in a transaction begun before the expiry: got %s, want expired", st.State)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	held := mustLeaseStatus(t, pool, n("held"))
	if held.State != "held" || held.ExpiresAt == nil || held.ExpiresIn == nil {
		t.Fatalf("held: got %+v", held)
	}
	requireAtMostAbout(t, "held expires_in", *held.ExpiresIn, 30*time.Second, 5*time.Second)
	// expires_in is computed by the server when the view is read.
	var serverLeft time.Duration
	var again time.Duration
	err := pool.QueryRow(ctx, `SELECT expires_at - clock_timestamp(), (SELECT expires_in FROM pglease.lease_status WHERE name = $1)
		FROM pglease.leases WHERE name = $1`, n("held")).Scan(&serverLeft, &again)
	if err != nil {
		t.Fatal(err)
	}
	if again >= *held.ExpiresIn || again > serverLeft+50*time.Millisecond || again < serverLeft-50*time.Millisecond {
		t.Fatalf("expires_in read again: got %v, want below the earlier %v and about expires_at - clock_timestamp() = %v",
			again, *held.ExpiresIn, serverLeft)
	}

	expired := mustLeaseStatus(t, pool, n("expired"))
	if expired.Holder == nil || *expired.Holder != "a" || expired.ExpiresAt == nil || expired.ExpiresIn == nil || *expired.ExpiresIn != 0 {
		t.Fatalf("expired: got holder=%s expires_at=%s expires_in=%s, want a, set, 0",
			ptrString(expired.Holder), ptrString(expired.ExpiresAt), ptrString(expired.ExpiresIn))
	}

	free := mustLeaseStatus(t, pool, n("free"))
	if free.State != "free" || free.Holder != nil || free.ExpiresAt == nil || free.ExpiresIn == nil || *free.ExpiresIn != 0 || free.Fence != 1 {
		t.Fatalf("free: got state=%s holder=%s expires_at=%s expires_in=%s fence=%d, want free, NULL, when released, 0, 1",
			free.State, ptrString(free.Holder), ptrString(free.ExpiresAt), ptrString(free.ExpiresIn), free.Fence)
	}
	if _, found := leaseStatus(t, pool, n("never")); found {
		t.Fatalf("never acquired lease: got a row, want none")
	}
}

func testForceRelease(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	forceRelease := func(name string) (released bool, holder *string, fence *int64) {
		t.Helper()
		err := pool.QueryRow(ctx, `SELECT released, holder, fence FROM pglease.force_release($1)`, name).
			Scan(&released, &holder, &fence)
		if err != nil {
			t.Fatalf("force_release(%q): %v", name, err)
		}
		return released, holder, fence
	}

	mustAcquire(t, pool, n("op"), "a", 30*time.Second, 1)
	released, holder, fence := forceRelease(n("op"))
	if !released || holder == nil || *holder != "a" || fence == nil || *fence != 1 {
		t.Fatalf("force_release: got released=%v holder=%s fence=%s, want true, a, 1", released, ptrString(holder), ptrString(fence))
	}
	if st := mustLeaseStatus(t, pool, n("op")); st.State != "free" || st.Fence != 1 {
		t.Fatalf("after force_release: got %s fence %d, want free, fence 1", st.State, st.Fence)
	}
	requireNotRenewed(t, renew(t, pool, n("op"), "a", 1, 30*time.Second))
	if release(t, pool, n("op"), "a", 1) {
		t.Fatalf("release by the old holder after force_release: got true, want false")
	}
	requirePgError(t, assertHeld(ctx, pool, n("op"), 1), "PGL01")
	mustAcquire(t, pool, n("op"), "b", 30*time.Second, 2)

	// Already free: nothing to end.
	release(t, pool, n("op"), "b", 2)
	if released, holder, _ := forceRelease(n("op")); released || holder != nil {
		t.Fatalf("force_release of a free lease: got released=%v holder=%s, want false, NULL", released, ptrString(holder))
	}
	if released, holder, fence := forceRelease(n("unknown")); released || holder != nil || fence != nil {
		t.Fatalf("force_release of an unknown name: got %v, %s, %s, want false, NULL, NULL",
			released, ptrString(holder), ptrString(fence))
	}

	// An expired tenure is ended too, and the next one gets fence + 1.
	mustAcquire(t, pool, n("stale"), "a", shortTTL, 1)
	waitLeaseState(t, pool, n("stale"), "expired")
	if released, holder, fence := forceRelease(n("stale")); !released || *holder != "a" || *fence != 1 {
		t.Fatalf("force_release of an expired lease: got %v, %s, %s, want true, a, 1",
			released, ptrString(holder), ptrString(fence))
	}
	mustAcquire(t, pool, n("stale"), "a", 30*time.Second, 2)
}
