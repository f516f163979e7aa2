package contract

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// loginRole is a LOGIN role made for one test.
type loginRole struct {
	name     string
	password string
}

// createLoginRole creates a uniquely named LOGIN role, a member of
// pglease_client when client is true. It is dropped when the test ends,
// together with everything it owns or was granted in the database at
// dbURL; register it after the database so that it goes first.
func createLoginRole(t testing.TB, adminURL, dbURL string, client bool) loginRole {
	t.Helper()
	r := loginRole{name: uniqueName("pglease_contract_"), password: uniqueName("pw")}
	ident := pgx.Identifier{r.name}.Sanitize()
	sql := fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD '%s'`, ident, r.password)
	if client {
		sql += ` IN ROLE pglease_client`
	}
	admin := connect(t, adminURL)
	mustExec(t, admin, sql)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if conn, err := pgx.Connect(ctx, dbURL); err != nil {
			t.Errorf("cleanup: connect to drop what %s owns: %v", r.name, err)
		} else {
			if _, err := conn.Exec(ctx, `DROP OWNED BY `+ident); err != nil {
				t.Errorf("cleanup: drop owned by %s: %v", r.name, err)
			}
			_ = conn.Close(ctx)
		}
		if conn, err := pgx.Connect(ctx, adminURL); err != nil {
			t.Errorf("cleanup: connect to drop role %s: %v", r.name, err)
		} else {
			if _, err := conn.Exec(ctx, `DROP ROLE `+ident); err != nil {
				t.Errorf("cleanup: drop role %s: %v", r.name, err)
			}
			_ = conn.Close(ctx)
		}
	})
	return r
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// connectAs connects to the database at url as role r, closed when the test
// ends (before the role is dropped).
func connectAs(t testing.TB, url string, r loginRole) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	cfg.User = r.name
	cfg.Password = r.password
	ctx, cancel := callContext(t)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect as %s: %v", r.name, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var user string
	if err := conn.QueryRow(ctx, `SELECT current_user`).Scan(&user); err != nil || user != r.name {
		t.Fatalf("current_user: got %q (%v), want %q", user, err, r.name)
	}
	return conn
}

// TestPrivileges checks what pglease_client may and may not do, and that a
// client cannot hijack the SECURITY DEFINER functions.
func TestPrivileges(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"LeastPrivilege", testLeastPrivilege},
		{"SearchPathHijack", testSearchPathHijack},
		{"DefinersPinned", testDefinersPinned},
	})
}

// testDefinersPinned checks the catalog rule the hijack test relies on:
// every SECURITY DEFINER function pins search_path to pg_catalog, pg_temp,
// and a function that does not pin it is neither SECURITY DEFINER nor
// executable by any role but the owner (the internal helpers, which run
// with the search_path of the entry point that calls them).
func testDefinersPinned(t *testing.T, db *testDB) {
	rows, err := db.pool.Query(testContext(t), `
		SELECT p.oid::regprocedure::text, p.prosecdef,
		       coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false),
		       EXISTS (SELECT 1 FROM pg_catalog.aclexplode(p.proacl) AS a WHERE a.grantee <> p.proowner)
		FROM pg_catalog.pg_proc AS p
		WHERE p.pronamespace = 'pglease'::regnamespace
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var definers, helpers int
	for rows.Next() {
		var fn string
		var definer, pinned, granted bool
		if err := rows.Scan(&fn, &definer, &pinned, &granted); err != nil {
			t.Fatal(err)
		}
		switch {
		case definer && !pinned:
			t.Errorf("%s is SECURITY DEFINER without SET search_path = pg_catalog, pg_temp", fn)
		case !pinned && granted:
			t.Errorf("%s does not pin search_path and is granted to a role other than its owner", fn)
		case definer:
			definers++
		case !pinned:
			helpers++
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if definers == 0 || helpers == 0 {
		t.Fatalf("%d pinned SECURITY DEFINER functions and %d internal helpers, want some of each", definers, helpers)
	}
}

func testLeastPrivilege(t *testing.T, db *testDB) {
	url, owner := db.url, db.pool
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	clientRole := createLoginRole(t, adminURL, url, true)
	otherRole := createLoginRole(t, adminURL, url, false)
	client := connectAs(t, url, clientRole)
	other := connectAs(t, url, otherRole)
	ctx := testContext(t)

	mustAcquire(t, owner, n("owned"), "owner", time.Hour, 1)
	mustClaimSlot(t, owner, n("owned-scope"), "owner", 1, time.Hour, 1, 1)

	t.Run("client can use the API", func(t *testing.T) {
		mustAcquire(t, client, n("c"), n("client"), time.Minute, 1)
		if r := renew(t, client, n("c"), n("client"), 1, time.Minute); !r.Renewed {
			t.Fatalf("renew: got false, want true")
		}
		tx, err := client.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := assertHeld(ctx, tx, n("c"), 1); err != nil {
			t.Fatalf("assert_held: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		mustClaimSlot(t, client, n("cs"), n("client"), 2, time.Minute, 1, 1)
		if r := renewSlot(t, client, n("cs"), 1, n("client"), 1, time.Minute); !r.Renewed {
			t.Fatalf("renew_slot: got false, want true")
		}
		mustExec(t, client, `SELECT * FROM pglease.claim_slots($1, $2, ARRAY[1, 1], '1 min')`,
			n("client"), []string{n("cs2"), n("cs3")})
		if r := renewHolder(t, client, n("client"), time.Minute); len(r.Slots) != 3 {
			t.Fatalf("renew_holder: got slots %v, want 3", r.Slots)
		}
		if !releaseSlot(t, client, n("cs"), 1, n("client"), 1) {
			t.Fatalf("release_slot: got false, want true")
		}
		if !release(t, client, n("c"), n("client"), 1) {
			t.Fatalf("release: got false, want true")
		}
		if m := readMetrics(t, client, "", 1000); len(m.LeaseNames) == 0 {
			t.Fatalf("metrics as client: got no leases, want some")
		}
		for _, view := range []string{"lease_status", "slot_status", "slot_scope_status"} {
			var rows int
			if err := client.QueryRow(ctx, `SELECT count(*) FROM pglease.`+view).Scan(&rows); err != nil {
				t.Fatalf("select from %s: %v", view, err)
			}
			if rows == 0 {
				t.Fatalf("select from %s: got no rows, want some", view)
			}
		}
	})

	// The statements name the owner's lease and slot, so that a statement
	// that wrongly succeeds also shows in their state.
	names := strings.NewReplacer("{owned}", quoteLiteral(n("owned")), "{scope}", quoteLiteral(n("owned-scope")),
		"{client}", quoteLiteral(n("client")))

	t.Run("client cannot touch tables or internals", func(t *testing.T) {
		for _, sql := range []string{
			`SELECT * FROM pglease.leases`,
			`INSERT INTO pglease.leases VALUES ('forged', {client}, 100, now(), now() + interval '1 hour')`,
			`UPDATE pglease.leases SET fence = fence + 100`,
			`DELETE FROM pglease.leases`,
			`TRUNCATE pglease.leases`,
			`SELECT * FROM pglease.slots`,
			`INSERT INTO pglease.slots VALUES ({scope}, 2, {client}, 100, now(), now() + interval '1 hour')`,
			`UPDATE pglease.slots SET holder = {client}`,
			`DELETE FROM pglease.slots`,
			`TRUNCATE pglease.slots`,
			`DELETE FROM pglease.slot_scopes`,
			`TRUNCATE pglease.slot_scopes`,
			`SELECT * FROM pglease.force_release({owned})`,
			`SELECT pglease._wake('lease', {owned}, false)`,
			`SELECT pglease._wait_register('lease', {owned}, clock_timestamp())`,
			`SELECT * FROM pglease.waiters`,
			`DELETE FROM pglease.waiters`,
			`SELECT pglease._scope_lock({scope})`,
			`SELECT * FROM pglease._slot_claim_locked({scope}, {client}, 10, 1, clock_timestamp(), interval '1 hour', NULL, true, NULL)`,
			`SELECT pglease._check_text('f', 'a', 'v')`,
			`CREATE TABLE pglease.mine (id int)`,
			`CREATE FUNCTION pglease.acquire(p_name int) RETURNS int LANGUAGE sql AS 'SELECT 1'`,
		} {
			sql = names.Replace(sql)
			_, err := client.Exec(ctx, sql)
			if pgCode(err) != "42501" {
				t.Errorf("%s as client: got %v, want SQLSTATE 42501", sql, err)
			}
		}
		if st := mustLeaseStatus(t, owner, n("owned")); st.State != "held" || *st.Holder != "owner" || st.Fence != 1 {
			t.Fatalf("owner's lease: got %s %s fence %d, want held by owner with fence 1", st.State, ptrString(st.Holder), st.Fence)
		}
		if st := mustSlotStatus(t, owner, n("owned-scope"), 1); *st.Holder != "owner" || st.Fence != 1 {
			t.Fatalf("owner's slot: got %s fence %d, want owner, 1", ptrString(st.Holder), st.Fence)
		}
	})

	t.Run("role without pglease_client gets nothing", func(t *testing.T) {
		for _, sql := range []string{
			`SELECT * FROM pglease.acquire('x', 'other', '1 min')`,
			`SELECT * FROM pglease.renew({owned}, 'owner', 1, '1 min')`,
			`SELECT pglease.assert_held({owned}, 1)`,
			`SELECT * FROM pglease.claim_slot('x', 'other', 1, '1 min')`,
			`SELECT * FROM pglease.renew_holder('owner', '1 min')`,
			`SELECT * FROM pglease.lease_status`,
			`SELECT * FROM pglease.slot_status`,
			`SELECT * FROM pglease.slot_scope_status`,
			`SELECT * FROM pglease.metrics('', 10)`,
			`SELECT * FROM pglease.leases`,
		} {
			sql = names.Replace(sql)
			_, err := other.Exec(ctx, sql)
			if pgCode(err) != "42501" {
				t.Errorf("%s without pglease_client: got %v, want SQLSTATE 42501", sql, err)
			}
		}
	})
}

// testSearchPathHijack checks that a client cannot steer the SECURITY
// DEFINER functions to its own clock, tables or operators through
// search_path.
func testSearchPathHijack(t *testing.T, db *testDB) {
	url, owner := db.url, db.pool
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	clientRole := createLoginRole(t, adminURL, url, true)
	mustExec(t, owner, `CREATE SCHEMA evil AUTHORIZATION `+pgx.Identifier{clientRole.name}.Sanitize())
	client := connectAs(t, url, clientRole)
	ctx := testContext(t)

	mustAcquire(t, owner, n("victim"), "owner", time.Hour, 1)

	for _, sql := range []string{
		`CREATE FUNCTION evil.clock_timestamp() RETURNS timestamptz LANGUAGE sql AS $$ SELECT timestamptz '3000-01-01 00:00:00+00' $$`,
		`CREATE FUNCTION evil.now() RETURNS timestamptz LANGUAGE sql AS $$ SELECT timestamptz '3000-01-01 00:00:00+00' $$`,
		`CREATE TABLE evil.leases (name text, holder text, fence bigint, acquired_at timestamptz, expires_at timestamptz)`,
		`CREATE TABLE evil.slots (scope text, slot integer, holder text, fence bigint, acquired_at timestamptz, expires_at timestamptz)`,
		`CREATE TABLE evil.slot_scopes (scope text)`,
		`CREATE FUNCTION evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'`,
		`CREATE OPERATOR evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = evil.always)`,
		`SET search_path = evil, pg_catalog, public`,
	} {
		mustExec(t, client, sql)
	}

	// The traps are armed: unqualified names now resolve to evil.
	var clock time.Time
	var eq bool
	if err := client.QueryRow(ctx, `SELECT clock_timestamp(), 'a'::text = 'b'::text`).Scan(&clock, &eq); err != nil {
		t.Fatal(err)
	}
	if clock.Year() != 3000 || !eq {
		t.Fatalf("hijack not armed: clock_timestamp() = %v, 'a' = 'b' is %v", clock, eq)
	}

	r := acquire(t, client, n("hijack"), n("client"), 10*time.Second)
	if !r.Acquired || r.Fence != 1 || r.ExpiresAt.Year() >= 3000 {
		t.Fatalf("acquire under hijacked search_path: got acquired=%v fence=%d expires_at=%v, want true, 1, about now + 10s",
			r.Acquired, r.Fence, r.ExpiresAt)
	}
	st := mustLeaseStatus(t, owner, n("hijack"))
	requireAtMostAbout(t, "expires_in of the hijacked acquire", *st.ExpiresIn, 10*time.Second, 2*time.Second)

	// evil.= would match every holder: the victim's lease must stay refused.
	if v := acquire(t, client, n("victim"), n("client"), time.Hour); v.Acquired || v.Holder != "owner" {
		t.Fatalf("acquire of the victim's lease: got acquired=%v holder=%q, want false, owner", v.Acquired, v.Holder)
	}
	requireNotRenewed(t, renew(t, client, n("victim"), n("client"), 1, time.Hour))
	if release(t, client, n("victim"), n("client"), 1) {
		t.Fatalf("release of the victim's lease: got true, want false")
	}
	c := claimSlot(t, client, n("hijack-scope"), n("client"), 1, 10*time.Second)
	if !c.Claimed {
		t.Fatalf("claim_slot under hijacked search_path: got %s, want claimed", c)
	}
	if s := mustSlotStatus(t, owner, n("hijack-scope"), 1); s.ExpiresIn == nil || *s.ExpiresIn > 10*time.Second || *s.ExpiresIn < 8*time.Second {
		t.Fatalf("slot expires_in under hijacked search_path: got %s, want about 10s", ptrString(s.ExpiresIn))
	}

	var evilRows int
	if err := owner.QueryRow(ctx, `SELECT (SELECT count(*) FROM evil.leases) + (SELECT count(*) FROM evil.slots)
		+ (SELECT count(*) FROM evil.slot_scopes)`).Scan(&evilRows); err != nil {
		t.Fatal(err)
	}
	if evilRows != 0 {
		t.Fatalf("rows in the client's look-alike tables: got %d, want 0", evilRows)
	}
	if st := mustLeaseStatus(t, owner, n("victim")); *st.Holder != "owner" || st.Fence != 1 || st.State != "held" {
		t.Fatalf("victim's lease: got %s %s fence %d, want held by owner with fence 1", st.State, *st.Holder, st.Fence)
	}
}
