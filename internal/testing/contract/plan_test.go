package contract

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// scanOfTenureTable matches a plan node that reads pglease.leases or
// pglease.slots, with the way it does.
var scanOfTenureTable = regexp.MustCompile(`(?m)^.*Scan.* on (leases|slots)\b.*$`)

// customPlan matches a plan made for a call's values: a scope compared
// with a literal, where a generic plan compares it with a parameter ($n).
var customPlan = regexp.MustCompile(`scope = '`)

// nameKeyed matches a statement that names the lease or slot it is about.
var nameKeyed = regexp.MustCompile(`l\.name = [pv]_name|s\.slot = [pv]_slot`)

// TestNameKeyedCallsUsePrimaryKey checks that every statement of the calls
// that name their tenure (renew, release, renew_slot, release_slot,
// renew_holder's second look, on their fast path and on their path that
// waits for a locked row) finds a lease by its primary key and a slot by
// its scope, even in the worst case for the planner: the
// statistics right after a purge and VACUUM say the tables are empty, and
// the plans are generic (as PL/pgSQL's cached plans become). A plan that
// used the holder index instead would walk one index entry per tenure the
// holder string ever took: a process that takes a lease per entity under
// one holder would pay O(tenures) per call. Each statement's plan is read
// from auto_explain (nested statements, sent to the client as notices).
// Likewise purge, which must delete by primary key, not through a join.
func TestNameKeyedCallsUsePrimaryKey(t *testing.T) {
	url := pgtest.NewMigrated(t)
	ctx := testContext(t)
	admin := connect(t, url)

	// Many tenures of one holder string, all purged; then the statistics
	// VACUUM leaves: pages, but no rows.
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 5000) AS i,
		LATERAL pglease.acquire('gone/' || i, 'h', interval '1 hour') AS a,
		LATERAL pglease.release('gone/' || i, 'h', a.fence) AS r`)
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 2000) AS i,
		LATERAL pglease.claim_slot('gone/' || i, 'h', 4, interval '1 hour') AS c,
		LATERAL pglease.release_slot('gone/' || i, c.slot, 'h', c.fence) AS r`)
	mustExec(t, admin, `SELECT pglease.purge(interval '0')`)
	mustExec(t, admin, `VACUUM pglease.leases, pglease.slots`)
	var tuples float64
	var pages int32
	if err := admin.QueryRow(ctx, `SELECT reltuples, relpages FROM pg_catalog.pg_class
		WHERE oid = 'pglease.leases'::regclass`).Scan(&tuples, &pages); err != nil {
		t.Fatalf("read the statistics: %v", err)
	}
	if tuples != 0 || pages == 0 {
		t.Fatalf("statistics after purge and VACUUM: got reltuples=%v relpages=%d, want 0 rows in pages kept (vacuum_truncate = false)", tuples, pages)
	}
	// Tenures of the same holder string in use, as in the purge benchmark.
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 500) AS i,
		LATERAL pglease.acquire('live/' || i, 'h', interval '1 hour') AS a,
		LATERAL pglease.release('live/' || i, 'h', a.fence) AS r`)

	conn, explained := connectExplained(t, url, `SET plan_cache_mode = force_generic_plan`)

	// Each call runs on its fast path, and again while another transaction
	// holds the row FOR SHARE (as assert_held does), so that it waits on
	// the path that decides after the wait.
	watch := connect(t, url)
	var fence, slotFence int64
	var slot int32
	take := func() {
		t.Helper()
		if err := admin.QueryRow(ctx, `SELECT fence FROM pglease.acquire('x', 'h', interval '1 hour')`).Scan(&fence); err != nil {
			t.Fatalf("acquire: %v", err)
		}
		if err := admin.QueryRow(ctx, `SELECT slot, fence FROM pglease.claim_slot('s', 'h', 4, interval '1 hour')`).Scan(&slot, &slotFence); err != nil {
			t.Fatalf("claim_slot: %v", err)
		}
	}
	const (
		lockLease = `SELECT 1 FROM pglease.leases WHERE name = 'x' FOR SHARE`
		lockSlot  = `SELECT 1 FROM pglease.slots WHERE scope = 's' AND slot = $1 FOR SHARE`
	)
	callerPID, adminPID := backendPID(t, conn), backendPID(t, admin)
	take()
	for _, locked := range []bool{false, true} {
		for _, c := range []struct {
			lock     string
			lockArgs []any
			sql      string
			args     []any
		}{
			{lockLease, nil, `SELECT renewed FROM pglease.renew('x', 'h', $1, interval '1 hour')`, []any{fence}},
			{lockSlot, []any{slot}, `SELECT renewed FROM pglease.renew_slot('s', $1, 'h', $2, interval '1 hour')`, []any{slot, slotFence}},
			{lockLease, nil, `SELECT cardinality(leases) = 1 FROM pglease.renew_holder('h', interval '1 hour')`, nil},
			{lockLease, nil, `SELECT released FROM pglease.release('x', 'h', $1)`, []any{fence}},
			{lockSlot, []any{slot}, `SELECT released FROM pglease.release_slot('s', $1, 'h', $2)`, []any{slot, slotFence}},
		} {
			if !locked {
				mustBeTrue(t, conn, c.sql, c.args...)
				continue
			}
			tx, err := admin.Begin(ctx)
			if err != nil {
				t.Fatalf("begin: %v", err)
			}
			if _, err := tx.Exec(ctx, c.lock, c.lockArgs...); err != nil {
				t.Fatalf("lock %q: %v", c.lock, err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				mustBeTrue(t, conn, c.sql, c.args...)
			}()
			waitBlockedBy(t, watch, callerPID, adminPID)
			if err := tx.Commit(ctx); err != nil {
				t.Fatalf("commit the lock: %v", err)
			}
			<-done
		}
		take()
	}

	var scans int
	plans := explained.take()
	for _, p := range plans {
		if !nameKeyed.MatchString(p) {
			continue // renew_holder's statements by holder: the holder index is theirs
		}
		for _, m := range scanOfTenureTable.FindAllStringSubmatch(p, -1) {
			scans++
			// A lease by its name, a slot by its scope and number: the
			// primary key. Never by the holder, nor by reading the table.
			if !strings.Contains(m[0], "Index Scan using "+m[1]+"_pkey ") {
				t.Errorf("a name-keyed statement does not find its row by name or scope:\n%s\nplan:\n%s", m[0], p)
			}
		}
	}
	if scans < 10 {
		t.Fatalf("auto_explain reported %d scans of leases and slots in %d plans, want at least 10", scans, len(plans))
	}

	// purge deletes by primary key, without a join: planned on these
	// statistics, a join was a nested loop, quadratic in the rows deleted.
	mustExec(t, conn, `SELECT pglease.purge(interval '0')`)
	var deletes int
	plans = explained.take()
	for _, p := range plans {
		if !strings.Contains(p, "DELETE FROM pglease.leases") && !strings.Contains(p, "DELETE FROM pglease.waiters") {
			continue
		}
		deletes++
		if strings.Contains(p, "Nested Loop") || strings.Contains(p, "Join") {
			t.Errorf("purge deletes through a join:\n%s", p)
		}
		if strings.Contains(p, "DELETE FROM pglease.leases") && !strings.Contains(p, "Index Scan using leases_pkey on leases l ") {
			t.Errorf("purge does not delete leases by primary key:\n%s", p)
		}
	}
	if deletes != 2 {
		t.Fatalf("auto_explain reported %d DELETE statements of purge, want 2 (leases, waiters)", deletes)
	}
}

// planLog holds the plans auto_explain sent a connection as notices.
type planLog struct {
	mu    sync.Mutex
	plans []string
}

// take returns the plans sent since the last take, and forgets them.
func (l *planLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	plans := l.plans
	l.plans = nil
	return plans
}

// connectExplained connects to url with auto_explain sending the plan of
// every statement, nested ones included, as a notice to the planLog it
// returns; settings run on the connection after that.
func connectExplained(t *testing.T, url string, settings ...string) (*pgx.Conn, *planLog) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse config: %v", err)
	}
	l := &planLog{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if strings.Contains(n.Message, "plan:") {
			l.mu.Lock()
			l.plans = append(l.plans, n.Message)
			l.mu.Unlock()
		}
	}
	conn, err := pgx.ConnectConfig(testContext(t), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, s := range append([]string{
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET auto_explain.log_level = notice`,
	}, settings...) {
		mustExec(t, conn, s)
	}
	return conn, l
}

// mustBeTrue runs sql, which returns one boolean, and fails unless it is
// true. Safe to call from another goroutine than the test's.
func mustBeTrue(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	ctx, cancel := callContext(t)
	defer cancel()
	var ok bool
	if err := conn.QueryRow(ctx, sql, args...).Scan(&ok); err != nil || !ok {
		t.Errorf("%s: got %v, %v; want true", sql, ok, err)
	}
}

// TestClaimsScanSlotsWithoutBitmaps checks the plans of every statement of
// a claim that reads pglease.slots, on the statistics of a table in use
// (slot rows in many scopes, ANALYZEd), over seven rounds of: the common
// claim, the claim that un-counts ended slots, a refused claim (its
// retry_in walk), claim_slots, and the 0.2.0 form. None is a bitmap scan,
// which never marks an index entry dead: every claim would re-read each
// dead entry of slots_counted_check_idx that the scope's takes and releases
// left since the last VACUUM, and the index would grow as fast as the
// claims ran. And the common claim's read keeps its generic plan once
// PL/pgSQL has compared it with five plans for the call's values, as long
// as the statistics are fresh (a plan made for every call cost a claim 3 to
// 4 times its server time; see docs/scaling.md).
func TestClaimsScanSlotsWithoutBitmaps(t *testing.T) {
	url := pgtest.NewMigrated(t)
	ctx := testContext(t)
	admin := connect(t, url)
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 2000) AS i,
		LATERAL pglease.claim_slot('busy/' || i % 200, 'h' || i, 64, interval '1 hour') AS c`)
	mustExec(t, admin, `ANALYZE pglease.slots, pglease.slot_scopes`)

	conn, explained := connectExplained(t, url)

	claim := `SELECT slot, fence FROM pglease.claim_slot($1, $2, $3, interval '1 hour', 1)`
	cycle := func(sql, scope, holder string, capacity int) (int32, int64) {
		t.Helper()
		var slot int32
		var fence int64
		if err := conn.QueryRow(ctx, sql, scope, holder, capacity).Scan(&slot, &fence); err != nil {
			t.Fatalf("%s in %s: %v", sql, scope, err)
		}
		return slot, fence
	}
	// A release's plans are not a claim's: they are dropped.
	var plans []string
	release := func(scope, holder string, slot int32, fence int64) {
		t.Helper()
		plans = append(plans, explained.take()...)
		mustBeTrue(t, conn, `SELECT released FROM pglease.release_slot($1, $2, $3, $4)`, scope, slot, holder, fence)
		explained.take()
	}
	for i := range 7 {
		n := func(s string) string { return fmt.Sprintf("%s/%d", s, i) }
		// The common claim: the scope's one ended slot, taken in place.
		s, f := cycle(claim, n("c"), "a", 64)
		release(n("c"), "a", s, f)
		cycle(claim, n("c"), "a", 64)
		// Two ended slots: the claim un-counts the one it does not take.
		s1, f1 := cycle(claim, n("u"), "a", 64)
		s2, f2 := cycle(claim, n("u"), "b", 64)
		release(n("u"), "a", s1, f1)
		release(n("u"), "b", s2, f2)
		cycle(claim, n("u"), "c", 64)
		// Refused: the scope is full, and retry_in walks its live slots.
		cycle(claim, n("r"), "a", 1)
		mustExec(t, conn, `SELECT * FROM pglease.claim_slot($1, 'b', 1, interval '1 hour', 1)`, n("r"))
		mustExec(t, conn, `SELECT * FROM pglease.claim_slots('m', ARRAY[$1, $2, $3], ARRAY[64, 4, 1], interval '1 hour', ARRAY[1, 1, 1])`,
			n("c"), n("m"), n("r"))
		cycle(`SELECT slot, fence FROM pglease.claim_slot($1, $2, $3, interval '1 hour')`, n("o"), "a", 64)
	}

	var scans, reads int
	plans = append(plans, explained.take()...)
	for _, p := range plans {
		for _, m := range scanOfTenureTable.FindAllStringSubmatch(p, -1) {
			if m[1] != "slots" {
				continue
			}
			scans++
			if strings.Contains(m[0], "Bitmap") {
				t.Errorf("a claim reads pglease.slots by a bitmap scan:\n%s\nplan:\n%s", m[0], p)
			}
		}
		// The common claim's read, from its sixth run on (it runs in every
		// claim_slot call).
		if strings.Contains(p, "array_agg(t.ctid)") {
			if reads++; reads > 5 && customPlan.MatchString(p) {
				t.Errorf("run %d of the common claim's read was planned for its values, not generic:\n%s", reads, p)
			}
		}
	}
	if scans < 100 || reads < 30 {
		t.Fatalf("auto_explain reported %d scans of slots and %d runs of the common claim's read in %d plans, want at least 100 and 30", scans, reads, len(plans))
	}
}

// TestClaimsKeepGenericPlansOnStaleStatistics: statistics taken when a
// table was small say little about it once tens of thousands of rows went
// through it (autovacuum off); the claims keep their generic plans all
// the same (plan_cache_mode = force_generic_plan), instead of planning
// their reads again at every call: without the setting, all twelve runs
// below were planned for their values, not only the first five.
func TestClaimsKeepGenericPlansOnStaleStatistics(t *testing.T) {
	url := pgtest.NewMigrated(t)
	admin := connect(t, url)
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 200) AS i,
		LATERAL pglease.claim_slot('busy/' || i % 20, 'h' || i, 64, interval '1 hour') AS c`)
	mustExec(t, admin, `ANALYZE pglease.slots, pglease.slot_scopes`)
	// 20,000 claims and releases since that ANALYZE, in scopes of their own:
	// set-up, given the test's whole time (a loaded machine takes minutes).
	if _, err := admin.Exec(t.Context(), `DO $$
		DECLARE c record;
		BEGIN
			FOR i IN 1..20000 LOOP
				SELECT * INTO c FROM pglease.claim_slot('churn/' || i % 50, 'h', 64, interval '1 hour');
				PERFORM pglease.release_slot('churn/' || i % 50, c.slot, 'h', c.fence);
				IF i % 30 = 0 THEN
					COMMIT; -- under 64 subtransactions a transaction (see claim_slot)
				END IF;
			END LOOP;
		END $$`); err != nil {
		t.Fatalf("20,000 claims and releases: %v", err)
	}

	conn, explained := connectExplained(t, url)
	ctx := testContext(t)
	var reads int
	for i := range 12 {
		var slot int32
		var fence int64
		if err := conn.QueryRow(ctx, `SELECT slot, fence FROM pglease.claim_slot('stale', 'a', 64, interval '1 hour', 1)`).Scan(&slot, &fence); err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		for _, p := range explained.take() {
			if strings.Contains(p, "array_agg(t.ctid)") {
				if reads++; customPlan.MatchString(p) {
					t.Errorf("run %d of the common claim's read was planned for its values, not generic:\n%s", reads, p)
				}
			}
		}
		mustBeTrue(t, conn, `SELECT released FROM pglease.release_slot('stale', $1, 'a', $2)`, slot, fence)
		explained.take()
	}
	if reads < 12 {
		t.Fatalf("auto_explain reported %d runs of the common claim's read, want 12", reads)
	}
}

// scanOfHistory matches a plan node that reads pglease.tenures.
var scanOfHistory = regexp.MustCompile(`(?m)^.*Scan.* on tenures\b.*$`)

// TestHistoryChecksUsePrimaryKey checks that the statements a grant and an
// end run for the tenure history (the neighbours' checks, the clamp, the
// end) find a tenure by primary key or as the open one, and never read
// every tenure the name has kept: on a table never analysed, with generic
// plans, equality on name and slot would let the planner read them all
// through the exclusion constraint's index and sort them, three times a
// grant.
func TestHistoryChecksUsePrimaryKey(t *testing.T) {
	url := pgtest.NewMigrated(t)
	admin := connect(t, url)
	mustExec(t, admin, `SELECT pglease.history_enable('kept/', '30 days')`)
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 300) AS i,
		LATERAL pglease.acquire('kept/lease', 'h', interval '1 hour') AS a,
		LATERAL pglease.release('kept/lease', 'h', a.fence) AS r`)
	mustExec(t, admin, `SELECT count(*) FROM generate_series(1, 300) AS i,
		LATERAL pglease.claim_slot('kept/scope', 'h', 1, interval '1 hour') AS c,
		LATERAL pglease.release_slot('kept/scope', c.slot, 'h', c.fence) AS r`)

	conn, explained := connectExplained(t, url, `SET plan_cache_mode = force_generic_plan`)
	for range 2 {
		mustBeTrue(t, conn, `SELECT r FROM pglease.acquire('kept/lease', 'h', interval '1 hour') AS a,
			LATERAL pglease.release('kept/lease', 'h', a.fence) AS r`)
		mustBeTrue(t, conn, `SELECT r FROM pglease.claim_slot('kept/scope', 'h', 1, interval '1 hour') AS c,
			LATERAL pglease.release_slot('kept/scope', c.slot, 'h', c.fence) AS r`)
	}
	var scans int
	for _, p := range explained.take() {
		for _, m := range scanOfHistory.FindAllString(p, -1) {
			scans++
			if !strings.Contains(m, "using tenures_pkey ") && !strings.Contains(m, "using tenures_one_open ") {
				t.Errorf("a history statement reads pglease.tenures other than by its primary key or as the open tenure:\n%s", p)
			}
		}
	}
	if scans == 0 {
		t.Fatal("no plan read pglease.tenures: is auto_explain logging nested statements?")
	}
}
