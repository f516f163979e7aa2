package contract

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestLimits: rate limits (sql/functions/80_limits.sql, docs/limits.md):
// GCRA decided on the server's clock, in the caller's transaction, bound
// to the role that owns the key.
func TestLimits(t *testing.T) {
	t.Parallel()
	runGroup(t, 24, []subtest{
		{"GCRAExact", testLimitGCRAExact},
		{"Tiers", testLimitTiers},
		{"RolledBackSpendIsNotSpent", testLimitRolledBack},
		{"ConcurrentTakersNeverOverAdmit", testLimitConcurrent},
		{"RoleBinding", testLimitRoleBinding},
		{"OtherRoleCannotDelay", testLimitOtherRoleCannotDelay},
		{"BadInputChangesNothing", testLimitBadInput},
		{"RepeatableRead", testLimitRepeatableRead},
		{"TakeWait", testLimitTakeWait},
		{"TakeWaitHoldsNoLock", testLimitTakeWaitHoldsNoLock},
		{"PurgeDeletesFullStates", testLimitPurge},
		{"Quota", testLimitQuota},
		{"ClaimAndTake", testClaimAndTake},
		{"ClaimAndTakeBadInput", testClaimAndTakeBadInput},
		{"ReserveSettle", testReserveSettle},
		{"ReservationExpires", testReservationExpires},
		{"ReservationExpiryAtLimitAsItStands", testReservationExpiryAtLimitAsItStands},
		{"ReservationExpiryIsolation", testReservationExpiryIsolation},
		{"ConcurrentReserversNeverOvershoot", testReserveConcurrent},
		{"ReserveAll", testReserveAll},
		{"ReserveAllExpires", testReserveAllExpires},
		{"ReserveAllBadInput", testReserveAllBadInput},
		{"ReserveAllRoles", testReserveAllRoles},
		{"ReserveAllCannotDelay", testReserveAllCannotDelay},
		{"ReserveAllIsolation", testReserveAllIsolation},
	})
}

// takeResult is one row of pglease.take, peek or take_wait.
type takeResult struct {
	Allowed   bool
	Remaining int32
	RetryIn   *time.Duration
	ResetIn   time.Duration
	Burst     int32
	At        time.Time
}

func (r takeResult) String() string {
	return fmt.Sprintf("allowed=%v remaining=%d retry_in=%s reset_in=%v burst=%d at=%s",
		r.Allowed, r.Remaining, ptrString(r.RetryIn), r.ResetIn, r.Burst, r.At.Format("15:04:05.000000"))
}

func tryTake(ctx context.Context, q querier, key string, cost int) (takeResult, error) {
	var r takeResult
	err := q.QueryRow(ctx, `SELECT allowed, remaining, retry_in, reset_in, burst, decided_at
		FROM pglease.take($1, $2)`, key, cost).
		Scan(&r.Allowed, &r.Remaining, &r.RetryIn, &r.ResetIn, &r.Burst, &r.At)
	return r, err
}

func take(t testing.TB, q querier, key string, cost int) takeResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	r, err := tryTake(ctx, q, key, cost)
	if err != nil {
		t.Fatalf("take(%q, %d): %v", key, cost, err)
	}
	return r
}

func peek(t testing.TB, q querier, key string) takeResult {
	t.Helper()
	var r takeResult
	mustScan(t, q, `SELECT allowed, remaining, retry_in, reset_in, burst, decided_at FROM pglease.peek($1)`,
		[]any{key}, &r.Allowed, &r.Remaining, &r.RetryIn, &r.ResetIn, &r.Burst, &r.At)
	return r
}

// setLimit sets target's limit as q (the owner when q is db.pool).
func setLimit(t testing.TB, q querier, target string, rate int, per time.Duration, burst int, exact bool) {
	t.Helper()
	var replaced bool
	mustScan(t, q, `SELECT pglease.limit_set($1, $2, $3, $4, $5)`, []any{target, rate, per, burst, exact}, &replaced)
}

// tatOf reads key's theoretical arrival time as the owner sees it (nil: no
// row), for the bucket of role.
func tatOf(t testing.TB, db *testDB, key, role string) *time.Time {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var tat time.Time
	err := db.pool.QueryRow(ctx, `SELECT tat FROM pglease.limit_state WHERE key = $1 AND key_role = $2`, key, role).Scan(&tat)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		t.Fatalf("tat of %q: %v", key, err)
	}
	return &tat
}

// gcra is the model the server must match exactly: emission e and burst b
// in whole microseconds, tat the theoretical arrival time.
type gcra struct {
	e, b int64
	tat  time.Time
}

// decide returns the model's answer to a take of cost at now, and spends
// when it allows.
func (m *gcra) decide(now time.Time, cost int64) takeResult {
	base := m.tat
	if base.Before(now) {
		base = now
	}
	tol := time.Duration(m.e*m.b) * time.Microsecond
	next := base.Add(time.Duration(m.e*cost) * time.Microsecond)
	r := takeResult{Burst: int32(m.b), At: now}
	if next.Sub(now) <= tol {
		m.tat = next
		r.Allowed = true
		r.Remaining = int32((tol - next.Sub(now)) / (time.Duration(m.e) * time.Microsecond))
		r.ResetIn = next.Sub(now)
		return r
	}
	r.Remaining = int32(max(0, (tol-base.Sub(now))/(time.Duration(m.e)*time.Microsecond)))
	r.ResetIn = base.Sub(now)
	retry := next.Add(-tol).Sub(now)
	r.RetryIn = &retry
	return r
}

// requireModel fails unless the server's answer got is the model's at the
// server's decision time.
func requireModel(t testing.TB, m *gcra, got takeResult, cost int64, what string) {
	t.Helper()
	want := m.decide(got.At, cost)
	if got.String() != want.String() {
		t.Fatalf("%s: got %s, want the model's %s", what, got, want)
	}
}

// waitServerPast waits until the server's clock is past at.
func waitServerPast(t testing.TB, q querier, at time.Time) {
	t.Helper()
	waitFor(t, 10*time.Second, "the server's clock to pass "+at.String(), func() (bool, error) {
		ctx, cancel := callContext(t)
		defer cancel()
		var past bool
		err := q.QueryRow(ctx, `SELECT clock_timestamp() >= $1`, at).Scan(&past)
		return past, err
	})
}

// testLimitGCRAExact: a full bucket of burst 5 allows 5 takes, then
// refuses with retry_in to the microsecond of the model (GCRA on the
// decision's own clock reading); after retry_in has passed on the server's
// clock, one more take is allowed, and reset_in ends exactly at the tat
// the server stored.
func testLimitGCRAExact(t *testing.T, db *testDB) {
	n := namer(t)
	key := n("k")
	setLimit(t, db.pool, n(""), 5, 5*time.Second, 5, false) // one token per second
	m := &gcra{e: 1_000_000, b: 5}
	c := connect(t, db.url)
	var role string
	mustScan(t, c, `SELECT session_user`, nil, &role)

	if p := peek(t, c, key); !p.Allowed || p.Remaining != 5 || p.ResetIn != 0 || p.RetryIn != nil {
		t.Fatalf("peek of a new key: got %s, want allowed, 5 remaining, reset_in 0", p)
	}
	allowed := 0
	var refused takeResult
	for i := 0; ; i++ {
		if i > 50 {
			t.Fatal("50 takes at one per second's rate were all allowed: want a refusal after the burst")
		}
		r := take(t, c, key, 1)
		requireModel(t, m, r, 1, fmt.Sprintf("take %d", i+1))
		if !r.Allowed {
			refused = r
			break
		}
		allowed++
		if tat := tatOf(t, db, key, role); tat == nil || !tat.Equal(r.At.Add(r.ResetIn)) {
			t.Fatalf("take %d: stored tat %v, want decided_at + reset_in = %v", i+1, tat, r.At.Add(r.ResetIn))
		}
	}
	if allowed < 5 {
		t.Fatalf("allowed takes from a full bucket of 5: got %d, want at least 5", allowed)
	}
	t.Logf("%d allowed, then refused with retry_in %v", allowed, *refused.RetryIn)
	if *refused.RetryIn <= 0 || *refused.RetryIn > time.Second {
		t.Fatalf("retry_in of the refusal: got %v, want more than 0 and at most one emission (1 s)", *refused.RetryIn)
	}
	// The refusal spent nothing.
	if p := peek(t, c, key); p.Allowed && p.At.Before(refused.At.Add(*refused.RetryIn)) {
		t.Fatalf("peek before retry_in has passed: got %s, want refused", p)
	}
	waitServerPast(t, c, refused.At.Add(*refused.RetryIn))
	r := take(t, c, key, 1)
	requireModel(t, m, r, 1, "take after retry_in")
	if !r.Allowed {
		t.Fatalf("take after retry_in: got %s, want allowed", r)
	}
}

// testLimitTiers: the longest matching target wins ('tenant/gold/' beside
// 'tenant/'); an exact target applies to its key alone; unset falls back
// to the shorter target; a key under no target is refused with PGL20.
func testLimitTiers(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n("tenant/"), 100, time.Minute, 2, false)
	setLimit(t, db.pool, n("tenant/gold/"), 1000, time.Minute, 7, false)
	setLimit(t, db.pool, n("tenant/gold/x"), 1, time.Minute, 1, true)
	for _, tc := range []struct {
		key   string
		burst int32
	}{{"tenant/acme", 2}, {"tenant/gold/acme", 7}, {"tenant/gold/x", 1}, {"tenant/gold/xy", 7}} {
		if r := take(t, db.pool, n(tc.key), 1); !r.Allowed || r.Burst != tc.burst {
			t.Fatalf("take(%q): got %s, want allowed with burst %d", tc.key, r, tc.burst)
		}
	}
	var removed bool
	mustScan(t, db.pool, `SELECT pglease.limit_unset($1)`, []any{n("tenant/gold/")}, &removed)
	if !removed {
		t.Fatal("limit_unset of a set target: got false, want true")
	}
	if r := take(t, db.pool, n("tenant/gold/other"), 1); r.Burst != 2 {
		t.Fatalf("take under the unset tier: got %s, want the shorter tier's burst 2", r)
	}
	_, err := tryTake(ctx, db.pool, n("elsewhere"), 1)
	requirePgError(t, err, "PGL20", "no rate limit is set for key")
}

// testLimitRolledBack: a spend in a transaction that rolls back is not
// spent; one that commits is.
func testLimitRolledBack(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 1, time.Hour, 3, false)
	c := connect(t, db.url)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := take(t, tx, n("k"), 3); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("take of the whole burst in a transaction: got %s, want allowed, 0 remaining", r)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if p := peek(t, c, n("k")); p.Remaining != 3 || p.ResetIn != 0 {
		t.Fatalf("peek after the rollback: got %s, want full (3 remaining, reset_in 0)", p)
	}
	tx, err = c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	take(t, tx, n("k"), 2)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if p := peek(t, c, n("k")); p.Remaining != 1 {
		t.Fatalf("peek after the commit: got %s, want 1 remaining", p)
	}
}

// testLimitConcurrent: 16 takers on one key for a second: the server's
// decisions, in the order of their clock readings, are exactly the
// model's (each decision read the state the one before left), so over
// any span d the allowed takes number at most burst + d / emission.
func testLimitConcurrent(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	key := n("k")
	const burst, emission = 10, 10 * time.Millisecond
	setLimit(t, db.pool, n(""), 100, time.Second, burst, false)
	pool := newPool(t, db.url, 16)
	var (
		mu        sync.Mutex
		decisions []takeResult
		wg        sync.WaitGroup
		errs      = make(chan error, 16)
	)
	end := time.Now().Add(time.Second)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(end) {
				r, err := tryTake(ctx, pool, key, 1)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				decisions = append(decisions, r)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("take: %v", err)
	}
	// Ties in the clock reading: an allowed take first (a refusal at the
	// same microsecond came after it; the reverse is impossible, as both
	// would read the same state).
	slices.SortFunc(decisions, func(a, b takeResult) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		switch {
		case a.Allowed == b.Allowed:
			return 0
		case a.Allowed:
			return -1
		}
		return 1
	})
	m := &gcra{e: emission.Microseconds(), b: burst}
	var allowed []time.Time
	for i, r := range decisions {
		requireModel(t, m, r, 1, fmt.Sprintf("decision %d of %d", i+1, len(decisions)))
		if r.Allowed {
			allowed = append(allowed, r.At)
		}
	}
	for i := range allowed {
		for j := i; j < len(allowed); j++ {
			if bound := burst + int(allowed[j].Sub(allowed[i])/emission); j-i+1 > bound {
				t.Fatalf("%d takes allowed in %v: want at most burst + span / emission = %d", j-i+1, allowed[j].Sub(allowed[i]), bound)
			}
		}
	}
	span := decisions[len(decisions)-1].At.Sub(decisions[0].At)
	t.Logf("16 takers: %d decisions, %d allowed in %v (bound %d)", len(decisions), len(allowed), span,
		burst+int(span/emission))
	if len(allowed) < burst {
		t.Fatalf("allowed takes: got %d, want at least the burst %d", len(allowed), burst)
	}
}

// limitRoles sets up role A owning prefix n("a/"), with A's limit on it,
// and role B, both pglease_client login roles; plus the owner's limit on
// the shared prefix n("shared/").
func limitRoles(t *testing.T, db *testDB) (a, b *pgx.Conn, roleA, roleB loginRole) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	roleA = createLoginRole(t, adminURL, db.url, true)
	roleB = createLoginRole(t, adminURL, db.url, true)
	a, b = connectAs(t, db.url, roleA), connectAs(t, db.url, roleB)
	var previous *string
	mustScan(t, db.pool, `SELECT previous_role FROM pglease.prefix_bind($1, $2)`, []any{n("a/"), roleA.name}, &previous)
	setLimit(t, a, n("a/"), 1, time.Hour, 2, false)
	setLimit(t, db.pool, n("shared/"), 1, time.Hour, 2, false)
	return a, b, roleA, roleB
}

// testLimitRoleBinding: another role cannot take, peek, reset or
// reconfigure a key under a prefix it does not own (42501, nothing
// changed); a client cannot set, unset or reset limits of shared names;
// each role's bucket of a shared key is its own.
func testLimitRoleBinding(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, roleA, roleB := limitRoles(t, db)
	take(t, a, n("a/k"), 1)
	before := limitSnapshot(t, db)
	for _, call := range []struct {
		what, sql string
		args      []any
	}{
		{"take", `SELECT * FROM pglease.take($1)`, []any{n("a/k")}},
		{"peek", `SELECT * FROM pglease.peek($1)`, []any{n("a/k")}},
		{"take_wait", `SELECT * FROM pglease.take_wait($1, 1, '1 second')`, []any{n("a/k")}},
		{"limit_reset", `SELECT pglease.limit_reset($1)`, []any{n("a/k")}},
		{"limit_set", `SELECT pglease.limit_set($1, 1000, '1 second', 1000)`, []any{n("a/")}},
		{"limit_set", `SELECT pglease.limit_set($1, 1000, '1 second', 1000)`, []any{n("a/k/sub")}},
		{"limit_unset", `SELECT pglease.limit_unset($1)`, []any{n("a/")}},
		{"limit_set", `SELECT pglease.limit_set($1, 1000, '1 second', 1000)`, []any{n("shared/")}},
		{"limit_unset", `SELECT pglease.limit_unset($1)`, []any{n("shared/")}},
		{"limit_reset", `SELECT pglease.limit_reset($1)`, []any{n("shared/k")}},
		{"claim_and_take", `SELECT * FROM pglease.claim_and_take($1, 'h', 1, '1 minute', 1, ARRAY[$2])`, []any{n("scope"), n("a/k")}},
	} {
		_, err := b.Exec(ctx, call.sql, call.args...)
		requirePgError(t, err, "42501", "pglease."+call.what+":", roleB.name)
	}
	// A client of the prefix's own role may reset it; none may reset a
	// shared key's bucket, even its own.
	_, err := a.Exec(ctx, `SELECT pglease.limit_reset($1)`, n("shared/k"))
	requirePgError(t, err, "42501", "shared name")
	if after := limitSnapshot(t, db); after != before {
		t.Fatalf("state after B's refused calls:\n got %s\nwant %s", after, before)
	}
	var reset int
	mustScan(t, a, `SELECT pglease.limit_reset($1)`, []any{n("a/k")}, &reset)
	if reset != 1 {
		t.Fatalf("A's limit_reset of its key: got %d buckets, want 1", reset)
	}
	// Shared key: a bucket per role.
	take(t, a, n("shared/k"), 2)
	if r := take(t, a, n("shared/k"), 1); r.Allowed {
		t.Fatalf("A's third take of the shared key: got %s, want refused", r)
	}
	if r := take(t, b, n("shared/k"), 2); !r.Allowed {
		t.Fatalf("B's take of the shared key A emptied: got %s, want allowed from B's own bucket", r)
	}
	if tatOf(t, db, n("shared/k"), roleA.name) == nil || tatOf(t, db, n("shared/k"), roleB.name) == nil {
		t.Fatal("want one state row per role of the shared key")
	}
	// The owner resets every role's bucket of a shared key.
	mustScan(t, db.pool, `SELECT pglease.limit_reset($1)`, []any{n("shared/k")}, &reset)
	if reset != 2 {
		t.Fatalf("the owner's limit_reset of the shared key: got %d buckets, want 2", reset)
	}
}

// limitSnapshot is every limit and key state of t's own names, as text.
func limitSnapshot(t testing.TB, db *testDB) string {
	t.Helper()
	var s string
	mustScan(t, db.pool, `SELECT coalesce((SELECT string_agg(l::text, ';' ORDER BY l.target) FROM pglease.limits AS l
			WHERE starts_with(l.target, $1)), '')
		|| ' | ' || coalesce((SELECT string_agg(s::text, ';' ORDER BY s.key, s.key_role) FROM pglease.limit_state AS s
			WHERE starts_with(s.key, $1)), '')`,
		[]any{namer(t)("")}, &s)
	return s
}

// testLimitOtherRoleCannotDelay: B's calls left open in a transaction
// (its own takes of the shared key and of A's prefix, refused) hold no
// lock that A's takes wait for: A's takes run with lock_timeout = 100ms.
func testLimitOtherRoleCannotDelay(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, _, _ := limitRoles(t, db)
	mustExec(t, a, `SET lock_timeout = '100ms'`)
	for _, hostile := range []string{
		`SELECT * FROM pglease.take($1, 1)`,
		`SELECT * FROM pglease.peek($1)`,
	} {
		tx, err := b.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = tx.Exec(ctx, hostile, n("shared/k"))
		_, _ = tx.Exec(ctx, `SAVEPOINT s`)
		if _, err := tx.Exec(ctx, hostile, n("a/k")); pgCode(err) != "42501" {
			t.Fatalf("B's %s of A's key: got %v, want 42501", hostile, err)
		}
		_, _ = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`)
		for _, key := range []string{n("shared/k"), n("a/k")} {
			if _, err := tryTake(ctx, a, key, 1); err != nil {
				t.Fatalf("A's take of %q while B's %s is open: %v", key, hostile, err)
			}
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testLimitBadInput: every refused argument raises its SQLSTATE and
// changes nothing.
func testLimitBadInput(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 10, time.Second, 3, false)
	take(t, db.pool, n("k"), 1)
	long := n(strings.Repeat("x", 257))
	for _, tc := range []struct {
		sql  string
		args []any
		code string
		msg  string
	}{
		{`SELECT * FROM pglease.take(NULL)`, nil, "22004", "p_key must not be NULL"},
		{`SELECT * FROM pglease.take('')`, nil, "22023", "p_key must be 1 to 256 bytes"},
		{`SELECT * FROM pglease.take($1)`, []any{long}, "22023", "p_key must be 1 to 256 bytes"},
		{`SELECT * FROM pglease.take($1, 0)`, []any{n("k")}, "22023", "p_cost must be from 1"},
		{`SELECT * FROM pglease.take($1, -1)`, []any{n("k")}, "22023", "p_cost must be from 1"},
		{`SELECT * FROM pglease.take($1, NULL)`, []any{n("k")}, "22004", "p_cost must not be NULL"},
		{`SELECT * FROM pglease.take($1, 4)`, []any{n("k")}, "PGL21", "more than the burst 3"},
		{`SELECT * FROM pglease.take($1, 4)`, []any{n("new")}, "PGL21", "more than the burst 3"},
		{`SELECT * FROM pglease.take('no limit here')`, nil, "PGL20", "no rate limit is set for key"},
		{`SELECT * FROM pglease.peek($1)`, []any{long}, "22023", "p_key must be 1 to 256 bytes"},
		{`SELECT * FROM pglease.peek('no limit here')`, nil, "PGL20", "no rate limit"},
		{`SELECT * FROM pglease.take_wait($1, 1, NULL)`, []any{n("k")}, "22004", "p_max_wait must not be NULL"},
		{`SELECT * FROM pglease.take_wait($1, 1, '-1 second')`, []any{n("k")}, "22023", "p_max_wait must be from 0 to 1 hour"},
		{`SELECT * FROM pglease.take_wait($1, 1, '2 hours')`, []any{n("k")}, "22023", "p_max_wait must be from 0 to 1 hour"},
		{`SELECT * FROM pglease.take_wait($1, 0, '1 second')`, []any{n("k")}, "22023", "p_cost must be from 1"},
		{`SELECT pglease.limit_set($1, 0, '1 second', 1)`, []any{n("")}, "22023", "p_rate must be from 1"},
		{`SELECT pglease.limit_set($1, 1, '0', 1)`, []any{n("")}, "22023", "p_per must be more than 0"},
		{`SELECT pglease.limit_set($1, 1, '400 days', 1)`, []any{n("")}, "22023", "p_per must be more than 0 and at most"},
		{`SELECT pglease.limit_set($1, 1, '1 second', 0)`, []any{n("")}, "22023", "p_burst must be from 1"},
		{`SELECT pglease.limit_set($1, 2000000, '1 second', 1)`, []any{n("")}, "22023", "more than one token per microsecond"},
		{`SELECT pglease.limit_set($1, 1, '366 days', 101)`, []any{n("")}, "22023", "more than 100 years to fill"},
		{`SELECT pglease.limit_set($1, 1, '1 second', 1, NULL)`, []any{n("")}, "22004", "p_exact must not be NULL"},
		{`SELECT pglease.limit_set(NULL, 1, '1 second', 1)`, nil, "22004", "p_target must not be NULL"},
		{`SELECT pglease.limit_set($1, 1, '1 second', 1)`, []any{long}, "22023", "p_target must be 1 to 256 bytes"},
		{`SELECT pglease.limit_unset('')`, nil, "22023", "p_target must be 1 to 256 bytes"},
		{`SELECT pglease.limit_reset(NULL)`, nil, "22004", "p_key must not be NULL"},
	} {
		before := limitSnapshot(t, db)
		_, err := db.pool.Exec(ctx, tc.sql, tc.args...)
		requirePgError(t, err, tc.code, tc.msg)
		if after := limitSnapshot(t, db); after != before {
			t.Fatalf("%s changed the limits or states:\n got %s\nwant %s", tc.sql, after, before)
		}
	}
}

// testLimitRepeatableRead: a take in a REPEATABLE READ transaction decides
// and commits; one whose snapshot predates another take of the same bucket
// raises 40001 and spends nothing.
func testLimitRepeatableRead(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 1, time.Hour, 3, false)
	c, other := connect(t, db.url), connect(t, db.url)
	take(t, c, n("k"), 1) // the row exists

	tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if r := take(t, tx, n("k"), 1); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("take under REPEATABLE READ: got %s, want allowed, 1 remaining", r)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	tx, err = c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	mustExec(t, tx, `SELECT 1`) // the snapshot
	take(t, other, n("k"), 1)
	_, err = tryTake(ctx, tx, n("k"), 1)
	requirePgError(t, err, "40001")
	_ = tx.Rollback(ctx)
	if p := peek(t, c, n("k")); p.Remaining != 0 || p.Allowed {
		t.Fatalf("peek after the 40001: got %s, want the three committed takes only (0 remaining)", p)
	}
}

// testLimitTakeWait: take_wait sleeps the refusal's retry_in and takes;
// a wait that cannot end by p_max_wait is refused at once.
func testLimitTakeWait(t *testing.T, db *testDB) {
	n := namer(t)
	setLimit(t, db.pool, n(""), 5, time.Second, 1, false) // 200 ms per token
	c := connect(t, db.url)
	first := take(t, c, n("k"), 1)
	var r takeResult
	var waited time.Duration
	mustScan(t, c, `SELECT allowed, remaining, retry_in, reset_in, burst, decided_at, waited
		FROM pglease.take_wait($1, 1, '5 seconds')`, []any{n("k")},
		&r.Allowed, &r.Remaining, &r.RetryIn, &r.ResetIn, &r.Burst, &r.At, &waited)
	if !r.Allowed || r.At.Before(first.At.Add(first.ResetIn)) {
		t.Fatalf("take_wait after a take: got %s, want allowed at or after %v", r, first.At.Add(first.ResetIn))
	}
	t.Logf("take_wait waited %v for a token due %v after the first take", waited, first.ResetIn)
	// Refused at once: a token is 200 ms away, p_max_wait is 1 ms.
	mustScan(t, c, `SELECT allowed, remaining, retry_in, reset_in, burst, decided_at, waited
		FROM pglease.take_wait($1, 1, '1 millisecond')`, []any{n("k")},
		&r.Allowed, &r.Remaining, &r.RetryIn, &r.ResetIn, &r.Burst, &r.At, &waited)
	if r.Allowed || r.RetryIn == nil || waited >= *r.RetryIn {
		t.Fatalf("take_wait with too short a p_max_wait: got %s waited %v, want refused without sleeping", r, waited)
	}
}

// testLimitTakeWaitHoldsNoLock: while take_wait sleeps for a token, the
// key's row is not locked: another take of the bucket does not wait.
func testLimitTakeWaitHoldsNoLock(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 1, 3*time.Second, 1, false)
	sleeper, other := connect(t, db.url), connect(t, db.url)
	take(t, other, n("k"), 1)
	pid := backendPID(t, sleeper)
	done := make(chan error, 1)
	go func() {
		_, err := sleeper.Exec(ctx, `SELECT * FROM pglease.take_wait($1, 1, '10 seconds')`, n("k"))
		done <- err
	}()
	waitFor(t, 10*time.Second, "take_wait to sleep", func() (bool, error) {
		var sleeping bool
		err := other.QueryRow(ctx, `SELECT coalesce(wait_event = 'PgSleep', false) FROM pg_stat_activity WHERE pid = $1`,
			int64(pid)).Scan(&sleeping)
		return sleeping, err
	})
	mustExec(t, other, `SET lock_timeout = '100ms'`)
	if r, err := tryTake(ctx, other, n("k"), 1); err != nil || r.Allowed {
		t.Fatalf("take while take_wait sleeps: got %s, %v; want refused at once", r, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("take_wait: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("take_wait did not return within 20 s")
	}
}

// testLimitPurge: a client's purge deletes its role's full key states and
// no other role's, and keeps states that are not full.
func testLimitPurge(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	roleC := createLoginRole(t, adminURL, db.url, true)
	roleD := createLoginRole(t, adminURL, db.url, true)
	c, d := connectAs(t, db.url, roleC), connectAs(t, db.url, roleD)
	setLimit(t, db.pool, n("fast/"), 1000, time.Second, 1, false)
	setLimit(t, db.pool, n("slow/"), 1, time.Hour, 1, false)
	full := take(t, c, n("fast/k"), 1)
	take(t, c, n("slow/k"), 1)
	dFull := take(t, d, n("fast/k"), 1)
	waitServerPast(t, c, full.At.Add(full.ResetIn))
	waitServerPast(t, c, dFull.At.Add(dFull.ResetIn))
	var purged int64
	mustScan(t, c, `SELECT pglease.purge('0')`, nil, &purged)
	if tatOf(t, db, n("fast/k"), roleC.name) != nil {
		t.Fatal("C's full state after C's purge: still there, want deleted")
	}
	if tatOf(t, db, n("slow/k"), roleC.name) == nil {
		t.Fatal("C's state that is not full, after C's purge: deleted, want kept")
	}
	if tatOf(t, db, n("fast/k"), roleD.name) == nil {
		t.Fatal("D's full state after C's purge: deleted, want kept (another role's)")
	}
	if purged < 1 {
		t.Fatalf("C's purge: got %d rows, want at least its full state", purged)
	}
	// Deleting a full state changes no decision.
	if r := take(t, c, n("fast/k"), 1); !r.Allowed || r.Remaining != 0 {
		t.Fatalf("take after the purge: got %s, want allowed from a full bucket", r)
	}
}

// testLimitQuota: a role capped at 1 'limits' row creates one key state,
// is refused a second (53400, no row), and keeps taking the first.
func testLimitQuota(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	role := createLoginRole(t, pgtest.AdminURL(t), db.url, true)
	c := connectAs(t, db.url, role)
	setLimit(t, db.pool, n(""), 1000, time.Second, 5, false)
	setQuota(t, db, role.name, "limits", 1)
	take(t, c, n("1"), 1)
	_, err := tryTake(ctx, c, n("2"), 1)
	requireQuotaExceeded(t, err, "take", role.name, "limits", 1)
	if tatOf(t, db, n("2"), role.name) != nil {
		t.Fatal("state of the refused key: got a row, want none")
	}
	if r := take(t, c, n("1"), 1); !r.Allowed {
		t.Fatalf("take of the existing key at the cap: got %s, want allowed", r)
	}
	if got := usageOf(t, c, role.name); got != "limits 1 1" {
		t.Fatalf("quota_usage: got %q, want %q", got, "limits 1 1")
	}
}

type claimTakeResult struct {
	Claimed   bool
	Slot      *int32
	Fence     *int64
	RefusedBy *string
	RetryIn   *time.Duration
}

func claimAndTake(t testing.TB, q querier, scope, holder string, capacity int, keys []string, costs []int32) claimTakeResult {
	t.Helper()
	var r claimTakeResult
	mustScan(t, q, `SELECT claimed, slot, fence, refused_by, retry_in
		FROM pglease.claim_and_take($1, $2, $3, '1 minute', 1, $4, $5)`, []any{scope, holder, capacity, keys, costs},
		&r.Claimed, &r.Slot, &r.Fence, &r.RefusedBy, &r.RetryIn)
	return r
}

// testClaimAndTake: a claim with takes over several keys is all or
// nothing: a refused key rolls back the claim and the keys taken before
// it; a refused claim spends no token; the narrowest (longest) key is
// taken first.
func testClaimAndTake(t *testing.T, db *testDB) {
	n := namer(t)
	setLimit(t, db.pool, n("user/"), 1, time.Hour, 1, false)
	setLimit(t, db.pool, n("tenant"), 1, time.Hour, 5, true)
	scope := n("scope")
	user, tenant := n("user/1"), n("tenant")

	r := claimAndTake(t, db.pool, scope, "h1", 2, []string{tenant, user}, nil)
	if !r.Claimed || r.Slot == nil || r.RefusedBy != nil || r.RetryIn != nil {
		t.Fatalf("first claim_and_take: got claimed=%v slot=%s refused_by=%s, want claimed", r.Claimed, ptrString(r.Slot), ptrString(r.RefusedBy))
	}
	// user/2 is taken first (the narrowest), then the tenant refuses 5 of
	// its 4 tokens: the claim and user/2's token go back.
	user2 := n("user/2")
	r = claimAndTake(t, db.pool, scope, "h2", 2, []string{tenant, user2}, []int32{5, 1})
	if r.Claimed || r.Slot != nil || r.RefusedBy == nil || *r.RefusedBy != tenant || r.RetryIn == nil || *r.RetryIn <= 0 {
		t.Fatalf("claim_and_take with a short key: got claimed=%v slot=%s refused_by=%s retry_in=%s, want refused by %q",
			r.Claimed, ptrString(r.Slot), ptrString(r.RefusedBy), ptrString(r.RetryIn), tenant)
	}
	if inUse, _ := scopeStatus(t, db.pool, scope); inUse != 1 {
		t.Fatalf("units in use after the refused key: got %d, want 1 (the claim rolled back)", inUse)
	}
	if p := peek(t, db.pool, user2); p.Remaining != 1 {
		t.Fatalf("user/2's tokens after the refused key: got %s, want full (its take rolled back)", p)
	}
	// user/1 is empty, the tenant not: the narrowest refuses first.
	if r = claimAndTake(t, db.pool, scope, "h2", 2, []string{tenant, user}, nil); r.RefusedBy == nil || *r.RefusedBy != user {
		t.Fatalf("an empty user key: got refused_by %s, want %q", ptrString(r.RefusedBy), user)
	}
	if p := peek(t, db.pool, tenant); p.Remaining != 4 {
		t.Fatalf("tenant's tokens after the refusals: got %s, want 4 remaining", p)
	}
	// A full scope refuses before any key is taken.
	mustExec(t, db.pool, `SELECT pglease.limit_reset($1)`, tenant)
	full := n("full")
	if r = claimAndTake(t, db.pool, full, "h1", 1, []string{tenant}, nil); !r.Claimed {
		t.Fatal("claim of an empty scope of capacity 1: got refused")
	}
	r = claimAndTake(t, db.pool, full, "h2", 1, []string{tenant}, []int32{2})
	if r.Claimed || r.RefusedBy == nil || *r.RefusedBy != full || r.RetryIn == nil {
		t.Fatalf("claim of a full scope: got claimed=%v refused_by=%s, want refused by the scope", r.Claimed, ptrString(r.RefusedBy))
	}
	if p := peek(t, db.pool, tenant); p.Remaining != 4 {
		t.Fatalf("tenant's tokens after the refused claim: got %s, want 4 (1 taken, none by the refusal)", p)
	}
}

// testClaimAndTakeBadInput: bad arguments are refused before anything is
// claimed or taken.
func testClaimAndTakeBadInput(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n("k"), 1, time.Hour, 2, false)
	scope := n("scope")
	for _, tc := range []struct {
		keys  any
		costs any
		code  string
		msg   string
	}{
		{nil, nil, "22004", "p_keys must not be NULL"},
		{[]string{}, nil, "22023", "p_keys must hold 1 to 64 keys"},
		{[]string{n("k1"), n("k1")}, nil, "22023", "must not name a key twice"},
		{[]string{n("k1"), n("k2")}, []int32{1}, "22023", "one cost per key"},
		{[]string{n("k1")}, []int32{0}, "22023", "p_costs must be from 1"},
		{[]string{n("k1")}, []int32{3}, "PGL21", "more than the burst 2"},
		{[]string{n("k1"), "no limit here"}, nil, "PGL20", "no rate limit"},
	} {
		before := limitSnapshot(t, db)
		_, err := db.pool.Exec(ctx, `SELECT * FROM pglease.claim_and_take($1, 'h', 1, '1 minute', 1, $2, $3)`,
			scope, tc.keys, tc.costs)
		requirePgError(t, err, tc.code, tc.msg)
		if after := limitSnapshot(t, db); after != before {
			t.Fatalf("claim_and_take(%v, %v) changed the states:\n got %s\nwant %s", tc.keys, tc.costs, after, before)
		}
		if inUse, _ := scopeStatus(t, db.pool, scope); inUse != 0 {
			t.Fatalf("claim_and_take(%v, %v): %d units in use, want 0", tc.keys, tc.costs, inUse)
		}
	}
}

type reserveResult struct {
	Reserved    bool
	Reservation *int64
	ExpiresAt   *time.Time
	Remaining   int32
	RetryIn     *time.Duration
	At          time.Time
}

func tryReserve(ctx context.Context, q querier, key string, amount int, ttl time.Duration) (reserveResult, error) {
	var r reserveResult
	err := q.QueryRow(ctx, `SELECT reserved, reservation, expires_at, remaining, retry_in, decided_at
		FROM pglease.reserve($1, $2, $3)`, key, amount, ttl).
		Scan(&r.Reserved, &r.Reservation, &r.ExpiresAt, &r.Remaining, &r.RetryIn, &r.At)
	return r, err
}

func reserve(t testing.TB, q querier, key string, amount int, ttl time.Duration) reserveResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	r, err := tryReserve(ctx, q, key, amount, ttl)
	if err != nil {
		t.Fatalf("reserve(%q, %d, %v): %v", key, amount, ttl, err)
	}
	return r
}

type settleResult struct {
	Settled   bool
	Refunded  int32
	Remaining int32
	At        time.Time
}

func trySettle(ctx context.Context, q querier, key string, reservation int64, actual int) (settleResult, error) {
	var r settleResult
	err := q.QueryRow(ctx, `SELECT settled, refunded, remaining, decided_at FROM pglease.settle($1, $2, $3)`,
		key, reservation, actual).Scan(&r.Settled, &r.Refunded, &r.Remaining, &r.At)
	return r, err
}

func settle(t testing.TB, q querier, key string, reservation int64, actual int) settleResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	r, err := trySettle(ctx, q, key, reservation, actual)
	if err != nil {
		t.Fatalf("settle(%q, %d, %d): %v", key, reservation, actual, err)
	}
	return r
}

// testReserveSettle: a reservation spends its amount; settling gives back
// what was not used, once; another role's settle, a bad actual and bad
// input change nothing.
func testReserveSettle(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, _, _ := limitRoles(t, db) // n("shared/"): 1 per hour, burst 2
	setLimit(t, db.pool, n("shared/"), 1, time.Hour, 10, false)
	key := n("shared/k")
	r := reserve(t, a, key, 6, time.Hour)
	if !r.Reserved || r.Reservation == nil || r.Remaining != 4 || r.ExpiresAt == nil || !r.ExpiresAt.Equal(r.At.Add(time.Hour)) {
		t.Fatalf("reserve 6 of 10: got %+v, want reserved, 4 remaining, expiring an hour after decided_at", r)
	}
	if r2 := reserve(t, a, key, 5, time.Hour); r2.Reserved || r2.Reservation != nil || r2.RetryIn == nil {
		t.Fatalf("reserve 5 with 4 left: got %+v, want refused with retry_in", r2)
	}
	before := limitSnapshot(t, db)
	_, err := trySettle(ctx, a, key, *r.Reservation, 7)
	requirePgError(t, err, "22023", "p_actual 7 is more than the 6 tokens")
	_, err = trySettle(ctx, a, key, 0, 1)
	requirePgError(t, err, "22023", "p_reservation must be 1 or more")
	_, err = trySettle(ctx, a, key, *r.Reservation, -1)
	requirePgError(t, err, "22023", "p_actual must be from 0")
	// B's settle of A's reservation: B's bucket of the shared key has no
	// such reservation.
	if s := settle(t, b, key, *r.Reservation, 0); s.Settled || s.Refunded != 0 {
		t.Fatalf("B's settle of A's reservation: got %+v, want not settled", s)
	}
	if after := limitSnapshot(t, db); after != before {
		t.Fatalf("state after refused settles:\n got %s\nwant %s", after, before)
	}
	s := settle(t, a, key, *r.Reservation, 2)
	if !s.Settled || s.Refunded != 4 || s.Remaining != 8 {
		t.Fatalf("settle at 2 of 6: got %+v, want settled, 4 refunded, 8 remaining", s)
	}
	if s := settle(t, a, key, *r.Reservation, 2); s.Settled || s.Remaining != 8 {
		t.Fatalf("settle again: got %+v, want not settled, 8 remaining", s)
	}
	// A reservation rolled back with its transaction was never made.
	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	reserve(t, tx, key, 8, time.Hour)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if p := peek(t, a, key); p.Remaining != 8 {
		t.Fatalf("tokens after a rolled-back reserve: got %s, want 8", p)
	}
	// Under a prefix bound to A: B is refused outright.
	ra := reserve(t, a, n("a/k"), 1, time.Hour)
	_, err = trySettle(ctx, b, n("a/k"), *ra.Reservation, 0)
	requirePgError(t, err, "42501", "pglease.settle:")
	_, err = tryReserve(ctx, b, n("a/k"), 1, time.Hour)
	requirePgError(t, err, "42501", "pglease.reserve:")
	_, err = tryReserve(ctx, a, key, 1, 0)
	requirePgError(t, err, "22023", "p_ttl must be more than 0")
}

// testReservationExpires: a reservation never settled gives its whole
// amount back at its expiry on the server's clock: peek counts it back
// at once, the next call that locks the bucket (here a refused settle of
// it) gives it back and deletes it, and a settle at or after the expiry is
// refused. Another role's take, peek, settle and purge of the same shared
// key neither give C's back nor read or change anything of C's bucket;
// C's purge gives back what expired without a take.
func testReservationExpires(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	roleC := createLoginRole(t, adminURL, db.url, true)
	c := connectAs(t, db.url, roleC)
	d := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	setLimit(t, db.pool, n(""), 1, time.Hour, 5, false)
	key := n("k")
	live := reserve(t, c, key, 1, time.Hour)
	r := reserve(t, c, key, 3, 200*time.Millisecond)
	if !r.Reserved || r.Remaining != 1 {
		t.Fatalf("reserve 3 after 1 of 5: got %+v, want reserved, 1 remaining", r)
	}
	waitServerPast(t, c, *r.ExpiresAt)
	if p := peek(t, c, key); p.Remaining != 4 {
		t.Fatalf("peek after the expiry: got %s, want 4 remaining (the 3 back, the live 1 held)", p)
	}
	cRows := func() string {
		var s string
		mustScan(t, db.pool, `SELECT coalesce((SELECT string_agg(r::text, ';' ORDER BY r.id) FROM pglease.limit_reservations AS r
				WHERE r.key = $1 AND r.key_role = $2), '')
			|| ' | ' || coalesce((SELECT s::text FROM pglease.limit_state AS s WHERE s.key = $1 AND s.key_role = $2), '')`,
			[]any{key, roleC.name}, &s)
		return s
	}
	before := cRows()
	if !strings.Contains(before, fmt.Sprint(*r.Reservation)) {
		t.Fatalf("C's bucket before any call after the expiry: %s, want reservation %d still there (peek writes nothing)", before, *r.Reservation)
	}
	take(t, d, key, 1)
	peek(t, d, key)
	if s := settle(t, d, key, *r.Reservation, 0); s.Settled || s.Refunded != 0 {
		t.Fatalf("D's settle of C's expired reservation: got %+v, want not settled", s)
	}
	mustExec(t, d, `SELECT pglease.purge('0')`)
	if after := cRows(); after != before {
		t.Fatalf("C's bucket after D's calls of the same key:\n got %s\nwant %s", after, before)
	}
	s := settle(t, c, key, *r.Reservation, 0)
	if s.Settled || s.Refunded != 0 || s.Remaining != 4 {
		t.Fatalf("settle after expiry: got %+v, want not settled, 0 refunded, 4 remaining (the 3 came back at the expiry)", s)
	}
	if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.limit_reservations WHERE id = $1`, *r.Reservation); got != 0 {
		t.Fatalf("rows of the reservation given back: got %d, want 0", got)
	}
	if s := settle(t, c, key, *r.Reservation, 0); s.Settled || s.Remaining != 4 {
		t.Fatalf("settle again: got %+v, want not settled, still 4 remaining (given back once)", s)
	}
	// The state is the model's: two spends, the 3 given back at their
	// expiry, whenever a call finds them.
	if tat := tatOf(t, db, key, roleC.name); tat == nil || !tat.Equal(live.At.Add(time.Hour)) {
		t.Fatalf("C's tat: got %v, want %v (the live reservation's hour only)", tat, live.At.Add(time.Hour))
	}
	// Purge gives back what expired with no call of the bucket after it.
	r2 := reserve(t, c, key, 2, 100*time.Millisecond)
	waitServerPast(t, c, *r2.ExpiresAt)
	mustExec(t, c, `SELECT pglease.purge('0')`)
	if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.limit_reservations WHERE id = $1`, *r2.Reservation); got != 0 {
		t.Fatalf("C's expired reservation after C's purge: got %d rows, want 0", got)
	}
	if tat := tatOf(t, db, key, roleC.name); tat == nil || !tat.Equal(live.At.Add(time.Hour)) {
		t.Fatalf("C's tat after its purge: got %v, want %v (the 2 back)", tat, live.At.Add(time.Hour))
	}
	if p := peek(t, c, key); p.Remaining != 4 {
		t.Fatalf("peek after the purge: got %s, want 4 remaining", p)
	}
}

// testReservationExpiryAtLimitAsItStands: a refund at expiry counts at
// the key's limit as it stands, as a settle's does: two reservations of 4
// at 1 per hour, the limit changed to 2 per hour, one settled at 0 and
// one given back at its expiry leave the bucket exactly where two settles
// at the new rate would.
func testReservationExpiryAtLimitAsItStands(t *testing.T, db *testDB) {
	n := namer(t)
	key := n("k")
	setLimit(t, db.pool, n(""), 1, time.Hour, 10, false)
	first := reserve(t, db.pool, key, 4, 200*time.Millisecond)
	second := reserve(t, db.pool, key, 4, time.Hour)
	setLimit(t, db.pool, n(""), 2, time.Hour, 10, false)
	if s := settle(t, db.pool, key, *second.Reservation, 0); !s.Settled || s.Refunded != 4 {
		t.Fatalf("settle of the live reservation: got %+v, want settled, 4 refunded", s)
	}
	waitServerPast(t, db.pool, *first.ExpiresAt)
	// 8 hours spent from first.At, 2 + 2 hours given back at 30 minutes a
	// token.
	want := first.At.Add(4 * time.Hour)
	p := peek(t, db.pool, key)
	if got := p.At.Add(p.ResetIn); !got.Equal(want) || p.Remaining != 2 {
		t.Fatalf("peek after the expiry: got %s (tat %v), want tat %v, 2 remaining", p, got, want)
	}
	r := take(t, db.pool, key, 1)
	if got := r.At.Add(r.ResetIn); !got.Equal(want.Add(30*time.Minute)) || r.Remaining != 1 {
		t.Fatalf("take after the expiry: got %s (tat %v), want tat %v, 1 remaining", r, got, want.Add(30*time.Minute))
	}
}

// ownRoleSessions returns two sessions of a login role of t's own, whose
// purge reaches only its own buckets (the owner's would reach every
// subtest's, which share the database).
func ownRoleSessions(t *testing.T, db *testDB) (c, other *pgx.Conn) {
	role := createLoginRole(t, pgtest.AdminURL(t), db.url, true)
	return connectAs(t, db.url, role), connectAs(t, db.url, role)
}

// testReservationExpiryIsolation: under REPEATABLE READ and SERIALIZABLE,
// a settle, take or reserve whose snapshot predates a committed give-back
// of an expired reservation (by another take, or by purge) raises 40001
// and gives nothing back again; the bucket ends as the model says: the
// amount back once.
func testReservationExpiryIsolation(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	setLimit(t, db.pool, n(""), 1, time.Hour, 6, false)
	c, other := ownRoleSessions(t, db)
	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		for _, giver := range []string{`SELECT * FROM pglease.take($1, 1)`, `SELECT pglease.purge('0') FROM (SELECT $1::text) AS k`} {
			for _, racer := range []string{"settle", "take", "reserve"} {
				key := n(fmt.Sprintf("%s/%d/%s", level, len(giver), racer))
				r := reserve(t, c, key, 4, 50*time.Millisecond)
				waitServerPast(t, c, *r.ExpiresAt)
				tx, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
				if err != nil {
					t.Fatal(err)
				}
				mustExec(t, tx, `SELECT 1`) // the snapshot
				mustExec(t, other, giver, key)
				switch racer {
				case "settle":
					_, err = trySettle(ctx, tx, key, *r.Reservation, 0)
				case "take":
					_, err = tryTake(ctx, tx, key, 1)
				default:
					_, err = tryReserve(ctx, tx, key, 1, time.Hour)
				}
				requirePgError(t, err, "40001")
				_ = tx.Rollback(ctx)
				want := int32(6)
				if strings.Contains(giver, "take") {
					want = 5
				}
				if p := peek(t, c, key); p.Remaining != want {
					t.Fatalf("%s, %s racing %q: got %s, want %d remaining (the 4 back once)", level, racer, giver, p, want)
				}
			}
		}
	}
}

// testReserveConcurrent: 16 reservers on one budget of 100 tokens (no
// refill during the test) reserve 1 to 8 tokens and settle at random
// (some never do). Replayed in the order of their clock readings, every
// decision equals the budget's arithmetic: a reserve is allowed exactly
// when its amount fits what is left, and every call's remaining is the
// budget minus what is spent and not refunded; so the reservations never
// overshoot it.
func testReserveConcurrent(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	const budget = 100
	setLimit(t, db.pool, n(""), 1, time.Hour, budget, false)
	key := n("k")
	pool := newPool(t, db.url, 16)
	type op struct {
		at        time.Time
		reserve   bool
		ok        bool
		amount    int // reserved, or refunded
		remaining int32
	}
	var (
		mu  sync.Mutex
		ops []op
		wg  sync.WaitGroup
	)
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 51))
			for range 25 {
				amount := 1 + rng.IntN(8)
				r, err := tryReserve(ctx, pool, key, amount, time.Hour)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ops = append(ops, op{r.At, true, r.Reserved, amount, r.Remaining})
				mu.Unlock()
				if !r.Reserved || rng.IntN(10) == 0 {
					continue // refused, or never settled
				}
				s, err := trySettle(ctx, pool, key, *r.Reservation, rng.IntN(amount+1))
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ops = append(ops, op{s.At, false, s.Settled, int(s.Refunded), s.Remaining})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("reserve or settle: %v", err)
	}
	slices.SortFunc(ops, func(a, b op) int { return a.at.Compare(b.at) })
	spent, reserved, refused := 0, 0, 0
	for i, o := range ops {
		switch {
		case o.reserve && o.ok != (spent+o.amount <= budget):
			t.Fatalf("op %d: reserve of %d with %d spent: got allowed=%v, want %v", i, o.amount, spent, o.ok, !o.ok)
		case o.reserve && o.ok:
			spent += o.amount
			reserved++
		case o.reserve:
			refused++
		case !o.ok:
			t.Fatalf("op %d: settle of a live reservation of this bucket: got not settled", i)
		default:
			spent -= o.amount
		}
		if spent > budget || int(o.remaining) != budget-spent {
			t.Fatalf("op %d: remaining %d, want budget - spent = %d", i, o.remaining, budget-spent)
		}
	}
	t.Logf("16 reservers: %d calls, %d reserved, %d refused, %d tokens spent at the end", len(ops), reserved, refused, spent)
	if p := peek(t, pool, key); int(p.Remaining) != budget-spent {
		t.Fatalf("tokens at the end: got %d, want %d", p.Remaining, budget-spent)
	}
}
