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

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestOwnedNames: names a role owns (sql/functions/05_prefixes.sql,
// docs/security.md#names-a-role-owns), the groups that belong to a role
// (group_delete, purge) and the tables metrics lists. Bindings are
// database-wide: each subtest binds prefixes of its own (namer, groupName)
// and unbinds them when it ends. No subtest runs an owner's purge, so none
// deletes another's rows; a client's purge raises the fence floors, so
// new names are granted with grant, whatever their first fence.
func TestOwnedNames(t *testing.T) {
	t.Parallel()
	runGroup(t, 8, []subtest{
		{"BoundPrefixRefusesOtherRoles", testBoundPrefixRefusesOtherRoles},
		{"LongestPrefixWins", testLongestPrefixWins},
		{"UnbindSharesAgain", testUnbindSharesAgain},
		{"DroppedRoleOwnsNothing", testDroppedRoleOwnsNothing},
		{"OwnershipIsVisible", testOwnershipIsVisible},
		{"GroupShardsBelongToTheGroupRole", testGroupShardsBelongToTheGroupRole},
		{"GroupDelete", testGroupDelete},
		{"PurgeDeletesIdleGroups", testPurgeDeletesIdleGroups},
		{"MetricsListEveryTable", testMetricsListEveryTable},
		{"BadInput", testPrefixBadInput},
	})
}

// bindPrefix binds prefix to role as the schema owner, unbound when the
// test ends; it returns the role the prefix was bound to before (nil:
// none).
func bindPrefix(t *testing.T, db *testDB, prefix, role string) (previous *string) {
	t.Helper()
	mustScan(t, db.pool, `SELECT previous_role FROM pglease.prefix_bind($1, $2)`, []any{prefix, role}, &previous)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		if _, err := db.pool.Exec(ctx, `SELECT pglease.prefix_unbind($1)`, prefix); err != nil {
			t.Errorf("cleanup: unbind %q: %v", prefix, err)
		}
	})
	return previous
}

var notGroupName = regexp.MustCompile(`[^A-Za-z0-9._:-]`)

// groupName is namer for group names, which allow only [A-Za-z0-9._:-]:
// t's name with ':' for every other character, then s.
func groupName(t testing.TB, s string) string {
	return notGroupName.ReplaceAllString(t.Name(), ":") + ":" + s
}

// shardLease is the lease name of shard of group g.
func shardLease(g, shard string) string { return "{" + g + "}/" + shard }

// ownerOf returns pglease.owner_of(name) as q sees it, "NULL" for a shared
// name.
func ownerOf(t testing.TB, q querier, name string) string {
	t.Helper()
	var owner *string
	mustScan(t, q, `SELECT pglease.owner_of($1)`, []any{name}, &owner)
	return ptrString(owner)
}

// ownerRole returns lease_status.owner_role of lease name as q sees it,
// "NULL" for a shared name.
func ownerRole(t testing.TB, q querier, name string) string {
	t.Helper()
	var owner *string
	mustScan(t, q, `SELECT owner_role FROM pglease.lease_status WHERE name = $1`, []any{name}, &owner)
	return ptrString(owner)
}

// requireOwned fails unless err is the 42501 of a name under prefix, bound
// to role, naming both.
func requireOwned(t testing.TB, err error, fn, prefix, role string) {
	t.Helper()
	requirePgError(t, err, "42501", "pglease."+fn+":", "under prefix "+quoteLiteral(prefix), "belongs to role "+role)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// createGroup creates group g of count shards as q's role.
func createGroup(t testing.TB, q querier, g string, count int) {
	t.Helper()
	var created bool
	mustScan(t, q, `SELECT created FROM pglease.group_create($1, $2, NULL)`, []any{g, count}, &created)
	if !created {
		t.Fatalf("group_create(%q): got created = false, want true", g)
	}
}

// syncGroup syncs member in group g for an hour and returns the shards it
// holds after the call, with their fences.
func syncGroup(t testing.TB, q querier, g, member string) (shards []string, fences []int64) {
	t.Helper()
	mustScan(t, q, `SELECT shards, fences FROM pglease.group_sync($1, $2, '1 hour', NULL)`,
		[]any{g, member}, &shards, &fences)
	return shards, fences
}

// leaveGroup ends member's membership of group g.
func leaveGroup(t testing.TB, q querier, g, member string) {
	t.Helper()
	var left bool
	mustScan(t, q, `SELECT left_group FROM pglease.group_leave($1, $2)`, []any{g, member}, &left)
	if !left {
		t.Fatalf("group_leave(%q, %q): got false, want true", g, member)
	}
}

// releaseShards releases the shards member holds in group g (shards,
// fences as syncGroup returned them).
func releaseShards(t testing.TB, q querier, g, member string, shards []string, fences []int64) {
	t.Helper()
	for i, s := range shards {
		var released bool
		mustScan(t, q, `SELECT released FROM pglease.group_release($1, $2, $3, $4)`,
			[]any{g, s, member, fences[i]}, &released)
		if !released {
			t.Fatalf("group_release(%q, %q, %q, %d): got false, want true", g, s, member, fences[i])
		}
	}
}

// groupRows reports the rows of group g: the group, its shards, its
// members and its shard leases.
func groupRows(t testing.TB, q querier, g string) string {
	t.Helper()
	var s string
	mustScan(t, q, `SELECT format('group %s, shards %s, members %s, leases %s',
			(SELECT count(*) FROM pglease.groups WHERE name = $1),
			(SELECT count(*) FROM pglease.group_shards WHERE group_name = $1),
			(SELECT count(*) FROM pglease.group_members WHERE group_name = $1),
			(SELECT count(*) FROM pglease.leases WHERE starts_with(name, '{' || $1 || '}/')))`,
		[]any{g}, &s)
	return s
}

// testBoundPrefixRefusesOtherRoles: under a prefix bound to A, B can take
// nothing by any call (42501 naming the prefix and A, nothing written;
// acquire_batch refuses the element only), while A and a member of A take
// what they ask for.
func testBoundPrefixRefusesOtherRoles(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	adminURL := pgtest.AdminURL(t)
	roleA := createLoginRole(t, adminURL, db.url, true)
	roleC := createLoginRole(t, adminURL, db.url, true)
	a := connectAs(t, db.url, roleA)
	b := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	mustExec(t, connect(t, adminURL), `GRANT `+ident(roleA.name)+` TO `+ident(roleC.name))
	c := connectAs(t, db.url, roleC)
	prefix, gprefix := n("svc/"), groupName(t, "svcx:")
	bindPrefix(t, db, prefix, roleA.name)
	bindPrefix(t, db, gprefix, roleA.name)

	_, err := tryAcquire(ctx, b, prefix+"lease", "b", time.Hour)
	requireOwned(t, err, "acquire", prefix, roleA.name)
	_, err = b.Exec(ctx, `SELECT * FROM pglease.acquire($1, 'b', '1 hour', 'addr-b')`, prefix+"value")
	requireOwned(t, err, "acquire", prefix, roleA.name)
	_, err = tryClaimSlot(ctx, b, prefix+"scope", "b", 2, time.Hour)
	requireOwned(t, err, "claim_slot", prefix, roleA.name)
	_, err = b.Exec(ctx, `SELECT * FROM pglease.claim_slot($1, 'b', 2, '1 hour', 1, true)`, prefix+"scope")
	requireOwned(t, err, "claim_slot", prefix, roleA.name)
	_, err = b.Exec(ctx, `SELECT * FROM pglease.claim_slots('b', ARRAY[$1, $2], ARRAY[2, 2], '1 hour')`,
		n("free"), prefix+"scope")
	requireOwned(t, err, "claim_slots", prefix, roleA.name)
	requirePgError(t, err, "42501", "p_scopes[2]")
	_, err = b.Exec(ctx, `SELECT * FROM pglease.group_create($1, 2, NULL)`, gprefix+"grp")
	requireOwned(t, err, "group_create", gprefix, roleA.name)

	// acquire_batch refuses the owned element alone: the shared one is granted.
	var (
		acquired []bool
		states   []*string
	)
	mustScan(t, b, `SELECT acquired, sqlstates FROM pglease.acquire_batch(ARRAY[$1, $2], 'b',
			ARRAY['1 hour', '1 hour']::interval[], NULL)`,
		[]any{prefix + "batch", n("shared")}, &acquired, &states)
	if !slices.Equal(acquired, []bool{false, true}) || len(states) != 2 ||
		ptrString(states[0]) != "42501" || states[1] != nil {
		t.Fatalf("B's acquire_batch of an owned and a shared name: got acquired %v sqlstates [%s %s], want [false true] [42501 NULL]",
			acquired, ptrString(states[0]), ptrString(states[1]))
	}

	left := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT format('leases %s, candidates %s, waiters %s, scopes %s, slots %s, queued %s, groups %s',
				(SELECT count(*) FROM pglease.leases WHERE starts_with(name, $1)),
				(SELECT count(*) FROM pglease.candidates WHERE starts_with(name, $1)),
				(SELECT count(*) FROM pglease.waiters WHERE starts_with(name, $1) OR name = $2),
				(SELECT count(*) FROM pglease.slot_scopes WHERE starts_with(scope, $1) OR scope = $2),
				(SELECT count(*) FROM pglease.slots WHERE starts_with(scope, $1) OR scope = $2),
				(SELECT count(*) FROM pglease.slot_queue WHERE starts_with(scope, $1) OR scope = $2),
				(SELECT count(*) FROM pglease.groups WHERE starts_with(name, $3)))`,
			[]any{prefix, n("free"), gprefix}, &s)
		return s
	}
	const none = "leases 0, candidates 0, waiters 0, scopes 0, slots 0, queued 0, groups 0"
	if got := left(); got != none {
		t.Fatalf("rows left by B's refused calls: got %s, want %s", got, none)
	}

	// A takes every one of them; the shared name B holds is refused as usual.
	grant(t, a, prefix+"lease", "a", time.Hour)
	if ok, _, _ := acquireValue(t, a, prefix+"value", "a", time.Hour, "addr-a"); !ok {
		t.Fatal("A's acquire with a value under A's prefix: got refused, want acquired")
	}
	mustScan(t, a, `SELECT acquired, sqlstates FROM pglease.acquire_batch(ARRAY[$1, $2], 'a',
			ARRAY['1 hour', '1 hour']::interval[], NULL)`,
		[]any{prefix + "batch", n("shared")}, &acquired, &states)
	if !slices.Equal(acquired, []bool{true, false}) || len(states) != 2 || states[0] != nil || states[1] != nil {
		t.Fatalf("A's acquire_batch of its name and B's shared one: got acquired %v sqlstates [%s %s], want [true false] [NULL NULL]",
			acquired, ptrString(states[0]), ptrString(states[1]))
	}
	if r := claimSlot(t, a, prefix+"scope", "a", 2, time.Hour); !r.Claimed {
		t.Fatalf("A's claim_slot under A's prefix: got %s, want claimed", r)
	}
	var claimed bool
	mustScan(t, a, `SELECT claimed FROM pglease.claim_slots('a-2', ARRAY[$1, $2], ARRAY[2, 2], '1 hour')`,
		[]any{n("free"), prefix + "scope"}, &claimed)
	if !claimed {
		t.Fatal("A's claim_slots of a shared scope and one under A's prefix: got refused, want claimed")
	}
	createGroup(t, a, gprefix+"grp", 2)

	// C, a member of A, takes names under the prefix too.
	grant(t, c, prefix+"c", "c", time.Hour)
	if r := claimSlot(t, c, prefix+"c-scope", "c", 1, time.Hour); !r.Claimed {
		t.Fatalf("claim_slot by a member of A under A's prefix: got %s, want claimed", r)
	}
	createGroup(t, c, gprefix+"c-grp", 1)
}

// testLongestPrefixWins: of two bound prefixes of a name, the longer one
// decides, whichever was bound first.
func testLongestPrefixWins(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, roleA := clientPair(t, db)
	var roleB string
	mustScan(t, b, `SELECT session_user::text`, nil, &roleB)
	bindPrefix(t, db, n("x/"), roleA.name)
	bindPrefix(t, db, n("x/b/"), roleB)

	grant(t, b, n("x/b/1"), "b", time.Hour)
	_, err := tryAcquire(ctx, a, n("x/b/1"), "a", time.Hour)
	requireOwned(t, err, "acquire", n("x/b/"), roleB)
	_, err = tryAcquire(ctx, a, n("x/b/2"), "a", time.Hour)
	requireOwned(t, err, "acquire", n("x/b/"), roleB)
	grant(t, a, n("x/a"), "a", time.Hour)
	_, err = tryAcquire(ctx, b, n("x/c"), "b", time.Hour)
	requireOwned(t, err, "acquire", n("x/"), roleA.name)
	for name, want := range map[string]string{
		n("x/b/1"): roleB, n("x/b/"): roleB, n("x/a"): roleA.name, n("x/b"): roleA.name,
		n("x/"): roleA.name, n("x"): "NULL",
	} {
		if got := ownerOf(t, db.pool, name); got != want {
			t.Errorf("owner_of(%q): got %s, want %s", name, got, want)
		}
	}
}

// testUnbindSharesAgain: binding a prefix leaves a tenure taken before
// running; binding it again moves it (returning the previous role);
// unbinding makes its names shared again.
func testUnbindSharesAgain(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	a, b, roleA := clientPair(t, db)
	var roleB string
	mustScan(t, b, `SELECT session_user::text`, nil, &roleB)
	prefix := n("u/")

	early := grant(t, b, prefix+"early", "b", time.Hour)
	if prev := bindPrefix(t, db, prefix, roleB); prev != nil {
		t.Fatalf("prefix_bind of a new prefix: got previous_role %q, want NULL", *prev)
	}
	if prev := bindPrefix(t, db, prefix, roleA.name); ptrString(prev) != roleB {
		t.Fatalf("prefix_bind of a bound prefix: got previous_role %s, want %s", ptrString(prev), roleB)
	}
	if r := renew(t, b, prefix+"early", "b", early, time.Hour); !r.Renewed {
		t.Fatal("B's renewal of its tenure taken before the prefix was bound to A: got false, want true")
	}
	_, err := tryAcquire(ctx, b, prefix+"new", "b", time.Hour)
	requireOwned(t, err, "acquire", prefix, roleA.name)
	grant(t, a, prefix+"a", "a", time.Hour)

	var prev *string
	mustScan(t, db.pool, `SELECT previous_role FROM pglease.prefix_unbind($1)`, []any{prefix}, &prev)
	if ptrString(prev) != roleA.name {
		t.Fatalf("prefix_unbind: got previous_role %s, want %s", ptrString(prev), roleA.name)
	}
	mustScan(t, db.pool, `SELECT previous_role FROM pglease.prefix_unbind($1)`, []any{prefix}, &prev)
	if prev != nil {
		t.Fatalf("prefix_unbind of an unbound prefix: got previous_role %q, want NULL", *prev)
	}
	grant(t, b, prefix+"new", "b", time.Hour)
	for _, name := range []string{prefix + "new", prefix + "a", prefix + "early"} {
		if got := ownerOf(t, a, name); got != "NULL" {
			t.Errorf("owner_of(%q) after the unbind: got %s, want NULL", name, got)
		}
	}
	if r := acquire(t, b, prefix+"a", "b", time.Hour); r.Acquired {
		t.Fatal("B's acquire of A's live tenure after the unbind: got acquired, want refused")
	}
	if !release(t, b, prefix+"early", "b", early) {
		t.Fatal("B's release of its early tenure: got false, want true")
	}
}

// testDroppedRoleOwnsNothing: a prefix bound to a role that has since been
// dropped is nobody's: neither its former members nor any other role, nor
// the schema owner, take a name under it; a tenure taken before keeps
// running; owner_of still names the role.
func testDroppedRoleOwnsNothing(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	adminURL := pgtest.AdminURL(t)
	admin := connect(t, adminURL)
	gone := uniqueName("pglease_contract_gone_")
	mustExec(t, admin, `CREATE ROLE `+ident(gone)+` NOLOGIN`)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			t.Errorf("cleanup: connect to drop role %s: %v", gone, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+ident(gone)); err != nil {
			t.Errorf("cleanup: drop role %s: %v", gone, err)
		}
	})
	roleC := createLoginRole(t, adminURL, db.url, true)
	mustExec(t, admin, `GRANT `+ident(gone)+` TO `+ident(roleC.name))
	c := connectAs(t, db.url, roleC)
	b := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	prefix := n("gone/")
	bindPrefix(t, db, prefix, gone)

	live := grant(t, c, prefix+"live", "c", time.Hour)
	mustExec(t, admin, `DROP ROLE `+ident(gone))
	for _, who := range []struct {
		what string
		q    querier
	}{{"its former member", c}, {"another role", b}, {"the schema owner", db.pool}} {
		_, err := tryAcquire(ctx, who.q, prefix+"new", "x", time.Hour)
		if pgCode(err) != "42501" {
			t.Errorf("acquire by %s under a prefix of a dropped role: got %v, want SQLSTATE 42501", who.what, err)
		}
		_, err = tryClaimSlot(ctx, who.q, prefix+"scope", "x", 1, time.Hour)
		if pgCode(err) != "42501" {
			t.Errorf("claim_slot by %s under a prefix of a dropped role: got %v, want SQLSTATE 42501", who.what, err)
		}
	}
	_, err := tryAcquire(ctx, c, prefix+"new", "c", time.Hour)
	requireOwned(t, err, "acquire", prefix, gone)
	if got := ownerOf(t, b, prefix+"new"); got != gone {
		t.Fatalf("owner_of under a prefix of a dropped role: got %s, want %s", got, gone)
	}
	if r := renew(t, c, prefix+"live", "c", live, time.Hour); !r.Renewed {
		t.Fatal("renewal of a tenure taken before the role was dropped: got false, want true")
	}
	mustExec(t, db.pool, `SELECT pglease.prefix_unbind($1)`, prefix)
	grant(t, b, prefix+"new", "b", time.Hour)
}

// testOwnershipIsVisible: owner_of and lease_status.owner_role show the
// owner to every client and to an operator; none of them may bind or
// unbind a prefix.
func testOwnershipIsVisible(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	adminURL := pgtest.AdminURL(t)
	a, b, roleA := clientPair(t, db)
	opRole := createLoginRole(t, adminURL, db.url, false)
	mustExec(t, connect(t, adminURL), `GRANT pglease_operator TO `+ident(opRole.name))
	operator := connectAs(t, db.url, opRole)
	prefix := n("vis/")
	bindPrefix(t, db, prefix, roleA.name)
	grant(t, a, prefix+"1", "a", time.Hour)
	grant(t, db.pool, n("shared"), "o", time.Hour)

	bindings := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT coalesce(jsonb_agg(jsonb_build_array(p.prefix, p.owner_role) ORDER BY p.prefix), '[]')::text
			FROM pglease.prefixes AS p WHERE starts_with(p.prefix, $1)`, []any{n("")}, &s)
		return s
	}
	before := bindings()
	for _, v := range []struct {
		what string
		q    *pgx.Conn
	}{{"A", a}, {"B", b}, {"an operator", operator}} {
		for name, want := range map[string]string{prefix + "1": roleA.name, prefix + "unused": roleA.name, n("shared"): "NULL"} {
			if got := ownerOf(t, v.q, name); got != want {
				t.Errorf("owner_of(%q) as %s: got %s, want %s", name, v.what, got, want)
			}
		}
		for name, want := range map[string]string{prefix + "1": roleA.name, n("shared"): "NULL"} {
			if got := ownerRole(t, v.q, name); got != want {
				t.Errorf("lease_status.owner_role of %q as %s: got %s, want %s", name, v.what, got, want)
			}
		}
		_, err := v.q.Exec(ctx, `SELECT pglease.prefix_bind($1, session_user)`, n("steal/"))
		requirePgError(t, err, "42501")
		_, err = v.q.Exec(ctx, `SELECT pglease.prefix_bind($1, session_user)`, prefix)
		requirePgError(t, err, "42501")
		_, err = v.q.Exec(ctx, `SELECT pglease.prefix_unbind($1)`, prefix)
		requirePgError(t, err, "42501")
	}
	if after := bindings(); after != before {
		t.Fatalf("bindings after refused prefix_bind and prefix_unbind calls:\ngot  %s\nwant %s", after, before)
	}
}

// testGroupShardsBelongToTheGroupRole: another role's acquire of a shard
// lease of a group is 42501 naming the group's role, while the shard is
// held and after it was released.
func testGroupShardsBelongToTheGroupRole(t *testing.T, db *testDB) {
	ctx := testContext(t)
	a, b, roleA := clientPair(t, db)
	g := groupName(t, "g")
	createGroup(t, a, g, 2)
	shards, fences := syncGroup(t, a, g, "a-1")
	if !slices.Equal(shards, []string{"0", "1"}) {
		t.Fatalf("group_sync of the only member: got shards %v, want [0 1]", shards)
	}
	shard := shardLease(g, "0")
	_, err := tryAcquire(ctx, b, shard, "a-1", time.Hour)
	requirePgError(t, err, "42501", "shard of a group of role "+roleA.name)
	for _, q := range []*pgx.Conn{a, b} {
		if got := ownerOf(t, q, shard); got != roleA.name {
			t.Fatalf("owner_of(%q): got %s, want %s", shard, got, roleA.name)
		}
	}
	var released bool
	mustScan(t, a, `SELECT released FROM pglease.group_release($1, '0', 'a-1', $2)`, []any{g, fences[0]}, &released)
	if !released {
		t.Fatal("group_release of shard 0: got false, want true")
	}
	if s := mustLeaseStatus(t, db.pool, shard); s.State != "free" {
		t.Fatalf("shard 0 after its release: got state %s, want free", s.State)
	}
	_, err = tryAcquire(ctx, b, shard, "b", time.Hour)
	requirePgError(t, err, "42501", "shard of a group of role "+roleA.name)
	if got := ownerRole(t, b, shard); got != roleA.name {
		t.Fatalf("lease_status.owner_role of a released shard: got %s, want %s", got, roleA.name)
	}
}

// testGroupDelete: only the group's role deletes a group, and only once
// no member is live and no shard is held (55006 before, nothing changed);
// then the group goes and its shard leases stay, as shared names.
func testGroupDelete(t *testing.T, db *testDB) {
	ctx := testContext(t)
	a, b, roleA := clientPair(t, db)
	g := groupName(t, "g")
	createGroup(t, a, g, 2)
	shards, fences := syncGroup(t, a, g, "a-1")
	if len(shards) != 2 {
		t.Fatalf("group_sync of the only member: got shards %v, want 2 of them", shards)
	}
	snapshot := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT concat_ws(E'\n',
				(SELECT to_jsonb(x) FROM pglease.groups AS x WHERE x.name = $1),
				(SELECT jsonb_agg(to_jsonb(x) ORDER BY x.ord) FROM pglease.group_shards AS x WHERE x.group_name = $1),
				(SELECT jsonb_agg(to_jsonb(x) ORDER BY x.member) FROM pglease.group_members AS x WHERE x.group_name = $1),
				(SELECT jsonb_agg(to_jsonb(x) ORDER BY x.name) FROM pglease.leases AS x
				 WHERE starts_with(x.name, '{' || $1 || '}/')))`,
			[]any{g}, &s)
		return s
	}
	before := snapshot()
	_, err := b.Exec(ctx, `SELECT pglease.group_delete($1)`, g)
	requirePgError(t, err, "42501", roleA.name)
	_, err = a.Exec(ctx, `SELECT pglease.group_delete($1)`, g)
	requirePgError(t, err, "55006")
	if after := snapshot(); after != before {
		t.Fatalf("refused group_delete calls changed the group:\ngot  %s\nwant %s", after, before)
	}
	// Left, but still holding its shards.
	leaveGroup(t, a, g, "a-1")
	_, err = a.Exec(ctx, `SELECT pglease.group_delete($1)`, g)
	requirePgError(t, err, "55006")
	releaseShards(t, a, g, "a-1", shards, fences)
	var deleted bool
	mustScan(t, a, `SELECT deleted FROM pglease.group_delete($1)`, []any{g}, &deleted)
	if !deleted {
		t.Fatal("group_delete with no live member and no held shard: got false, want true")
	}
	if got, want := groupRows(t, db.pool, g), "group 0, shards 0, members 0, leases 2"; got != want {
		t.Fatalf("rows of the deleted group: got %s, want %s", got, want)
	}
	shard := shardLease(g, shards[0])
	if got := ownerOf(t, b, shard); got != "NULL" {
		t.Fatalf("owner_of(%q) after the group was deleted: got %s, want NULL", shard, got)
	}
	if fence := grant(t, b, shard, "b", time.Hour); fence <= fences[0] {
		t.Fatalf("B's acquire of a former shard: got fence %d, want above the shard's %d", fence, fences[0])
	}
	_, err = a.Exec(ctx, `SELECT pglease.group_delete($1)`, g)
	requirePgError(t, err, "PGL10")
	_, err = a.Exec(ctx, `SELECT pglease.group_delete($1)`, groupName(t, "nope"))
	requirePgError(t, err, "PGL10")
}

// testPurgeDeletesIdleGroups: a group nobody takes part in goes at the
// purge after the one that deleted its last shard lease; a group with a
// live member stays. A client's purge deletes only its own role's groups
// and shard leases (so this subtest deletes no other subtest's rows).
func testPurgeDeletesIdleGroups(t *testing.T, db *testDB) {
	a, b, _ := clientPair(t, db)
	idle, busy := groupName(t, "idle"), groupName(t, "busy")
	createGroup(t, a, idle, 2)
	createGroup(t, a, busy, 2)
	shards, fences := syncGroup(t, a, idle, "a-1")
	syncGroup(t, a, busy, "a-2")
	leaveGroup(t, a, idle, "a-1")
	releaseShards(t, a, idle, "a-1", shards, fences)

	rows := func() string {
		t.Helper()
		return "idle: " + groupRows(t, db.pool, idle) + "; busy: " + groupRows(t, db.pool, busy)
	}
	const busyRows = "busy: group 1, shards 2, members 1, leases 2"
	for _, c := range []struct {
		who  string
		q    *pgx.Conn
		want string
	}{
		{"B", b, "idle: group 1, shards 2, members 0, leases 2; " + busyRows},
		{"A", a, "idle: group 1, shards 2, members 0, leases 0; " + busyRows},
		{"A again", a, "idle: group 0, shards 0, members 0, leases 0; " + busyRows},
	} {
		mustExec(t, c.q, `SELECT pglease.purge('0')`)
		if got := rows(); got != c.want {
			t.Fatalf("after %s's purge('0'): got %s, want %s", c.who, got, c.want)
		}
	}
}

// testMetricsListEveryTable: metrics lists the 19 tables in order, with
// the row counts count(*) gives in the same snapshot and their sizes.
func testMetricsListEveryTable(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	// At least one row in every table.
	bindPrefix(t, db, n("m/"), "pglease_client")
	mustExec(t, db.pool, `SELECT pglease.history_enable($1, '1 day')`, n(""))
	lease := n("lease")
	fence := grant(t, db.pool, lease, "h", time.Hour)
	if ok, _, _ := acquireValue(t, db.pool, lease, "other", time.Hour, "v"); ok {
		t.Fatal("acquire of a held lease: got acquired, want refused")
	}
	mustExec(t, db.pool, `SELECT pglease.observe($1, '1 minute')`, lease)
	mustExec(t, db.pool, `SELECT pglease.run_begin($1, 'h', $2, '1 hour')`, lease, fence)
	if r := claimSlot(t, db.pool, n("scope"), "h1", 1, time.Hour); !r.Claimed {
		t.Fatalf("claim in an empty scope: got %s, want claimed", r)
	}
	var claimed bool
	mustScan(t, db.pool, `SELECT claimed FROM pglease.claim_slot($1, 'h2', 1, '1 hour', 1, true)`, []any{n("scope")}, &claimed)
	if claimed {
		t.Fatal("claim with p_wait in a full scope: got claimed, want refused and queued")
	}
	g := groupName(t, "g")
	createGroup(t, db.pool, g, 2)
	syncGroup(t, db.pool, g, "m-1")

	capped := createLoginRole(t, pgtest.AdminURL(t), db.url, true)
	mustExec(t, db.pool, `SELECT pglease.quota_set($1, 'runs', 1000000)`, capped.name)
	mustExec(t, db.pool, `SELECT pglease.purge_due('1 hour', '1 day')`)
	mustExec(t, db.pool, `SELECT pglease.limit_set($1, 1, '1 hour', 1)`, n("m/"))
	mustExec(t, db.pool, `SELECT * FROM pglease.reserve($1, 1, '1 hour')`, n("m/k"))

	want := []string{"leases", "slots", "slot_scopes", "waiters", "slot_queue", "observers",
		"candidates", "runs", "groups", "group_shards", "group_members", "prefixes", "quotas", "purge_turns", "limits", "limit_state", "limit_reservations",
		"tenures", "history_prefixes"}
	var counts []string
	for _, table := range want {
		counts = append(counts, fmt.Sprintf("(SELECT count(*) FROM pglease.%s)", table))
	}
	var (
		tables      []string
		rows, bytes []int64
		counted     []int64
	)
	err := db.pool.QueryRow(ctx, `SELECT m.tables, m.table_rows, m.table_bytes, ARRAY[`+strings.Join(counts, ", ")+`]
		FROM pglease.metrics('', 0) AS m`).Scan(&tables, &rows, &bytes, &counted)
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	if !slices.Equal(tables, want) {
		t.Fatalf("metrics tables: got %v, want %v", tables, want)
	}
	if !slices.Equal(rows, counted) {
		t.Fatalf("metrics table_rows: got %v, want count(*) of the same snapshot %v", rows, counted)
	}
	for i, table := range want {
		if counted[i] < 1 {
			t.Errorf("count(*) of %s: got %d, want at least the row this test made", table, counted[i])
		}
		if len(bytes) != len(want) || bytes[i] <= 0 {
			t.Fatalf("metrics table_bytes: got %v, want %d sizes above 0", bytes, len(want))
		}
	}
}

// testPrefixBadInput: prefix_bind, prefix_unbind and owner_of refuse bad
// arguments with 22004, 22023 or 42704 naming the argument, and change no
// binding; a prefix of exactly 256 bytes is accepted.
func testPrefixBadInput(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	_, _, roleA := clientPair(t, db)
	long := n("") + strings.Repeat("x", 257-len(n("")))
	nobody := uniqueName("pglease_contract_nobody_")
	bindings := func() string {
		t.Helper()
		var s string
		mustScan(t, db.pool, `SELECT coalesce(jsonb_agg(to_jsonb(p) ORDER BY p.prefix), '[]')::text
			FROM pglease.prefixes AS p WHERE starts_with(p.prefix, $1) OR p.prefix = '' OR octet_length(p.prefix) > 256`,
			[]any{n("")}, &s)
		return s
	}
	before := bindings()
	for _, c := range []struct {
		sql  string
		args []any
		code string
		says string
	}{
		{`SELECT pglease.prefix_bind(NULL, $1)`, []any{roleA.name}, "22004", "p_prefix"},
		{`SELECT pglease.prefix_bind($1, NULL)`, []any{n("p/")}, "22004", "p_role"},
		{`SELECT pglease.prefix_bind('', $1)`, []any{roleA.name}, "22023", "p_prefix"},
		{`SELECT pglease.prefix_bind($1, $2)`, []any{long, roleA.name}, "22023", "p_prefix"},
		{`SELECT pglease.prefix_bind($1, $2)`, []any{n("p/"), nobody}, "42704", nobody},
		{`SELECT pglease.prefix_unbind(NULL)`, nil, "22004", "p_prefix"},
		{`SELECT pglease.prefix_unbind('')`, nil, "22023", "p_prefix"},
		{`SELECT pglease.prefix_unbind($1)`, []any{long}, "22023", "p_prefix"},
		{`SELECT pglease.owner_of(NULL)`, nil, "22004", "p_name"},
		{`SELECT pglease.owner_of('')`, nil, "22023", "p_name"},
		{`SELECT pglease.owner_of($1)`, []any{long}, "22023", "p_name"},
	} {
		_, err := db.pool.Exec(ctx, c.sql, c.args...)
		requirePgError(t, err, c.code, c.says)
		if after := bindings(); after != before {
			t.Fatalf("%s changed the bindings:\ngot  %s\nwant %s", c.sql, after, before)
		}
	}
	edge := long[:256]
	bindPrefix(t, db, edge, roleA.name)
	if got := ownerOf(t, db.pool, edge); got != roleA.name {
		t.Fatalf("owner_of a name equal to a 256-byte bound prefix: got %s, want %s", got, roleA.name)
	}
}
