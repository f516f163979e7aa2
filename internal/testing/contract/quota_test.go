package contract

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestQuotas: the schema owner's caps on the rows of each role
// (sql/functions/06_quotas.sql, docs/security.md#quotas). A call that
// would create a row over its role's cap raises 53400 naming the role, the
// kind and the cap, and changes nothing; calls on existing rows are never
// checked. Quotas are per role, so every subtest caps login roles of its
// own. LeasesCapped runs an owner's purge, which deletes every role's free
// rows, so it has a database of its own: the other subtests count on the
// rows they freed surviving until they purge them.
func TestQuotas(t *testing.T) {
	t.Parallel()
	runGroup(t, 4, []subtest{
		{"LeasesCapped", testQuotaLeasesCapped},
	})
	runGroup(t, 8, []subtest{
		{"ScopesSlotsQueue", testQuotaScopesSlotsQueue},
		{"GroupsAndRuns", testQuotaGroupsAndRuns},
		{"ConcurrentNeverOvershoots", testQuotaConcurrentNeverOvershoots},
		{"UsageAndPrivileges", testQuotaUsageAndPrivileges},
		{"BadInput", testQuotaBadInput},
		{"PurgeDueTurnsPerRole", testQuotaPurgeDueTurnsPerRole},
	})
}

// setQuota caps role at max rows of kind as the schema owner (maxRows nil:
// removes the cap) and returns the previous cap (nil: none).
func setQuota(t testing.TB, db *testDB, role, kind string, maxRows any) (previous *int32) {
	t.Helper()
	mustScan(t, db.pool, `SELECT previous_max FROM pglease.quota_set($1, $2, $3)`,
		[]any{role, kind, maxRows}, &previous)
	return previous
}

// requireQuotaExceeded fails unless err is the 53400 of a call of fn
// ("": a claim's building block, no function named) that would take role
// over its cap of maxRows rows of kind.
func requireQuotaExceeded(t testing.TB, err error, fn, role, kind string, maxRows int) {
	t.Helper()
	prefix := "pglease:"
	if fn != "" {
		prefix = "pglease." + fn + ":"
	}
	requirePgError(t, err, "53400", prefix, fmt.Sprintf("role %s has %d %s, its quota", role, maxRows, kind))
}

// countRows returns the result of a count(*) query run as q.
func countRows(t testing.TB, q querier, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	mustScan(t, q, sql, args, &n)
	return n
}

// leaseRows returns how many lease rows exist for name (0 or 1), free ones
// too, as the schema owner sees them.
func leaseRows(t testing.TB, db *testDB, name string) int64 {
	t.Helper()
	return countRows(t, db.pool, `SELECT count(*) FROM pglease.leases WHERE name = $1`, name)
}

// tryClaimWait is claim_slot of one unit with p_wait, returning the error.
func tryClaimWait(t testing.TB, q querier, scope, holder string, capacity int, wait bool) (claimResult, error) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var r claimResult
	err := q.QueryRow(ctx, `SELECT claimed, slot, fence, expires_at, expires_in, in_use, retry_in
		FROM pglease.claim_slot($1, $2, $3, '1 hour', 1, $4)`, scope, holder, capacity, wait).
		Scan(&r.Claimed, &r.Slot, &r.Fence, &r.ExpiresAt, &r.ExpiresIn, &r.InUse, &r.RetryIn)
	return r, err
}

// usageOf returns pglease.quota_usage() as q sees it, for role only, one
// "kind max used" entry per cap.
func usageOf(t testing.TB, q querier, role string) string {
	t.Helper()
	var s string
	mustScan(t, q, `SELECT coalesce(string_agg(format('%s %s %s', u.kind, u.max_rows, u.used), ', '
			ORDER BY u.kind), '')
		FROM pglease.quota_usage() AS u WHERE u.role_name = $1`, []any{role}, &s)
	return s
}

// testQuotaLeasesCapped: a role capped at 2 leases creates 2 names and is
// refused a third (53400, no row); acquires, renewals and releases of its
// existing rows, and of rows another role created, go on; a role without a
// cap is not limited; once an owner's purge deletes the role's free rows,
// it creates names again.
func testQuotaLeasesCapped(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	adminURL := pgtest.AdminURL(t)
	roleA := createLoginRole(t, adminURL, db.url, true)
	roleB := createLoginRole(t, adminURL, db.url, true)
	a, b := connectAs(t, db.url, roleA), connectAs(t, db.url, roleB)
	if prev := setQuota(t, db, roleA.name, "leases", 2); prev != nil {
		t.Fatalf("quota_set of a new cap: got previous_max %d, want NULL", *prev)
	}

	f1 := grant(t, a, n("1"), "a", time.Hour)
	f2 := grant(t, a, n("2"), "a", time.Hour)
	_, err := tryAcquire(ctx, a, n("3"), "a", time.Hour)
	requireQuotaExceeded(t, err, "acquire", roleA.name, "leases", 2)
	if got := leaseRows(t, db, n("3")); got != 0 {
		t.Fatalf("lease rows of the refused name: got %d, want 0", got)
	}

	// Existing rows: re-acquire (same tenure), renew, release, take again.
	if r := acquire(t, a, n("1"), "a", time.Hour); !r.Acquired || r.Fence != f1 {
		t.Fatalf("re-acquire at the cap: got acquired=%v fence=%d, want true, %d", r.Acquired, r.Fence, f1)
	}
	if r := renew(t, a, n("2"), "a", f2, time.Hour); !r.Renewed {
		t.Fatal("renew at the cap: got renewed=false, want true")
	}
	if !release(t, a, n("1"), "a", f1) {
		t.Fatal("release at the cap: got released=false, want true")
	}
	if r := acquire(t, a, n("1"), "a2", time.Hour); !r.Acquired || r.Fence != f1+1 {
		t.Fatalf("acquire of its own free row at the cap: got acquired=%v fence=%d, want true, %d", r.Acquired, r.Fence, f1+1)
	}

	// B has no cap; a row B created is an existing row for A.
	var fencesB []int64
	for _, s := range []string{"b1", "b2", "b3"} {
		fencesB = append(fencesB, grant(t, b, n(s), "b", time.Hour))
	}
	if !release(t, b, n("b1"), "b", fencesB[0]) {
		t.Fatal("release of B's lease: got released=false, want true")
	}
	fb := grant(t, a, n("b1"), "a", time.Hour)
	if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.leases WHERE created_by = $1`, roleA.name); got != 2 {
		t.Fatalf("lease rows A created: got %d, want 2", got)
	}

	// A's rows freed and purged: it creates again.
	for _, l := range []struct {
		name   string
		holder string
		fence  int64
	}{{n("1"), "a2", f1 + 1}, {n("2"), "a", f2}, {n("b1"), "a", fb}} {
		if !release(t, a, l.name, l.holder, l.fence) {
			t.Fatalf("release(%q): got released=false, want true", l.name)
		}
	}
	_, err = tryAcquire(ctx, a, n("3"), "a", time.Hour)
	requireQuotaExceeded(t, err, "acquire", roleA.name, "leases", 2)
	var purged int64
	mustScan(t, db.pool, `SELECT pglease.purge('0')`, nil, &purged)
	if purged < 3 {
		t.Fatalf("owner's purge('0'): got %d rows, want at least A's 2 and B's 1 free leases", purged)
	}
	grant(t, a, n("3"), "a", time.Hour)
	grant(t, a, n("4"), "a", time.Hour)
	_, err = tryAcquire(ctx, a, n("5"), "a", time.Hour)
	requireQuotaExceeded(t, err, "acquire", roleA.name, "leases", 2)
}

// testQuotaScopesSlotsQueue: a cap on scopes refuses a claim in a new
// scope, not one in an existing scope (its own or another role's); a cap
// on slots refuses a claim that would create a new slot number, not one
// that takes a free slot row; a cap on queue entries refuses a p_wait
// claim whose new entry would go over it, not the same entry again.
func testQuotaScopesSlotsQueue(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)

	t.Run("Scopes", func(t *testing.T) {
		role := createLoginRole(t, adminURL, db.url, true)
		c := connectAs(t, db.url, role)
		setQuota(t, db, role.name, "scopes", 1)
		mustClaimSlotAs(t, c, n("s1"), "h1", 3)
		_, err := tryClaimWait(t, c, n("s2"), "h1", 3, false)
		requireQuotaExceeded(t, err, "", role.name, "scopes", 1)
		if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.slot_scopes WHERE scope = $1`, n("s2")); got != 0 {
			t.Fatalf("scope rows of the refused scope: got %d, want 0", got)
		}
		if got := countRows(t, db.pool, `SELECT count(*) FROM pglease.slots WHERE scope = $1`, n("s2")); got != 0 {
			t.Fatalf("slot rows of the refused scope: got %d, want 0", got)
		}
		mustClaimSlotAs(t, c, n("s1"), "h2", 3)
		// A scope the owner created exists for the capped role too.
		mustClaimSlotAs(t, db.pool, n("s3"), "owner", 3)
		mustClaimSlotAs(t, c, n("s3"), "h1", 3)
	})

	t.Run("Slots", func(t *testing.T) {
		role := createLoginRole(t, adminURL, db.url, true)
		c := connectAs(t, db.url, role)
		setQuota(t, db, role.name, "slots", 2)
		scope := n("slots")
		r1 := mustClaimSlotAs(t, c, scope, "h1", 5)
		mustClaimSlotAs(t, c, scope, "h2", 5)
		_, err := tryClaimWait(t, c, scope, "h3", 5, false)
		requireQuotaExceeded(t, err, "", role.name, "slots", 2)
		if _, found := slotStatus(t, db.pool, scope, 3); found {
			t.Fatal("slot 3 of the refused claim: got a row, want none")
		}
		if !releaseSlot(t, c, scope, *r1.Slot, "h1", *r1.Fence) {
			t.Fatal("release of slot 1: got released=false, want true")
		}
		if r := mustClaimSlotAs(t, c, scope, "h3", 5); *r.Slot != *r1.Slot {
			t.Fatalf("claim at the cap with a free slot row: got slot %d, want %d", *r.Slot, *r1.Slot)
		}
	})

	t.Run("Queue", func(t *testing.T) {
		role := createLoginRole(t, adminURL, db.url, true)
		c := connectAs(t, db.url, role)
		setQuota(t, db, role.name, "queue", 1)
		scope := n("queue")
		mustClaimSlotAs(t, db.pool, scope, "owner", 1)
		queued := func(holder string) int64 {
			t.Helper()
			return countRows(t, db.pool, `SELECT count(*) FROM pglease.slot_queue
				WHERE scope = $1 AND holder = $2 AND holder_role = $3`, scope, holder, role.name)
		}
		for range 2 {
			r, err := tryClaimWait(t, c, scope, "w1", 1, true)
			if err != nil || r.Claimed {
				t.Fatalf("p_wait claim in a full scope (queue entry new or kept): got %s, %v; want refused", r, err)
			}
			if got := queued("w1"); got != 1 {
				t.Fatalf("queue entries of w1: got %d, want 1", got)
			}
		}
		_, err := tryClaimWait(t, c, scope, "w2", 1, true)
		requireQuotaExceeded(t, err, "", role.name, "queue", 1)
		if got := queued("w2"); got != 0 {
			t.Fatalf("queue entries of the refused w2: got %d, want 0", got)
		}
		// A claim without p_wait adds no entry, and is not checked.
		if r, err := tryClaimWait(t, c, scope, "w2", 1, false); err != nil || r.Claimed {
			t.Fatalf("claim without p_wait in a full scope: got %s, %v; want refused", r, err)
		}
	})
}

// mustClaimSlotAs claims one unit of scope of capacity for an hour as q,
// and fails unless it was claimed.
func mustClaimSlotAs(t testing.TB, q querier, scope, holder string, capacity int) claimResult {
	t.Helper()
	r, err := tryClaimWait(t, q, scope, holder, capacity, false)
	if err != nil || !r.Claimed {
		t.Fatalf("claim_slot(%q, %q, %d): got %s, %v; want claimed", scope, holder, capacity, r, err)
	}
	return r
}

// testQuotaGroupsAndRuns: a cap on groups refuses a new group, not a retry
// of one the role has; a cap on runs refuses the next tenure's run, not a
// retry under the same tenure, and the refused call marks no older run
// lost.
func testQuotaGroupsAndRuns(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	adminURL := pgtest.AdminURL(t)

	t.Run("Groups", func(t *testing.T) {
		role := createLoginRole(t, adminURL, db.url, true)
		c := connectAs(t, db.url, role)
		setQuota(t, db, role.name, "groups", 1)
		g1, g2 := groupName(t, "g1"), groupName(t, "g2")
		createGroup(t, c, g1, 2)
		_, err := c.Exec(ctx, `SELECT pglease.group_create($1, 2, NULL)`, g2)
		requireQuotaExceeded(t, err, "group_create", role.name, "groups", 1)
		if got := groupRows(t, db.pool, g2); got != "group 0, shards 0, members 0, leases 0" {
			t.Fatalf("rows of the refused group: got %s, want none", got)
		}
		var created bool
		var shards int32
		mustScan(t, c, `SELECT created, shards FROM pglease.group_create($1, 2, NULL)`, []any{g1}, &created, &shards)
		if created || shards != 2 {
			t.Fatalf("group_create of its own group at the cap: got created=%v shards=%d, want false, 2", created, shards)
		}
	})

	t.Run("Runs", func(t *testing.T) {
		role := createLoginRole(t, adminURL, db.url, true)
		c := connectAs(t, db.url, role)
		setQuota(t, db, role.name, "runs", 1)
		job := n("job")
		f1 := grant(t, c, job, "h1", time.Hour)
		var run bool
		for range 2 { // the run, then a retry under the same tenure
			mustScan(t, c, `SELECT run FROM pglease.run_begin($1, 'h1', $2, '1 hour')`, []any{job, f1}, &run)
			if !run {
				t.Fatal("run_begin under the cap: got run=false, want true")
			}
		}
		if !release(t, c, job, "h1", f1) {
			t.Fatal("release of the job's lease: got released=false, want true")
		}
		f2 := grant(t, c, job, "h2", time.Hour)
		_, err := c.Exec(ctx, `SELECT pglease.run_begin($1, 'h2', $2, '1 hour')`, job, f2)
		requireQuotaExceeded(t, err, "run_begin", role.name, "runs", 1)
		var runs string
		mustScan(t, db.pool, `SELECT string_agg(format('%s %s', fence, outcome), ', ' ORDER BY fence)
			FROM pglease.runs WHERE name = $1`, []any{job}, &runs)
		if want := fmt.Sprintf("%d running", f1); runs != want {
			t.Fatalf("runs of the job after the refused run_begin: got %q, want %q", runs, want)
		}
	})
}

// testQuotaConcurrentNeverOvershoots: checks of one role and kind take
// turns under the cap's row lock. One transaction of role A creates a
// lease and holds that lock while 16 connections of A each try to create
// a name of their own; once every one waits for it, the transaction
// commits. Exactly the cap's worth of rows exists afterwards, and every
// refusal is the quota's 53400.
func testQuotaConcurrentNeverOvershoots(t *testing.T, db *testDB) {
	const maxLeases, workers = 5, 16
	n := namer(t)
	ctx := testContext(t)
	role := createLoginRole(t, pgtest.AdminURL(t), db.url, true)
	setQuota(t, db, role.name, "leases", maxLeases)

	first := connectAs(t, db.url, role)
	tx := beginBefore(t, first)
	if r, err := tryAcquire(ctx, tx, n("first"), "h", time.Hour); err != nil || !r.Acquired {
		t.Fatalf("acquire of a new name in a transaction: got acquired=%v, %v; want acquired", r.Acquired, err)
	}
	firstPID := backendPID(t, tx)

	conns := make([]*pgx.Conn, workers)
	for i := range conns {
		conns[i] = connectAs(t, db.url, role)
	}
	errs := make(chan error, workers)
	for i, c := range conns {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			defer cancel()
			r, err := tryAcquire(cctx, c, n(fmt.Sprint(i)), "h", time.Hour)
			if err == nil && !r.Acquired {
				err = fmt.Errorf("acquire of a new name %d: got acquired=false", i)
			}
			errs <- err
		}()
	}
	// Only the first of them waits on firstPID itself; the others queue
	// behind it for the row's lock.
	pids := make([]int64, workers)
	for i, c := range conns {
		pids[i] = int64(c.PgConn().PID())
	}
	waitFor(t, 10*time.Second, fmt.Sprintf("%d acquires to wait on the cap's lock", workers), func() (bool, error) {
		cctx, cancel := callContext(t)
		defer cancel()
		var waiting int
		var onFirst bool
		err := db.pool.QueryRow(cctx, `SELECT count(*),
				coalesce(bool_or($2::integer = ANY (pg_catalog.pg_blocking_pids(a.pid))), false)
			FROM pg_catalog.pg_stat_activity AS a
			WHERE a.pid = ANY ($1::bigint[]) AND a.wait_event_type = 'Lock'
			  AND cardinality(pg_catalog.pg_blocking_pids(a.pid)) > 0`, pids, int64(firstPID)).Scan(&waiting, &onFirst)
		return waiting == workers && onFirst, err
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}

	granted := 1 // the transaction's
	for range workers {
		err := <-errs
		switch {
		case err == nil:
			granted++
		case pgCode(err) == "53400":
			requireQuotaExceeded(t, err, "acquire", role.name, "leases", maxLeases)
		default:
			t.Errorf("concurrent acquire: got %v, want granted or 53400", err)
		}
	}
	rows := countRows(t, db.pool, `SELECT count(*) FROM pglease.leases WHERE created_by = $1`, role.name)
	if granted != maxLeases || rows != maxLeases {
		t.Fatalf("after %d concurrent creations under a cap of %d: got %d granted, %d rows; want %d of each",
			workers+1, maxLeases, granted, rows, maxLeases)
	}
}

// testQuotaUsageAndPrivileges: quota_usage() shows a client each cap with
// its use; quota_set is the owner's only (42501 for a client); a lowered
// cap keeps the rows there are but refuses new ones; a NULL p_max removes
// the cap.
func testQuotaUsageAndPrivileges(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	role := createLoginRole(t, pgtest.AdminURL(t), db.url, true)
	c := connectAs(t, db.url, role)

	setQuota(t, db, role.name, "leases", 3)
	setQuota(t, db, role.name, "runs", 7)
	f1 := grant(t, c, n("1"), "h", time.Hour)
	grant(t, c, n("2"), "h", time.Hour)
	if got, want := usageOf(t, c, role.name), "leases 3 2, runs 7 0"; got != want {
		t.Fatalf("quota_usage as the client: got %q, want %q", got, want)
	}

	_, err := c.Exec(ctx, `SELECT pglease.quota_set($1, 'leases', 100)`, role.name)
	requirePgError(t, err, "42501", "permission denied", "quota_set")
	if got, want := usageOf(t, db.pool, role.name), "leases 3 2, runs 7 0"; got != want {
		t.Fatalf("quota_usage after a client's quota_set: got %q, want %q", got, want)
	}

	// Lowered below its use: rows stay (used is counted up to max + 1),
	// renewals go on, new names are refused.
	if prev := setQuota(t, db, role.name, "leases", 1); prev == nil || *prev != 3 {
		t.Fatalf("quota_set: got previous_max %s, want 3", ptrString(prev))
	}
	if got, want := usageOf(t, c, role.name), "leases 1 2, runs 7 0"; got != want {
		t.Fatalf("quota_usage after lowering the cap: got %q, want %q", got, want)
	}
	if r := renew(t, c, n("1"), "h", f1, time.Hour); !r.Renewed {
		t.Fatal("renew above a lowered cap: got renewed=false, want true")
	}
	_, err = tryAcquire(ctx, c, n("3"), "h", time.Hour)
	requireQuotaExceeded(t, err, "acquire", role.name, "leases", 1)

	if prev := setQuota(t, db, role.name, "leases", nil); prev == nil || *prev != 1 {
		t.Fatalf("quota_set(NULL): got previous_max %s, want 1", ptrString(prev))
	}
	if got, want := usageOf(t, c, role.name), "runs 7 0"; got != want {
		t.Fatalf("quota_usage after removing the cap: got %q, want %q", got, want)
	}
	for _, s := range []string{"3", "4"} {
		grant(t, c, n(s), "h", time.Hour)
	}
	if prev := setQuota(t, db, role.name, "leases", nil); prev != nil {
		t.Fatalf("quota_set(NULL) without a cap: got previous_max %d, want NULL", *prev)
	}
}

// testQuotaBadInput: quota_set refuses NULL role or kind (22004), an
// unknown kind or a negative cap (22023) and an unknown role (42704), and
// changes no cap.
func testQuotaBadInput(t *testing.T, db *testDB) {
	ctx := testContext(t)
	role := createLoginRole(t, pgtest.AdminURL(t), db.url, true)
	nobody := uniqueName("pglease_contract_nobody_")
	setQuota(t, db, role.name, "leases", 2)
	caps := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT coalesce(string_agg(format('%s %s %s', role_name, kind, max_rows), ', '
				ORDER BY role_name, kind), '')
			FROM pglease.quotas WHERE role_name IN ($1, $2)`, []any{role.name, nobody}, &s)
		return s
	}
	before := caps()
	if want := role.name + " leases 2"; before != want {
		t.Fatalf("caps before: got %q, want %q", before, want)
	}
	for _, c := range []struct {
		role, kind any
		maxRows    any
		code       string
		contains   string
	}{
		{nil, "leases", 1, "22004", "p_role"},
		{role.name, nil, 1, "22004", "p_kind"},
		{nil, nil, nil, "22004", "p_role"},
		{role.name, "bogus", 1, "22023", "p_kind"},
		{role.name, "Leases", 1, "22023", "p_kind"},
		{role.name, "leases", -1, "22023", "p_max"},
		{role.name, "bogus", nil, "22023", "p_kind"},
		{nobody, "leases", 1, "42704", nobody},
		{nobody, "leases", nil, "42704", nobody},
	} {
		_, err := db.pool.Exec(ctx, `SELECT pglease.quota_set($1, $2, $3)`, c.role, c.kind, c.maxRows)
		requirePgError(t, err, c.code, "pglease.quota_set", c.contains)
		if got := caps(); got != before {
			t.Fatalf("quota_set(%v, %v, %v): caps got %q, want unchanged %q", c.role, c.kind, c.maxRows, got, before)
		}
	}
	if got, want := usageOf(t, db.pool, role.name), "leases 2 0"; got != want {
		t.Fatalf("quota_usage: got %q, want %q", got, want)
	}
}

// testQuotaPurgeDueTurnsPerRole: purge_due takes turns per role. A's due
// purge deletes A's free rows only; B's purge in the same hour is still
// due and deletes B's; A's second call in the hour returns NULL.
func testQuotaPurgeDueTurnsPerRole(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	roleA := createLoginRole(t, adminURL, db.url, true)
	roleB := createLoginRole(t, adminURL, db.url, true)
	a, b := connectAs(t, db.url, roleA), connectAs(t, db.url, roleB)
	for _, p := range []struct {
		c      *pgx.Conn
		prefix string
	}{{a, "a"}, {b, "b"}} {
		for i := range 2 {
			name := n(fmt.Sprintf("%s%d", p.prefix, i))
			if !release(t, p.c, name, p.prefix, grant(t, p.c, name, p.prefix, time.Hour)) {
				t.Fatalf("release(%q): got released=false, want true", name)
			}
		}
	}
	rowsOf := func(r loginRole) int64 {
		t.Helper()
		return countRows(t, db.pool, `SELECT count(*) FROM pglease.leases WHERE holder_role = $1`, r.name)
	}
	purgeDue := func(c *pgx.Conn) *int64 {
		t.Helper()
		var purged *int64
		mustScan(t, c, `SELECT pglease.purge_due('1 hour', '0')`, nil, &purged)
		return purged
	}

	if got := purgeDue(a); got == nil || *got < 2 {
		t.Fatalf("A's first purge_due: got %s, want at least A's 2 free leases", ptrString(got))
	}
	if ra, rb := rowsOf(roleA), rowsOf(roleB); ra != 0 || rb != 2 {
		t.Fatalf("lease rows after A's purge: got A %d, B %d; want 0, 2", ra, rb)
	}
	if got := purgeDue(b); got == nil || *got < 2 {
		t.Fatalf("B's purge_due in A's hour: got %s, want at least B's 2 free leases", ptrString(got))
	}
	if rb := rowsOf(roleB); rb != 0 {
		t.Fatalf("B's lease rows after B's purge: got %d, want 0", rb)
	}
	if got := purgeDue(a); got != nil {
		t.Fatalf("A's second purge_due in the hour: got %d, want NULL", *got)
	}
	if got := purgeDue(b); got != nil {
		t.Fatalf("B's second purge_due in the hour: got %d, want NULL", *got)
	}
}
