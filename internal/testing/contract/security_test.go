package contract

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
)

// The threat model of docs/security.md, one test per row: what a role with
// no grant, another service's pglease_client role, the same role, the
// schema owner and a superuser can and cannot do.
func TestThreatModel(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"NoGrantRoleCannotStall", testNoGrantRoleCannotStall},
		{"OtherRoleIsAnotherHolder", testOtherRoleIsAnotherHolder},
		{"OtherRoleCannotHoldUpRenewals", testOtherRoleCannotHoldUpRenewals},
		{"SameRoleIsTrusted", testSameRoleIsTrusted},
		{"OwnerOverrides", testOwnerOverrides},
		{"ForgedNotificationCostsARetry", testForgedNotificationCostsARetry},
		{"MetricsRevealWhatTheViewsDo", testMetricsRevealWhatTheViewsDo},
		{"TableSizesArePublic", testTableSizesArePublic},
	})
}

// testNoGrantRoleCannotStall: a role with LOGIN only takes every advisory
// lock pglease ever used (hashtext('pglease'), hashtext('<kind>/<name>')),
// exclusively, and tries to lock pglease's rows: no pglease call waits.
func testNoGrantRoleCannotStall(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	stranger := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, false))
	client := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	ctx := testContext(t)

	mustAcquire(t, db.pool, n("held"), "owner", time.Hour, 1)
	for _, key := range []string{"lease/" + n("held"), "lease/" + n("free"), "slot/" + n("empty"), "slot/" + n("full")} {
		mustExec(t, stranger, `SELECT pg_advisory_lock(hashtext('pglease'), hashtext($1))`, key)
	}
	mustClaimSlot(t, db.pool, n("full"), "owner", 1, time.Hour, 1, 1)

	// Each call must return well within callTimeout; under the advisory
	// wait lock of 0.1.0 they waited until the stranger let go.
	calls := []struct{ what, sql, name string }{
		{"refused acquire", `SELECT acquired FROM pglease.acquire($1, 'c', '1 min')`, n("held")},
		{"free acquire", `SELECT acquired FROM pglease.acquire($1, 'c', '1 min')`, n("free")},
		{"claim in an empty scope", `SELECT claimed FROM pglease.claim_slot($1, 'c', 1, '1 min')`, n("empty")},
		{"refused claim", `SELECT claimed FROM pglease.claim_slot($1, 'c', 1, '1 min')`, n("full")},
	}
	for _, c := range calls {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var ok bool
		err := client.QueryRow(callCtx, c.sql, c.name).Scan(&ok)
		cancel()
		if err != nil {
			t.Fatalf("%s while a role without grants holds pglease's old advisory keys: %v", c.what, err)
		}
	}

	// Nor can it lock, read or write the rows.
	for _, sql := range []string{
		`SELECT 1 FROM pglease.leases FOR KEY SHARE`,
		`SELECT 1 FROM pglease.slot_scopes FOR UPDATE`,
		`LOCK TABLE pglease.leases IN ACCESS SHARE MODE`,
		`SELECT 1 FROM pglease.lease_status`,
		`SELECT * FROM pglease.acquire('x', 'y', '1 min')`,
	} {
		if _, err := stranger.Exec(ctx, `BEGIN; `+sql+`; COMMIT`); pgCode(err) != "42501" {
			t.Errorf("%s without grants: got %v, want SQLSTATE 42501", sql, err)
		}
		mustExec(t, stranger, `ROLLBACK`)
	}
	// A client can read the views but not lock their rows.
	if _, err := client.Exec(ctx, `BEGIN; SELECT 1 FROM pglease.lease_status FOR SHARE; COMMIT`); err == nil {
		t.Errorf("SELECT ... FOR SHARE on lease_status as a client: got no error, want one")
	}
	mustExec(t, client, `ROLLBACK`)
}

// testOtherRoleIsAnotherHolder: role B reads A's holder and fence from the
// views and calls every function with them: each acts as another holder
// would (refused or false) and changes nothing.
func testOtherRoleIsAnotherHolder(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	a := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	b := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	ctx := testContext(t)

	victim, holder := n("victim"), n("service-a")
	mustAcquire(t, a, victim, holder, time.Hour, 1)
	mustClaimSlot(t, a, n("scope"), holder, 1, time.Hour, 1, 1)
	before := mustLeaseStatus(t, db.pool, victim)
	if *before.Holder != holder {
		t.Fatalf("lease_status shows holder %q, want %q", *before.Holder, holder)
	}

	// The attack of the issue: a re-entrant acquire with a microsecond TTL,
	// then a takeover.
	if r := acquire(t, b, victim, holder, time.Microsecond); r.Acquired {
		t.Fatalf("acquire with A's holder from role B: got acquired (fence %d), want refused", r.Fence)
	}
	if r := acquire(t, b, victim, "attacker", 10*time.Minute); r.Acquired {
		t.Fatalf("takeover from role B: got acquired (fence %d), want refused", r.Fence)
	}
	requireNotRenewed(t, renew(t, b, victim, holder, 1, time.Microsecond))
	if release(t, b, victim, holder, 1) {
		t.Fatalf("release with A's holder from role B: got true, want false")
	}
	if r := renewHolder(t, b, holder, time.Microsecond); len(r.Leases)+len(r.Slots)+len(r.LostLeases)+len(r.LostSlots) != 0 {
		t.Fatalf("renew_holder with A's holder from role B: got %+v, want nothing renewed or lost", r)
	}
	if c := claimSlot(t, b, n("scope"), holder, 1, time.Microsecond); c.Claimed {
		t.Fatalf("claim_slot with A's holder from role B: got %s, want refused", c)
	}
	requireNotRenewed(t, renewSlot(t, b, n("scope"), 1, holder, 1, time.Microsecond))
	if releaseSlot(t, b, n("scope"), 1, holder, 1) {
		t.Fatalf("release_slot with A's holder from role B: got true, want false")
	}
	tx, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	requirePgError(t, assertHeld(ctx, tx, victim, 1), "PGL01", "another role")
	_ = tx.Rollback(ctx)

	after := mustLeaseStatus(t, db.pool, victim)
	if *after.Holder != holder || after.Fence != 1 || !after.ExpiresAt.Equal(*before.ExpiresAt) {
		t.Fatalf("A's lease after role B's calls: got holder %q fence %d expires_at %v, want %q, 1, %v",
			*after.Holder, after.Fence, after.ExpiresAt, holder, before.ExpiresAt)
	}
	if s := mustSlotStatus(t, db.pool, n("scope"), 1); *s.Holder != holder || s.Fence != 1 || s.State != "held" {
		t.Fatalf("A's slot after role B's calls: got %s %s fence %d, want held by %q with fence 1", s.State, ptrString(s.Holder), s.Fence, holder)
	}
	if r := renew(t, a, victim, holder, 1, time.Hour); !r.Renewed {
		t.Fatalf("A's own renewal after role B's calls: got false, want true")
	}
	if r := renewSlot(t, a, n("scope"), 1, holder, 1, time.Hour); !r.Renewed {
		t.Fatalf("A's own slot renewal after role B's calls: got false, want true")
	}
	if !release(t, a, victim, holder, 1) {
		t.Fatalf("A's own release: got false, want true")
	}
	// Once it is free, anyone may take it: a new tenure, bound to B.
	mustAcquire(t, b, victim, holder, time.Hour, 2)
	requireNotRenewed(t, renew(t, a, victim, holder, 2, time.Hour))
}

// testOtherRoleCannotHoldUpRenewals: role B's failed calls on A's tenure,
// left open in a transaction, take no lock that A's renewals wait for.
func testOtherRoleCannotHoldUpRenewals(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	a := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	b := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	ctx := testContext(t)

	name, holder := n("lease"), n("service-a")
	mustAcquire(t, a, name, holder, time.Hour, 1)
	mustClaimSlot(t, a, n("scope"), holder, 2, time.Hour, 1, 1)
	tx, err := b.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, c := range []struct {
		sql  string
		args []any
	}{
		{`SELECT acquired FROM pglease.acquire($1, $2, '1 hour')`, []any{name, holder}},
		{`SELECT renewed FROM pglease.renew($1, $2, 1, '1 hour')`, []any{name, holder}},
		{`SELECT renewed FROM pglease.renew_lease($1, $2, 1, '1 hour')`, []any{name, holder}},
		{`SELECT released FROM pglease.release($1, $2, 1)`, []any{name, holder}},
		{`SELECT renewed FROM pglease.renew_slot($1, 1, $2, 1, '1 hour')`, []any{n("scope"), holder}},
		{`SELECT released FROM pglease.release_slot($1, 1, $2, 1)`, []any{n("scope"), holder}},
		{`SELECT cardinality(leases) + cardinality(slots) > 0 FROM pglease.renew_holder($1, '1 hour')`, []any{holder}},
	} {
		var got bool
		if err := tx.QueryRow(ctx, c.sql, c.args...).Scan(&got); err != nil || got {
			t.Fatalf("%s from role B: got %v, %v; want false", c.sql, got, err)
		}
	}
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var renewed bool
	if err := a.QueryRow(callCtx, `SELECT renewed FROM pglease.renew($1, $2, 1, '1 hour')`, name, holder).Scan(&renewed); err != nil || !renewed {
		t.Fatalf("A's renewal while role B's transaction is open: got %v, %v; want true", renewed, err)
	}
	if err := a.QueryRow(callCtx, `SELECT renewed FROM pglease.renew_slot($1, 1, $2, 1, '1 hour')`, n("scope"), holder).Scan(&renewed); err != nil || !renewed {
		t.Fatalf("A's slot renewal while role B's transaction is open: got %v, %v; want true", renewed, err)
	}
}

// testSameRoleIsTrusted: two processes logging in as the same role (a
// service's replicas, or every client behind one PgBouncer pool) trust
// each other: with the holder string and fence, one acts as the other.
func testSameRoleIsTrusted(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	role := createLoginRole(t, adminURL, db.url, true)
	one, two := connectAs(t, db.url, role), connectAs(t, db.url, role)

	mustAcquire(t, one, n("lease"), n("replica-1"), time.Hour, 1)
	if r := renew(t, two, n("lease"), n("replica-1"), 1, time.Hour); !r.Renewed {
		t.Fatalf("renew of replica-1's tenure from another session of the same role: got false, want true")
	}
	if !release(t, two, n("lease"), n("replica-1"), 1) {
		t.Fatalf("release of replica-1's tenure from another session of the same role: got false, want true")
	}
}

// testOwnerOverrides: the schema owner (here also a superuser) ends any
// role's tenure with force_release, and the fence goes on.
func testOwnerOverrides(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	a := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	ctx := testContext(t)

	mustAcquire(t, a, n("lease"), n("service-a"), time.Hour, 1)
	var released bool
	if err := db.pool.QueryRow(ctx, `SELECT released FROM pglease.force_release($1)`, n("lease")).Scan(&released); err != nil || !released {
		t.Fatalf("force_release by the owner of role A's tenure: got %v, %v; want true", released, err)
	}
	requireNotRenewed(t, renew(t, a, n("lease"), n("service-a"), 1, time.Hour))
	mustAcquire(t, db.pool, n("lease"), "owner", time.Hour, 2)
	// The owner can also write the tables directly: it is inside the trust
	// boundary (docs/security.md).
	mustExec(t, db.pool, `UPDATE pglease.leases SET expires_at = expires_at WHERE name = $1`, n("lease"))
}

// testForgedNotificationCostsARetry: anyone may NOTIFY on channel pglease
// (LISTEN and NOTIFY cannot be restricted). A forged release notification
// wakes a waiter, whose retry is refused: nothing else happens.
func testForgedNotificationCostsARetry(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	stranger := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, false))
	l := listen(t, db.url, n(""))

	mustAcquire(t, db.pool, n("lease"), "owner", time.Hour, 1)
	if r := acquire(t, db.pool, n("lease"), "waiter", time.Minute); r.Acquired {
		t.Fatalf("acquire of a held lease: got acquired, want refused")
	}
	forged := notice{Kind: "lease", Event: "released", Name: n("lease")}
	mustExec(t, stranger, `SELECT pg_notify('pglease', $1)`, forged.String())
	requireNextNotice(t, l, forged)
	if r := acquire(t, db.pool, n("lease"), "waiter", time.Minute); r.Acquired || r.Holder != "owner" || r.Fence != 1 {
		t.Fatalf("retry after a forged notification: got acquired=%v holder %q fence %d, want refused by owner's fence 1",
			r.Acquired, r.Holder, r.Fence)
	}
}

// testMetricsRevealWhatTheViewsDo: another service's pglease_client role
// (an exporter's, say) reads through pglease.metrics the names, fences and
// expiries of every role's leases and scopes: what the views show it
// already, and no holder string. A costly regular expression costs its own
// call only: the holder's renewal does not wait for it.
func testMetricsRevealWhatTheViewsDo(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	a := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	exporter := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	ctx := testContext(t)

	holder := n("secret-holder-of-a")
	mustAcquire(t, a, n("lease"), holder, time.Hour, 1)
	mustClaimSlot(t, a, n("scope"), holder, 3, time.Hour, 1, 1)

	prefix := "^" + regexp.QuoteMeta(n(""))
	m := readMetrics(t, exporter, prefix, 100)
	if !slices.Equal(m.LeaseNames, []string{n("lease")}) || !m.LeaseHeld[0] || m.LeaseFences[0] != 1 ||
		!slices.Equal(m.ScopeNames, []string{n("scope")}) || m.ScopeInUse[0] != 1 || m.ScopeCapacities[0] != 3 {
		t.Fatalf("metrics as another role: got leases %q held %v fences %v, scopes %q in use %v capacities %v; want A's lease and scope",
			m.LeaseNames, m.LeaseHeld, m.LeaseFences, m.ScopeNames, m.ScopeInUse, m.ScopeCapacities)
	}
	var whole string
	if err := exporter.QueryRow(ctx, `SELECT m::text FROM pglease.metrics($1, 100) AS m`, prefix).Scan(&whole); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(whole, holder) {
		t.Fatalf("metrics as another role shows the holder string %q: %s", holder, whole)
	}
	// The same names and fences are in the views it may read.
	var viewFence int64
	if err := exporter.QueryRow(ctx, `SELECT fence FROM pglease.lease_status WHERE name = $1`, n("lease")).Scan(&viewFence); err != nil || viewFence != 1 {
		t.Fatalf("lease_status as another role: fence %d (%v), want 1", viewFence, err)
	}

	// A backtracking-heavy expression over every name, in an open
	// transaction: A's renewal does not wait for it.
	tx, err := exporter.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT * FROM pglease.metrics('^(a|aa)*(b|bb)*(.*)*$', 1000000)`); err != nil {
		t.Fatalf("metrics with a costly expression: %v", err)
	}
	if r := renew(t, a, n("lease"), holder, 1, time.Hour); !r.Renewed {
		t.Fatal("renewal by A while another role's metrics transaction is open: got false, want true")
	}
}

// testTableSizesArePublic: a role with no grant cannot call
// pglease.metrics, but the sizes and row estimates of pglease's tables are
// no secret from it: pg_class and pg_total_relation_size (by OID) need no
// privilege on the table, for any table of the database.
func testTableSizesArePublic(t *testing.T, db *testDB) {
	stranger := connectAs(t, db.url, createLoginRole(t, pgtest.AdminURL(t), db.url, false))
	ctx := testContext(t)
	if _, err := stranger.Exec(ctx, `SELECT * FROM pglease.metrics('', 10)`); pgCode(err) != "42501" {
		t.Fatalf("metrics without pglease_client: got %v, want SQLSTATE 42501", err)
	}
	var bytes int64
	var estimate float32
	err := stranger.QueryRow(ctx, `SELECT pg_catalog.pg_total_relation_size(c.oid), c.reltuples
		FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS s ON s.oid = c.relnamespace
		WHERE s.nspname = 'pglease' AND c.relname = 'leases'`).Scan(&bytes, &estimate)
	if err != nil || bytes <= 0 {
		t.Fatalf("size of pglease.leases read by a role with no grant: %d bytes (%v), want the size", bytes, err)
	}
}

// TestExactACL installs pglease where other roles would get privileges on
// its objects, and checks that every pglease object then carries exactly
// the documented ACL (docs/security.md) and that those roles can write
// nothing:
//   - default privileges: ALTER DEFAULT PRIVILEGES grants everything to
//     another role (and tables to PUBLIC) before pglease is installed;
//   - earlier grants: on the released schema (migration 1, or extension
//     0.1.0), table, column and function grants to another role and extra
//     grants to pglease_client, then the upgrade to head.
func TestExactACL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		install func(t *testing.T, ctx context.Context, owner *pgx.Conn, url, rw string)
	}{{
		name: "DefaultPrivileges",
		install: func(t *testing.T, ctx context.Context, owner *pgx.Conn, url, rw string) {
			mustExec(t, owner, `ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO `+rw)
			mustExec(t, owner, `ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO `+rw)
			mustExec(t, owner, `ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO `+rw)
			mustExec(t, owner, `ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO PUBLIC`)
			if pgtest.UsesExtension(t) {
				pgtest.CreateExtension(t, url)
			} else if err := schema.Up(ctx, url); err != nil {
				t.Fatal(err)
			}
		},
	}, {
		name: "EarlierGrants",
		install: func(t *testing.T, ctx context.Context, owner *pgx.Conn, url, rw string) {
			if pgtest.UsesExtension(t) {
				mustExec(t, owner, `CREATE EXTENSION pglease VERSION '0.1.0'`)
			} else if err := schema.Goto(ctx, url, 1); err != nil {
				t.Fatal(err)
			}
			for _, sql := range []string{
				`GRANT ALL ON SCHEMA pglease TO ` + rw,
				`GRANT ALL ON ALL TABLES IN SCHEMA pglease TO ` + rw,
				`GRANT UPDATE (fence) ON pglease.leases TO ` + rw,
				`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pglease TO ` + rw + ` WITH GRANT OPTION`,
				`GRANT ALL ON pglease.leases, pglease.slots TO pglease_client`,
				`GRANT EXECUTE ON FUNCTION pglease.force_release(text) TO pglease_client, PUBLIC`,
			} {
				mustExec(t, owner, sql)
			}
			if pgtest.UsesExtension(t) {
				mustExec(t, owner, `ALTER EXTENSION pglease UPDATE`)
			} else if err := schema.Up(ctx, url); err != nil {
				t.Fatal(err)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t)
			appRW := createLoginRole(t, pgtest.AdminURL(t), url, false)
			ctx := testContext(t)
			owner := connect(t, url)
			tc.install(t, ctx, owner, url, pgx.Identifier{appRW.name}.Sanitize())
			requireDocumentedACL(t, ctx, owner)

			// The role the grants favoured can neither write nor reset a
			// fence.
			mustAcquire(t, owner, "acl", "owner", time.Hour, 1)
			conn := connectAs(t, url, appRW)
			for _, sql := range []string{
				`UPDATE pglease.leases SET fence = 1`,
				`DELETE FROM pglease.leases`,
				`SELECT * FROM pglease.force_release('acl')`,
				`CREATE TABLE pglease.mine (id int)`,
			} {
				if _, err := conn.Exec(ctx, sql); pgCode(err) != "42501" {
					t.Errorf("%s as a role that had privileges: got %v, want SQLSTATE 42501", sql, err)
				}
			}
		})
	}
}

// requireDocumentedACL fails unless the grants on pglease's objects to
// roles other than their owner are exactly those docs/security.md lists.
func requireDocumentedACL(t *testing.T, ctx context.Context, owner *pgx.Conn) {
	t.Helper()
	rows, err := owner.Query(ctx, `
		SELECT g.object || ' ' || coalesce(r.rolname, 'PUBLIC') || ' ' || g.privilege
		FROM (
			SELECT 'schema pglease' AS object, a.grantee, a.privilege_type AS privilege
			FROM pg_catalog.pg_namespace AS n,
			     pg_catalog.aclexplode(coalesce(n.nspacl, pg_catalog.acldefault('n', n.nspowner))) AS a
			WHERE n.nspname = 'pglease' AND a.grantee <> n.nspowner
			UNION ALL
			SELECT 'relation ' || c.relname, a.grantee, a.privilege_type
			FROM pg_catalog.pg_class AS c,
			     pg_catalog.aclexplode(coalesce(c.relacl, pg_catalog.acldefault('r', c.relowner))) AS a
			WHERE c.relnamespace = 'pglease'::regnamespace AND c.relkind IN ('r', 'v', 'S') AND a.grantee <> c.relowner
			UNION ALL
			SELECT 'column ' || c.relname || '.' || att.attname, a.grantee, a.privilege_type
			FROM pg_catalog.pg_class AS c
			JOIN pg_catalog.pg_attribute AS att ON att.attrelid = c.oid AND att.attacl IS NOT NULL,
			     pg_catalog.aclexplode(att.attacl) AS a
			WHERE c.relnamespace = 'pglease'::regnamespace AND a.grantee <> c.relowner
			UNION ALL
			SELECT 'function ' || p.oid::regprocedure::text, a.grantee, a.privilege_type
			FROM pg_catalog.pg_proc AS p,
			     pg_catalog.aclexplode(coalesce(p.proacl, pg_catalog.acldefault('f', p.proowner))) AS a
			WHERE p.pronamespace = 'pglease'::regnamespace AND a.grantee <> p.proowner
		) AS g
		LEFT JOIN pg_catalog.pg_roles AS r ON r.oid = g.grantee
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"schema pglease pglease_client USAGE"}
	for _, v := range []string{"lease_status", "slot_scope_status", "slot_status"} {
		want = append(want, "relation "+v+" pglease_client SELECT")
	}
	for _, f := range []string{
		"acquire(text,text,interval)", "assert_held(text,bigint)",
		"claim_slot(text,text,integer,interval)", "claim_slots(text,text[],integer[],interval)",
		"metrics(text,integer)", "purge(interval)", "purge_due(interval,interval)",
		"release(text,text,bigint)", "release_slot(text,integer,text,bigint)",
		"renew(text,text,bigint,interval)", "renew_holder(text,interval)",
		"renew_slot(text,integer,text,bigint,interval)", "version()",
		// The cron functions (0.3.0).
		"release_after(text,text,bigint,interval)", "run_begin(text,text,bigint,interval)",
		"run_end(text,text,bigint,integer)", "run_history(text,integer)", "run_summary(text,integer)",
		// Weighted slot claims (0.3.0).
		"claim_slot(text,text,integer,interval,integer,boolean)", "claim_slots(text,text[],integer[],interval,integer[],boolean)",
	} {
		want = append(want, "function pglease."+f+" pglease_client EXECUTE")
	}
	// Leadership (0.3.0): the client's functions, and the operator's role.
	for _, f := range []string{
		"acquire(text,text,interval,text)", "observe(text,interval)",
		"renew_lease(text,text,bigint,interval)", "set_value(text,text,bigint,text)",
		// The batched calls (0.3.0).
		"acquire_batch(text[],text,interval[],text[])", "release_batch(text[],text,bigint[])",
	} {
		want = append(want, "function pglease."+f+" pglease_client EXECUTE")
	}
	// Shard groups (0.3.0, docs/groups.md).
	for _, f := range []string{
		"group_create(text,integer,text[])", "group_sync(text,text,interval,integer)",
		"group_release(text,text,text,bigint)", "group_leave(text,text)",
		"group_status(text)", "group_list()", "group_delete(text)",
		// Who owns a name, and the quotas' use (0.3.0).
		"owner_of(text)", "quota_usage()",
	} {
		want = append(want, "function pglease."+f+" pglease_client EXECUTE")
	}
	// Rate limits (0.4.0, #51).
	for _, f := range []string{
		"take(text,integer)", "peek(text)", "take_wait(text,integer,interval)",
		"limit_set(text,integer,interval,integer,boolean)", "limit_unset(text)", "limit_reset(text)",
		"claim_and_take(text,text,integer,interval,integer,text[],integer[])",
		"reserve(text,integer,interval)", "reserve_all(text[],integer,interval)", "settle(text,bigint,integer)",
	} {
		want = append(want, "function pglease."+f+" pglease_client EXECUTE")
	}
	// Tenure history (0.4.0, #52): read and turned on or off (refused
	// inside but for the prefix's role) by clients and operators.
	for _, f := range []string{
		"tenures(text,timestamp with time zone)", "tenure_ends()",
		"history_enable(text,interval)", "history_disable(text)",
	} {
		want = append(want, "function pglease."+f+" pglease_client EXECUTE", "function pglease."+f+" pglease_operator EXECUTE")
	}
	want = append(want, "schema pglease pglease_operator USAGE", "relation lease_status pglease_operator SELECT",
		"function pglease.request_release(text,text,interval) pglease_operator EXECUTE",
		"function pglease.owner_of(text) pglease_operator EXECUTE",
		// The limits' levels (0.4.0, #51).
		"function pglease.limit_status(integer) pglease_client EXECUTE",
		"function pglease.limit_status(integer) pglease_operator EXECUTE")
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ACL of schema pglease (grants to roles other than the owner):\n got: %s\nwant: %s",
			strings.Join(got, "\n      "), strings.Join(want, "\n      "))
	}
}

// TestFencedTransactionBound: a fenced transaction that stalls after
// assert_held (idle, or in one long statement), also with the timeouts
// assert_held set turned off again, keeps a takeover out at most 100 ms
// past the tenure's end, plus the server's timer latency (with the
// timeouts off, 200 ms: the takeover ends its backend); the test allows a
// generous second on top for a loaded machine and logs the delay measured
// on the
// server's clock.
func TestFencedTransactionBound(t *testing.T) {
	t.Parallel()
	runGroup(t, 4, []subtest{
		{"Idle", func(t *testing.T, db *testDB) { testFencedStall(t, db, "", false) }},
		{"Sleeping", func(t *testing.T, db *testDB) { testFencedStall(t, db, "SELECT pg_sleep(60)", false) }},
		{"IdleTimeoutsOff", func(t *testing.T, db *testDB) { testFencedStall(t, db, "", true) }},
		{"SleepingTimeoutsOff", func(t *testing.T, db *testDB) { testFencedStall(t, db, "SELECT pg_sleep(60)", true) }},
		{"ForceReleaseEndsIt", testForceReleaseEndsFencedTransaction},
	})
}

// offTimeouts turns off, for the rest of the transaction, every timeout
// assert_held lowers (transaction_timeout exists from PostgreSQL 17 on).
const offTimeouts = `SELECT set_config('statement_timeout', '0', true),
	set_config('idle_in_transaction_session_timeout', '0', true),
	CASE WHEN current_setting('transaction_timeout', true) IS NOT NULL
	     THEN set_config('transaction_timeout', '0', true) END`

func testFencedStall(t *testing.T, db *testDB, stall string, timeoutsOff bool) {
	n := namer(t)
	ctx := testContext(t)
	holder := connect(t, db.url)
	taker := connect(t, db.url)

	r := mustAcquire(t, holder, n("lease"), "holder", time.Second, 1)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := assertHeld(ctx, tx, n("lease"), 1); err != nil {
		t.Fatalf("assert_held: %v", err)
	}
	if timeoutsOff {
		mustExec(t, tx, offTimeouts)
	}
	stalled := make(chan error, 1)
	if stall != "" {
		go func() {
			_, err := tx.Exec(ctx, stall)
			stalled <- err
		}()
	}
	waitLeaseState(t, db.pool, n("lease"), "expired")
	takeover := acquire(t, taker, n("lease"), "taker", time.Minute)
	if !takeover.Acquired || takeover.Fence != 2 {
		t.Fatalf("takeover after the stalled tenure: got acquired=%v fence %d, want fence 2", takeover.Acquired, takeover.Fence)
	}
	var delay time.Duration
	if err := db.pool.QueryRow(ctx, `SELECT acquired_at - $2 FROM pglease.leases WHERE name = $1`,
		n("lease"), r.ExpiresAt).Scan(&delay); err != nil {
		t.Fatal(err)
	}
	t.Logf("takeover %v after the stalled tenure's end (bound 100 ms + timer latency)", delay)
	if delay < 0 || delay > 1100*time.Millisecond {
		t.Fatalf("takeover delay past the tenure's end: got %v, want 0 to 100 ms (allowing 1.1 s)", delay)
	}
	if stall != "" {
		// statement_timeout, or on PostgreSQL 17+ transaction_timeout set to
		// the same bound, whichever timer fires first.
		// With the timeouts off, the takeover ended the backend: the
		// connection is gone.
		if err := <-stalled; timeoutsOff && err == nil || !timeoutsOff && pgCode(err) != "57014" && pgCode(err) != "25P04" {
			t.Fatalf("the stalled statement: got %v, want SQLSTATE 57014 (statement_timeout) or 25P04 (transaction_timeout, PostgreSQL 17+), or a terminated connection with the timeouts off", err)
		}
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatalf("commit of the stalled fenced transaction: got success, want an error")
	}
}

// testForceReleaseEndsFencedTransaction: the owner's force_release of a
// live tenure whose fenced transaction turned its timeouts off and sits
// idle returns within a second (the fenced transaction's backend is ended
// 200 ms after the call), and the next holder gets the next fence.
func testForceReleaseEndsFencedTransaction(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	holder := connect(t, db.url)
	mustAcquire(t, holder, n("lease"), "holder", time.Hour, 1)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := assertHeld(ctx, tx, n("lease"), 1); err != nil {
		t.Fatalf("assert_held: %v", err)
	}
	mustExec(t, tx, offTimeouts)
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var released bool
	if err := db.pool.QueryRow(callCtx, `SELECT released FROM pglease.force_release($1)`, n("lease")).Scan(&released); err != nil || !released {
		t.Fatalf("force_release while the holder's fenced transaction is idle with its timeouts off: got released=%v, %v; want released", released, err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit of the fenced transaction after force_release: got success, want an error")
	}
	mustAcquire(t, db.pool, n("lease"), "next", time.Minute, 2)
}

// TestServerClockAfterWaits: a takeover that waited for a release in flight
// starts at or after the release on the server's clock, and its expires_in
// is true when it returns.
func TestServerClockAfterWaits(t *testing.T) {
	t.Parallel()
	runGroup(t, 6, []subtest{
		{"Lease", testLeaseClockAfterWait},
		{"Slot", testSlotClockAfterWait},
		{"RenewalsWaitingPastTheEnd", testRenewalsWaitingPastTheEnd},
	})
}

// testRenewalsWaitingPastTheEnd: renew and renew_holder, called while the
// tenure is live but waiting for the holder's own fenced transaction until
// after the tenure ended, are refused (decided on the clock after the
// wait), and a takeover then gets the lease.
func testRenewalsWaitingPastTheEnd(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	for _, call := range []string{
		`SELECT renewed FROM pglease.renew($1, $2, 1, '1 min')`,
		`SELECT $1 = ANY (leases) FROM pglease.renew_holder($2, '1 min')`,
	} {
		name, holder := n(fmt.Sprint(len(call))), n("holder-"+fmt.Sprint(len(call)))
		fenced, renewer, taker := connect(t, db.url), connect(t, db.url), connect(t, db.url)
		mustAcquire(t, fenced, name, holder, time.Second, 1)
		tx, err := fenced.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := assertHeld(ctx, tx, name, 1); err != nil {
			t.Fatal(err)
		}
		// Hold the lock past the end (lift assert_held's bound).
		mustExec(t, tx, `SET LOCAL idle_in_transaction_session_timeout = 0`)
		pidF, pidR := backendPID(t, tx), backendPID(t, renewer)
		got := make(chan bool, 1)
		go func() {
			var renewed bool
			if err := renewer.QueryRow(ctx, call, name, holder).Scan(&renewed); err != nil {
				t.Errorf("%s: %v", call, err)
			}
			got <- renewed
		}()
		waitBlockedBy(t, db.pool, pidR, pidF)
		waitLeaseState(t, db.pool, name, "expired")
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if <-got {
			t.Fatalf("%s waited past the tenure's end: got renewed, want refused", call)
		}
		mustAcquire(t, taker, name, "taker", time.Minute, 2)
	}
}

func testLeaseClockAfterWait(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b := connect(t, db.url), connect(t, db.url)
	mustAcquire(t, a, n("lease"), "a", time.Hour, 1)
	if !release(t, a, n("lease"), "a", 1) {
		t.Fatal("release: got false")
	}

	tx, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	mustAcquireTx := acquire(t, tx, n("lease"), "a", time.Hour)
	if !mustAcquireTx.Acquired || mustAcquireTx.Fence != 2 {
		t.Fatalf("acquire in a's transaction: got %+v, want fence 2", mustAcquireTx)
	}
	pidA, pidB := backendPID(t, tx), backendPID(t, b)
	got := make(chan acquireResult, 1)
	go func() {
		r, err := tryAcquire(ctx, b, n("lease"), "b", 10*time.Second)
		if err != nil {
			t.Errorf("b's acquire: %v", err)
		}
		got <- r
	}()
	waitBlockedBy(t, db.pool, pidB, pidA)
	// Time passes on the server while b waits, then a's tenure ends.
	mustExec(t, tx, `SELECT pg_sleep(0.3)`)
	if !release(t, tx, n("lease"), "a", 2) {
		t.Fatal("release in a's transaction: got false")
	}
	var released time.Time
	if err := tx.QueryRow(ctx, `SELECT expires_at FROM pglease.leases WHERE name = $1`, n("lease")).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	var now time.Time
	var acquiredAt time.Time
	if err := db.pool.QueryRow(ctx, `SELECT clock_timestamp(), acquired_at FROM pglease.leases WHERE name = $1`, n("lease")).Scan(&now, &acquiredAt); err != nil {
		t.Fatal(err)
	}
	if !r.Acquired || r.Fence != 3 {
		t.Fatalf("b's acquire after a's release: got %+v, want fence 3", r)
	}
	if acquiredAt.Before(released) {
		t.Fatalf("b's tenure starts at %v, before a's ended at %v on the server's clock", acquiredAt, released)
	}
	// expires_in is taken on the clock that decided, after the wait: the
	// grant's start. (A bound on the time since the call returned failed
	// under load: the test's own read came 300 ms later.)
	if left := r.ExpiresAt.Sub(now); r.ExpiresIn < left || r.ExpiresIn != r.ExpiresAt.Sub(acquiredAt) {
		t.Fatalf("b's expires_in: got %v, want expires_at - acquired_at (%v), at least what is left now (%v)",
			r.ExpiresIn, r.ExpiresAt.Sub(acquiredAt), left)
	}
}

func testSlotClockAfterWait(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	x, a := connect(t, db.url), connect(t, db.url)
	mustClaimSlot(t, x, n("scope"), "x", 1, time.Hour, 1, 1)

	tx, err := x.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if !releaseSlot(t, tx, n("scope"), 1, "x", 1) {
		t.Fatal("release_slot in x's transaction: got false")
	}
	pidX, pidA := backendPID(t, tx), backendPID(t, a)
	got := make(chan claimResult, 1)
	go func() {
		r, err := tryClaimSlot(ctx, a, n("scope"), "a", 1, 10*time.Second)
		if err != nil {
			t.Errorf("a's claim: %v", err)
		}
		got <- r
	}()
	waitBlockedBy(t, db.pool, pidA, pidX)
	mustExec(t, tx, `SELECT pg_sleep(0.3)`)
	var released time.Time
	if err := tx.QueryRow(ctx, `SELECT expires_at FROM pglease.slots WHERE scope = $1`, n("scope")).Scan(&released); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	var now, acquiredAt time.Time
	if err := db.pool.QueryRow(ctx, `SELECT clock_timestamp(), acquired_at FROM pglease.slots WHERE scope = $1`, n("scope")).Scan(&now, &acquiredAt); err != nil {
		t.Fatal(err)
	}
	if !r.Claimed || *r.Fence != 2 {
		t.Fatalf("a's claim after x's release: got %s, want slot 1 fence 2", r)
	}
	if acquiredAt.Before(released) {
		t.Fatalf("a's tenure starts at %v, before x's ended at %v on the server's clock", acquiredAt, released)
	}
	// expires_in is taken on the clock that decided, after the wait.
	if left := r.ExpiresAt.Sub(now); *r.ExpiresIn < left || *r.ExpiresIn != r.ExpiresAt.Sub(acquiredAt) {
		t.Fatalf("a's expires_in: got %v, want expires_at - acquired_at (%v), at least what is left now (%v)",
			*r.ExpiresIn, r.ExpiresAt.Sub(acquiredAt), left)
	}
}

// TestScopeCapacity: a scope has one capacity at a time, the smallest of
// the capacities its live holders claimed with (docs/security.md and the
// claim_slot contract).
func TestScopeCapacity(t *testing.T) {
	t.Parallel()
	runGroup(t, 24, []subtest{
		{"LargerClaimRefused", testLargerClaimRefused},
		{"RacingCapacities", testRacingCapacities},
		{"Rollout", testCapacityRollout},
	})
}

func testLargerClaimRefused(t *testing.T, db *testDB) {
	n := namer(t)
	mustClaimSlot(t, db.pool, n("cap"), "a1", 1, time.Hour, 1, 1)
	for _, h := range []string{"b1", "b2"} {
		if c := claimSlot(t, db.pool, n("cap"), h, 3, time.Hour); c.Claimed {
			t.Fatalf("claim with capacity 3 while a holder that claimed with 1 is live: got %s, want refused", c)
		}
	}
	if in, _ := scopeStatus(t, db.pool, n("cap")); in != 1 {
		t.Fatalf("live holders: got %d, want 1", in)
	}
}

// testRacingCapacities: twenty claims alternating capacity 1 and 10 race;
// the live holders never outnumber the capacity any of them claimed with.
func testRacingCapacities(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	for round := range 5 {
		scope := n(fmt.Sprintf("race-%d", round))
		type claim struct {
			capacity int32
			claimed  bool
		}
		results := make(chan claim, 20)
		start := make(chan struct{})
		for i := range 20 {
			capacity := int32(1)
			if (i+round)%2 == 1 {
				capacity = 10
			}
			go func() {
				<-start
				r, err := tryClaimSlot(ctx, db.pool, scope, fmt.Sprintf("h%d", i), capacity, time.Hour)
				if err != nil {
					t.Errorf("claim: %v", err)
				}
				results <- claim{capacity, r.Claimed}
			}()
		}
		close(start)
		held, smallest := 0, int32(1<<30)
		for range 20 {
			c := <-results
			if c.claimed {
				held++
				smallest = min(smallest, c.capacity)
			}
		}
		if held == 0 || int32(held) > smallest {
			t.Fatalf("round %d: %d claims granted, the smallest capacity among them %d: want 1 to that many", round, held, smallest)
		}
		if in, _ := scopeStatus(t, db.pool, scope); int(in) != held {
			t.Fatalf("round %d: live holders %d, claims granted %d", round, in, held)
		}
	}
}

// testCapacityRollout: the documented rollout behaviour. Lowering (3 to 1)
// takes effect at once for new claims, evicting no one; raising (1 to 3)
// waits until no live holder claimed with the smaller capacity.
func testCapacityRollout(t *testing.T, db *testDB) {
	n := namer(t)
	scope := n("rollout")
	for i, h := range []string{"old-1", "old-2"} {
		mustClaimSlot(t, db.pool, scope, h, 3, time.Hour, int32(i+1), 1)
	}
	// New version, capacity 1: refused while two old holders are live.
	if c := claimSlot(t, db.pool, scope, "new-1", 1, time.Hour); c.Claimed {
		t.Fatalf("claim with capacity 1 beside 2 live holders: got %s, want refused", c)
	}
	// An old instance still claims with 3: granted (3 live, all claimed with 3).
	mustClaimSlot(t, db.pool, scope, "old-3", 3, time.Hour, 3, 1)
	for i, h := range []string{"old-1", "old-2", "old-3"} {
		if !releaseSlot(t, db.pool, scope, int32(i+1), h, 1) {
			t.Fatalf("release of %s: got false", h)
		}
	}
	// All old holders gone: the new capacity applies.
	got := mustClaimSlot(t, db.pool, scope, "new-1", 1, time.Hour, 1, 2)
	if c := claimSlot(t, db.pool, scope, "old-4", 3, time.Hour); c.Claimed {
		t.Fatalf("claim with capacity 3 while a holder that claimed with 1 is live: got %s, want refused", c)
	}
	if !releaseSlot(t, db.pool, scope, *got.Slot, "new-1", *got.Fence) {
		t.Fatal("release of new-1: got false")
	}
	// Raised again once no holder of capacity 1 is live.
	for _, h := range []string{"old-4", "old-5", "old-6"} {
		if c := claimSlot(t, db.pool, scope, h, 3, time.Hour); !c.Claimed {
			t.Fatalf("claim of %s with capacity 3, no smaller holder live: got %s, want claimed", h, c)
		}
	}
}
