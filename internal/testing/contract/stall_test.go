package contract

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestNoClientCallStallsAnotherRole sweeps every function that role
// pglease_client may execute for this rule of the security promise: no
// such call that only reads, is refused, raises, or acts on a tenure that
// is not its own, left open in a transaction with the caller's timeouts
// disabled, delays another role's renew, release, takeover of an expired
// or released lease, claim, renew_holder, or the owner's force_release by
// more than 100 ms.
//
// Role B makes each call of stallSweep on role A's names in a transaction
// it leaves open (statement_timeout, idle_in_transaction_session_timeout
// and lock_timeout set to 0), and A then makes each call of victimCalls
// with lock_timeout = 100ms: a wait of more than 100 ms for a lock fails
// with SQLSTATE 55P03, and the test then checks that the wait is for B's
// backend (pg_blocking_pids) before it reports it. Waiting is what acquire
// and claim do while the lease or scope is taken, so A's calls include a
// refused acquire and a refused claim as well.
func TestNoClientCallStallsAnotherRole(t *testing.T) {
	t.Parallel()
	var local, global []subtest
	for _, fn := range slices.Sorted(maps.Keys(stallSweep)) {
		for _, h := range stallSweep[fn] {
			name := strings.TrimPrefix(fn, "pglease.") + "/" + h.how
			if h.global {
				global = append(global, subtest{name, func(t *testing.T, db *testDB) { testStall(t, db, h) }})
			} else {
				local = append(local, subtest{name, func(t *testing.T, db *testDB) { testStall(t, db, h) }})
			}
		}
	}
	local = append(local,
		subtest{"EveryGrantedFunctionIsSwept", testEveryGrantedFunctionIsSwept},
		subtest{"Harness/OwnerLocksEveryRow", func(t *testing.T, db *testDB) { testStall(t, db, ownerLocksEveryRow) }},
	)
	runGroup(t, 8, local)
	// A purge locks the free rows of every name: its calls each run alone,
	// one after the other, on a database of their own.
	runGroup(t, 4, []subtest{{"OneAtATime", func(t *testing.T, db *testDB) {
		for _, tc := range global {
			t.Run(tc.name, func(t *testing.T) { tc.run(t, db) })
		}
	}}})
}

// testEveryGrantedFunctionIsSwept: every function pglease_client may
// execute has its hostile calls in stallSweep, and stallSweep names no
// other.
func testEveryGrantedFunctionIsSwept(t *testing.T, db *testDB) {
	ctx := testContext(t)
	rows, err := db.pool.Query(ctx, `SELECT p.oid::regprocedure::text
		FROM pg_catalog.pg_proc AS p
		WHERE p.pronamespace = 'pglease'::regnamespace
		  AND pg_catalog.has_function_privilege('pglease_client', p.oid, 'EXECUTE')
		ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	granted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(granted) == 0 {
		t.Fatal("pglease_client may execute no function of schema pglease: want the client's functions")
	}
	for _, fn := range granted {
		if len(stallSweep[fn]) == 0 {
			t.Errorf("pglease_client may execute %s, which the stall sweep does not call: add an entry to stallSweep "+
				"in internal/testing/contract/stall_test.go with the calls an attacker of another role would leave open "+
				"(on the victim's names, refused, raising, or only reading)", fn)
		}
	}
	for _, fn := range slices.Sorted(maps.Keys(stallSweep)) {
		if !slices.Contains(granted, fn) {
			t.Errorf("stallSweep calls %s, which pglease_client may not execute (or which no longer exists): "+
				"rename or remove its entry in internal/testing/contract/stall_test.go", fn)
		}
	}
}

// stallEnv is the state role A (the victim) sets up for one hostile call,
// and the names role B (the attacker) calls on.
type stallEnv struct {
	hA, hW, hR, keeper, member, hB string // holder strings (hB is B's)
	// Leases: held by A (live, rel, waited, forced, kept, job), expired
	// (exp), released (freed); shard is the lease of A's group's shard.
	live, rel, waited, forced, kept, job, exp, freed, shard string
	fence                                                   map[string]int64  // A's fence of each lease
	holder                                                  map[string]string // A's holder of each live lease
	// Scopes: A holds slots 1 to 3 of 5 units (scope), holds the whole
	// of fullScope and held the one slot of freeScope.
	scope, freeScope, fullScope string
	slots                       []stallSlot
	group                       string
	bFence                      int64 // B's tenure of live before A's (see before), 0 when none
}

type stallSlot struct {
	scope  string
	slot   int32
	holder string
	fence  int64
}

func newStallEnv(t *testing.T) *stallEnv {
	n := namer(t)
	e := &stallEnv{
		hA: n("a"), hW: n("a-other"), hR: n("a-releaser"), keeper: n("a-keeper"), member: n("a-member"), hB: n("b"),
		live: n("live"), rel: n("release"), waited: n("waited"), forced: n("forced"), kept: n("kept"), job: n("job"),
		exp: n("expired"), freed: n("released"),
		fence: map[string]int64{}, holder: map[string]string{},
		scope: n("scope"), freeScope: n("free-scope"), fullScope: n("full-scope"),
		group: uniqueName("stall-"),
	}
	e.shard = "{" + e.group + "}/0"
	return e
}

// liveLeases returns A's live leases with their holders and fences.
func (e *stallEnv) liveLeases() (names, holders []string, fences []int64) {
	for _, name := range []string{e.live, e.rel, e.waited, e.forced, e.kept, e.job, e.shard} {
		names = append(names, name)
		holders = append(holders, e.holder[name])
		fences = append(fences, e.fence[name])
	}
	return names, holders, fences
}

// leasesOfA returns the live leases of holder hA and their fences.
func (e *stallEnv) leasesOfA() (names []string, fences []int64) {
	all, holders, allFences := e.liveLeases()
	for i, name := range all {
		if holders[i] == e.hA {
			names = append(names, name)
			fences = append(fences, allFences[i])
		}
	}
	return names, fences
}

func (e *stallEnv) allLeases() []string {
	names, _, _ := e.liveLeases()
	return append(names, e.exp, e.freed)
}

func (e *stallEnv) slotColumns() (scopes []string, slots []int32, holders []string, fences []int64) {
	for _, s := range e.slots {
		scopes = append(scopes, s.scope)
		slots = append(slots, s.slot)
		holders = append(holders, s.holder)
		fences = append(fences, s.fence)
	}
	return scopes, slots, holders, fences
}

func (e *stallEnv) holdersOfA() []string {
	return []string{e.hA, e.hW, e.hR, e.keeper, e.member}
}

func nextFences(fences []int64) []int64 {
	out := make([]int64, len(fences))
	for i, f := range fences {
		out[i] = f + 1
	}
	return out
}

// setUpVictim creates A's state: every tenure is A's own, taken by role
// A's connection a.
func setUpVictim(t *testing.T, e *stallEnv, a *pgx.Conn) {
	t.Helper()
	ctx := testContext(t)
	take := func(name, holder string, ttl time.Duration) int64 {
		r := acquire(t, a, name, holder, ttl)
		if !r.Acquired {
			t.Fatalf("set-up: acquire(%q, %q): refused by %q", name, holder, r.Holder)
		}
		e.fence[name] = r.Fence
		return r.Fence
	}
	for _, name := range []string{e.live, e.rel, e.forced, e.job} {
		take(name, e.hA, time.Hour)
		e.holder[name] = e.hA
	}
	take(e.waited, e.hW, time.Hour)
	e.holder[e.waited] = e.hW
	take(e.kept, e.keeper, time.Hour)
	e.holder[e.kept] = e.keeper
	if !release(t, a, e.freed, e.hA, take(e.freed, e.hA, time.Hour)) {
		t.Fatalf("set-up: release of %q: got false", e.freed)
	}
	take(e.exp, e.hA, time.Millisecond)
	waitLeaseState(t, a, e.exp, "expired")

	var run bool
	if err := a.QueryRow(ctx, `SELECT run FROM pglease.run_begin($1, $2, $3, '1 hour')`,
		e.job, e.hA, e.fence[e.job]).Scan(&run); err != nil || !run {
		t.Fatalf("set-up: run_begin(%q): got %v, %v; want true", e.job, run, err)
	}

	claim := func(scope, holder string, capacity int32, wantSlot int32) stallSlot {
		r := claimSlot(t, a, scope, holder, capacity, time.Hour)
		if !r.Claimed || *r.Slot != wantSlot {
			t.Fatalf("set-up: claim_slot(%q, %q, %d): got %s, want slot %d", scope, holder, capacity, r, wantSlot)
		}
		s := stallSlot{scope, *r.Slot, holder, *r.Fence}
		e.slots = append(e.slots, s)
		return s
	}
	claim(e.scope, e.hA, 5, 1)
	claim(e.scope, e.hR, 5, 2)
	claim(e.scope, e.keeper, 5, 3)
	claim(e.fullScope, e.hA, 1, 1)
	if s := claim(e.freeScope, e.hA, 2, 1); !releaseSlot(t, a, s.scope, s.slot, s.holder, s.fence) {
		t.Fatalf("set-up: release_slot(%q, 1): got false", s.scope)
	}

	var created bool
	if err := a.QueryRow(ctx, `SELECT created FROM pglease.group_create($1, 1, NULL)`, e.group).Scan(&created); err != nil || !created {
		t.Fatalf("set-up: group_create(%q): got %v, %v; want true", e.group, created, err)
	}
	var shards []string
	var fences []int64
	if err := a.QueryRow(ctx, `SELECT shards, fences FROM pglease.group_sync($1, $2, '1 hour', NULL)`,
		e.group, e.member).Scan(&shards, &fences); err != nil || !slices.Equal(shards, []string{"0"}) {
		t.Fatalf("set-up: group_sync(%q): got shards %q, %v; want [0]", e.group, shards, err)
	}
	e.fence[e.shard] = fences[0]
	e.holder[e.shard] = e.member
}

// hostileCall is one call role B makes on A's names and leaves open.
type hostileCall struct {
	how    string                  // what B calls, as a phrase: "observe of A's leases for 24 hours"
	sql    string                  // one statement
	args   func(e *stallEnv) []any // its arguments
	raises string                  // the SQLSTATE it raises by its contract; "" when it returns
	// global marks a call that locks rows of every name (a purge): it
	// runs alone.
	global bool
	// before, when set, runs as B before A sets up (B's own earlier
	// tenures of A's names).
	before func(t *testing.T, e *stallEnv, b *pgx.Conn)
	// owner makes the call as the owner instead of B (the harness's own
	// check that it sees a stall).
	owner bool
}

func leaseArgs(e *stallEnv) []any {
	names, holders, fences := e.liveLeases()
	return []any{names, holders, fences}
}

func wrongFenceArgs(e *stallEnv) []any {
	names, holders, fences := e.liveLeases()
	return []any{names, holders, nextFences(fences)}
}

func slotArgs(e *stallEnv) []any {
	scopes, slots, holders, fences := e.slotColumns()
	return []any{scopes, slots, holders, fences}
}

// liveNamesAndB: A's live leases but its group's shard (which B may not
// even ask for: 42501, see the shard's own call), and B's holder string.
func liveNamesAndB(e *stallEnv) []any {
	names, _, _ := e.liveLeases()
	return []any{names[:len(names)-1], e.hB}
}

func liveNamesAndHolders(e *stallEnv) []any {
	names, holders, _ := e.liveLeases()
	return []any{names[:len(names)-1], holders[:len(holders)-1]}
}

func scopesOfA(e *stallEnv) []string { return []string{e.scope, e.freeScope, e.fullScope} }

// stallSweep holds, for every function pglease_client may execute (by
// regprocedure), the calls an attacker of another role would leave open
// on the victim's names. Calls that act on several names make one
// statement of them.
var stallSweep = map[string][]hostileCall{
	"pglease.acquire(text,text,interval)": {{
		how:    "acquire of A's group's shard, which belongs to A's role",
		sql:    `SELECT a::text FROM pglease.acquire($1, $2, '1 hour') AS a`,
		args:   func(e *stallEnv) []any { return []any{e.shard, e.hB} },
		raises: "42501",
	}, {
		how:  "refused acquire of A's live leases",
		sql:  `SELECT a::text FROM unnest($1::text[]) AS u(n), pglease.acquire(u.n, $2, '1 hour') AS a`,
		args: liveNamesAndB,
	}, {
		how:  "refused acquire of A's live leases with A's holder strings",
		sql:  `SELECT a::text FROM unnest($1::text[], $2::text[]) AS u(n, h), pglease.acquire(u.n, u.h, '1 hour') AS a`,
		args: liveNamesAndHolders,
	}},
	"pglease.acquire(text,text,interval,text)": {{
		how:  "refused acquire of A's live leases with a value",
		sql:  `SELECT a::text FROM unnest($1::text[]) AS u(n), pglease.acquire(u.n, $2, '1 hour', 'b') AS a`,
		args: liveNamesAndB,
	}, {
		how:  "refused acquire of A's live leases without a value",
		sql:  `SELECT a::text FROM unnest($1::text[]) AS u(n), pglease.acquire(u.n, $2, '1 hour', NULL) AS a`,
		args: liveNamesAndB,
	}, {
		how:  "refused acquire of A's live leases with A's holder strings and a value",
		sql:  `SELECT a::text FROM unnest($1::text[], $2::text[]) AS u(n, h), pglease.acquire(u.n, u.h, '1 hour', 'b') AS a`,
		args: liveNamesAndHolders,
	}},
	"pglease.acquire_batch(text[],text,interval[],text[])": {{
		how: "refused acquire_batch of A's live leases",
		sql: `SELECT a::text FROM pglease.acquire_batch($1::text[], $2,
			array_fill('1 hour'::interval, ARRAY[cardinality($1::text[])]), NULL) AS a`,
		args: liveNamesAndB,
	}, {
		how: "refused acquire_batch of A's live leases with values",
		sql: `SELECT a::text FROM pglease.acquire_batch($1::text[], $2,
			array_fill('1 hour'::interval, ARRAY[cardinality($1::text[])]),
			array_fill('b'::text, ARRAY[cardinality($1::text[])])) AS a`,
		args: liveNamesAndB,
	}, {
		how: "refused acquire_batch of A's leases with A's holder string",
		sql: `SELECT a::text FROM pglease.acquire_batch($1::text[], $2,
			array_fill('1 hour'::interval, ARRAY[cardinality($1::text[])]), NULL) AS a`,
		args: func(e *stallEnv) []any { names, _ := e.leasesOfA(); return []any{names, e.hA} },
	}},
	"pglease.assert_held(text,bigint)": {{
		how:    "assert_held of A's live lease with A's fence",
		sql:    `SELECT pglease.assert_held($1, $2)::text`,
		args:   func(e *stallEnv) []any { return []any{e.live, e.fence[e.live]} },
		raises: "PGL01",
	}, {
		how:    "assert_held of A's expired lease with its last fence",
		sql:    `SELECT pglease.assert_held($1, $2)::text`,
		args:   func(e *stallEnv) []any { return []any{e.exp, e.fence[e.exp]} },
		raises: "PGL01",
	}},
	"pglease.claim_slot(text,text,integer,interval)": {{
		how:  "refused claim in A's full scope",
		sql:  `SELECT c::text FROM pglease.claim_slot($1, $2, 1, '1 hour') AS c`,
		args: func(e *stallEnv) []any { return []any{e.fullScope, e.hB} },
	}, {
		how:  "refused claim in A's full scope with A's holder string",
		sql:  `SELECT c::text FROM pglease.claim_slot($1, $2, 1, '1 hour') AS c`,
		args: func(e *stallEnv) []any { return []any{e.fullScope, e.hA} },
	}, {
		how:  "refused claim in A's scope with capacity 1",
		sql:  `SELECT c::text FROM pglease.claim_slot($1, $2, 1, '1 hour') AS c`,
		args: func(e *stallEnv) []any { return []any{e.scope, e.hB} },
	}},
	"pglease.claim_slot(text,text,integer,interval,integer,boolean)": {{
		how:  "refused claim of more units than are free in A's scope",
		sql:  `SELECT c::text FROM pglease.claim_slot($1, $2, 5, '1 hour', 3, false) AS c`,
		args: func(e *stallEnv) []any { return []any{e.scope, e.hB} },
	}, {
		how:  "refused claim of more units than are free in A's scope with p_wait",
		sql:  `SELECT c::text FROM pglease.claim_slot($1, $2, 5, '1 hour', 3, true) AS c`,
		args: func(e *stallEnv) []any { return []any{e.scope, e.hB} },
	}, {
		how:  "refused claim in A's full scope with p_wait",
		sql:  `SELECT c::text FROM pglease.claim_slot($1, $2, 1, '1 hour', 1, true) AS c`,
		args: func(e *stallEnv) []any { return []any{e.fullScope, e.hB} },
	}, {
		how:    "claim of more units than A's capacity in A's full scope",
		sql:    `SELECT c::text FROM pglease.claim_slot($1, $2, 2, '1 hour', 2, false) AS c`,
		args:   func(e *stallEnv) []any { return []any{e.fullScope, e.hB} },
		raises: "PGL06",
	}},
	"pglease.claim_slots(text,text[],integer[],interval)": {{
		how:  "refused claim_slots of A's scopes",
		sql:  `SELECT c::text FROM pglease.claim_slots($1, $2::text[], '{5,2,1}', '1 hour') AS c`,
		args: func(e *stallEnv) []any { return []any{e.hB, scopesOfA(e)} },
	}},
	"pglease.claim_slots(text,text[],integer[],interval,integer[],boolean)": {{
		how:  "refused claim_slots of A's scopes",
		sql:  `SELECT c::text FROM pglease.claim_slots($1, $2::text[], '{5,2,1}', '1 hour', '{1,1,1}', false) AS c`,
		args: func(e *stallEnv) []any { return []any{e.hB, scopesOfA(e)} },
	}, {
		how:  "refused claim_slots of A's scopes with p_wait",
		sql:  `SELECT c::text FROM pglease.claim_slots($1, $2::text[], '{5,2,1}', '1 hour', '{1,1,1}', true) AS c`,
		args: func(e *stallEnv) []any { return []any{e.hB, scopesOfA(e)} },
	}},
	"pglease.group_create(text,integer,text[])": {{
		how:    "group_create of A's group",
		sql:    `SELECT g::text FROM pglease.group_create($1, 1, NULL) AS g`,
		args:   func(e *stallEnv) []any { return []any{e.group} },
		raises: "42501",
	}},
	"pglease.group_leave(text,text)": {{
		how:    "group_leave of A's member",
		sql:    `SELECT g::text FROM pglease.group_leave($1, $2) AS g`,
		args:   func(e *stallEnv) []any { return []any{e.group, e.member} },
		raises: "42501",
	}},
	"pglease.group_list()": {{
		how: "group_list",
		sql: `SELECT g::text FROM pglease.group_list() AS g`,
	}},
	"pglease.group_delete(text)": {{
		how:    "group_delete of A's group",
		sql:    `SELECT g::text FROM pglease.group_delete($1) AS g`,
		args:   func(e *stallEnv) []any { return []any{e.group} },
		raises: "42501",
	}},
	"pglease.quota_usage()": {{
		how: "quota_usage",
		sql: `SELECT q::text FROM pglease.quota_usage() AS q`,
	}},
	"pglease.limit_status(integer)": {{
		how: "limit_status",
		sql: `SELECT s::text FROM pglease.limit_status(100000) AS s`,
	}},
	"pglease.owner_of(text)": {{
		how:  "owner_of A's names",
		sql:  `SELECT pglease.owner_of(u.n) FROM unnest($1::text[]) AS u(n)`,
		args: func(e *stallEnv) []any { names, _, _ := e.liveLeases(); return []any{names} },
	}},
	"pglease.group_release(text,text,text,bigint)": {{
		how:    "group_release of A's shard with A's member and fence",
		sql:    `SELECT g::text FROM pglease.group_release($1, '0', $2, $3) AS g`,
		args:   func(e *stallEnv) []any { return []any{e.group, e.member, e.fence[e.shard]} },
		raises: "42501",
	}},
	"pglease.group_status(text)": {{
		how:  "group_status of A's group",
		sql:  `SELECT g::text FROM pglease.group_status($1) AS g`,
		args: func(e *stallEnv) []any { return []any{e.group} },
	}},
	"pglease.group_sync(text,text,interval,integer)": {{
		how:    "group_sync of A's group as A's member",
		sql:    `SELECT g::text FROM pglease.group_sync($1, $2, '1 hour', NULL) AS g`,
		args:   func(e *stallEnv) []any { return []any{e.group, e.member} },
		raises: "42501",
	}, {
		how:    "group_sync of A's group as a member of B",
		sql:    `SELECT g::text FROM pglease.group_sync($1, $2, '1 hour', NULL) AS g`,
		args:   func(e *stallEnv) []any { return []any{e.group, e.hB} },
		raises: "42501",
	}},
	"pglease.metrics(text,integer)": {{
		how: "metrics of every name",
		sql: `SELECT m::text FROM pglease.metrics('', 1000000) AS m`,
	}, {
		how: "metrics with a costly expression",
		sql: `SELECT m::text FROM pglease.metrics('^(a|aa)*(b|bb)*(.*)*$', 1000000) AS m`,
	}},
	"pglease.observe(text,interval)": {{
		how:  "observe of A's leases for 24 hours",
		sql:  `SELECT o::text FROM unnest($1::text[]) AS u(n), pglease.observe(u.n, '24 hours') AS o`,
		args: func(e *stallEnv) []any { return []any{e.allLeases()} },
	}},
	"pglease.purge(interval)": {{
		how:    "purge of every free row",
		sql:    `SELECT pglease.purge('0')::text`,
		global: true,
	}, {
		how:    "purge of rows free for a day",
		sql:    `SELECT pglease.purge('24 hours')::text`,
		global: true,
	}},
	"pglease.purge_due(interval,interval)": {{
		how:    "purge_due of every free row",
		sql:    `SELECT pglease.purge_due('1 microsecond', '0')::text`,
		global: true,
	}},
	"pglease.release(text,text,bigint)": {{
		how:  "release of A's leases with A's holders and fences",
		sql:  `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f), pglease.release(u.n, u.h, u.f) AS r`,
		args: leaseArgs,
	}, {
		how:  "release of A's leases with wrong fences",
		sql:  `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f), pglease.release(u.n, u.h, u.f) AS r`,
		args: wrongFenceArgs,
	}},
	"pglease.release_after(text,text,bigint,interval)": {{
		how: "release_after of A's leases with A's holders and fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f),
			pglease.release_after(u.n, u.h, u.f, '1 hour') AS r`,
		args: leaseArgs,
	}},
	"pglease.release_batch(text[],text,bigint[])": {{
		how:  "release_batch of A's leases with A's holder and fences",
		sql:  `SELECT r::text FROM pglease.release_batch($1, $2, $3) AS r`,
		args: func(e *stallEnv) []any { names, fences := e.leasesOfA(); return []any{names, e.hA, fences} },
	}},
	"pglease.release_slot(text,integer,text,bigint)": {{
		how: "release_slot of A's slots with A's holders and fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::integer[], $3::text[], $4::bigint[]) AS u(s, n, h, f),
			pglease.release_slot(u.s, u.n, u.h, u.f) AS r`,
		args: slotArgs,
	}},
	"pglease.renew(text,text,bigint,interval)": {{
		how: "renew of A's leases with A's holders and fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f),
			pglease.renew(u.n, u.h, u.f, '1 hour') AS r`,
		args: leaseArgs,
	}, {
		how: "renew of A's leases with wrong fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f),
			pglease.renew(u.n, u.h, u.f, '1 hour') AS r`,
		args: wrongFenceArgs,
	}},
	"pglease.renew_holder(text,interval)": {{
		how:  "renew_holder of A's holder strings",
		sql:  `SELECT r::text FROM unnest($1::text[]) AS u(h), pglease.renew_holder(u.h, '1 hour') AS r`,
		args: func(e *stallEnv) []any { return []any{e.holdersOfA()} },
	}},
	"pglease.renew_lease(text,text,bigint,interval)": {{
		how: "renew_lease of A's leases with A's holders and fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f),
			pglease.renew_lease(u.n, u.h, u.f, '1 hour') AS r`,
		args: leaseArgs,
	}},
	"pglease.renew_slot(text,integer,text,bigint,interval)": {{
		how: "renew_slot of A's slots with A's holders and fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::integer[], $3::text[], $4::bigint[]) AS u(s, n, h, f),
			pglease.renew_slot(u.s, u.n, u.h, u.f, '1 hour') AS r`,
		args: slotArgs,
	}},
	"pglease.run_begin(text,text,bigint,interval)": {{
		how:    "run_begin on A's lease with A's holder and fence",
		sql:    `SELECT r::text FROM pglease.run_begin($1, $2, $3, '1 hour') AS r`,
		args:   func(e *stallEnv) []any { return []any{e.job, e.hA, e.fence[e.job]} },
		raises: "42501",
	}, {
		how:    "run_begin on A's lease with a wrong fence",
		sql:    `SELECT r::text FROM pglease.run_begin($1, $2, $3, '1 hour') AS r`,
		args:   func(e *stallEnv) []any { return []any{e.job, e.hA, e.fence[e.job] + 1} },
		raises: "PGL01",
	}},
	"pglease.run_end(text,text,bigint,integer)": {{
		how:    "run_end of A's run",
		sql:    `SELECT r::text FROM pglease.run_end($1, $2, $3, 0) AS r`,
		args:   func(e *stallEnv) []any { return []any{e.job, e.hA, e.fence[e.job]} },
		raises: "42501",
	}, {
		// B's run under its own earlier tenure of the name A now holds:
		// run_end records it lost, on A's tenure.
		how:  "run_end of B's own run under an earlier tenure of A's lease",
		sql:  `SELECT r::text FROM pglease.run_end($1, $2, $3, 0) AS r`,
		args: func(e *stallEnv) []any { return []any{e.live, e.hB, e.bFence} },
		before: func(t *testing.T, e *stallEnv, b *pgx.Conn) {
			r := acquire(t, b, e.live, e.hB, time.Hour)
			if !r.Acquired {
				t.Fatalf("set-up: B's acquire of %q: refused", e.live)
			}
			e.bFence = r.Fence
			mustExec(t, b, `SELECT pglease.run_begin($1, $2, $3, '1 hour')`, e.live, e.hB, r.Fence)
			if !release(t, b, e.live, e.hB, r.Fence) {
				t.Fatalf("set-up: B's release of %q: got false", e.live)
			}
		},
	}},
	"pglease.run_history(text,integer)": {{
		how:  "run_history of A's leases",
		sql:  `SELECT r::text FROM unnest($1::text[]) AS u(n), pglease.run_history(u.n, 10000) AS r`,
		args: func(e *stallEnv) []any { return []any{e.allLeases()} },
	}},
	"pglease.run_summary(text,integer)": {{
		how: "run_summary of every job",
		sql: `SELECT r::text FROM pglease.run_summary('', 1000000) AS r`,
	}},
	"pglease.set_value(text,text,bigint,text)": {{
		how: "set_value of A's leases with A's holders and fences",
		sql: `SELECT r::text FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(n, h, f),
			pglease.set_value(u.n, u.h, u.f, 'b') AS r`,
		args: leaseArgs,
	}},
	"pglease.version()": {{
		how: "version",
		sql: `SELECT pglease.version()`,
	}},
	// Rate limits (0.4.0, #51): A's names have no limit, and a client sets
	// none on shared names; a limit's row is never one of A's tenures.
	"pglease.take(text,integer)": {{
		how:    "take of A's lease names as keys",
		sql:    `SELECT t::text FROM unnest($1::text[]) AS u(n), pglease.take(u.n, 1) AS t`,
		args:   func(e *stallEnv) []any { return []any{e.allLeases()} },
		raises: "PGL20",
	}},
	"pglease.peek(text)": {{
		how:    "peek of A's lease names as keys",
		sql:    `SELECT t::text FROM unnest($1::text[]) AS u(n), pglease.peek(u.n) AS t`,
		args:   func(e *stallEnv) []any { return []any{e.allLeases()} },
		raises: "PGL20",
	}},
	"pglease.take_wait(text,integer,interval)": {{
		how:    "take_wait of A's lease names as keys",
		sql:    `SELECT t::text FROM unnest($1::text[]) AS u(n), pglease.take_wait(u.n, 1, '1 second') AS t`,
		args:   func(e *stallEnv) []any { return []any{e.allLeases()} },
		raises: "PGL20",
	}},
	"pglease.limit_set(text,integer,interval,integer,boolean)": {{
		how:    "limit_set of A's scope as a shared name",
		sql:    `SELECT pglease.limit_set($1, 1, '1 hour', 1, false)::text`,
		args:   func(e *stallEnv) []any { return []any{e.scope} },
		raises: "42501",
	}},
	"pglease.limit_unset(text)": {{
		how:    "limit_unset of A's scope as a shared name",
		sql:    `SELECT pglease.limit_unset($1)::text`,
		args:   func(e *stallEnv) []any { return []any{e.scope} },
		raises: "42501",
	}},
	"pglease.limit_reset(text)": {{
		how:    "limit_reset of A's live lease as a shared key",
		sql:    `SELECT pglease.limit_reset($1)::text`,
		args:   func(e *stallEnv) []any { return []any{e.live} },
		raises: "42501",
	}},
	"pglease.reserve(text,integer,interval)": {{
		how:    "reserve of A's lease names as keys",
		sql:    `SELECT r::text FROM unnest($1::text[]) AS u(n), pglease.reserve(u.n, 1, '1 hour') AS r`,
		args:   func(e *stallEnv) []any { return []any{e.allLeases()} },
		raises: "PGL20",
	}},
	"pglease.reserve_all(text[],integer,interval)": {{
		how:    "reserve_all of A's lease names as keys",
		sql:    `SELECT r::text FROM pglease.reserve_all($1, 1, '1 hour') AS r`,
		args:   func(e *stallEnv) []any { return []any{e.allLeases()} },
		raises: "PGL20",
	}},
	"pglease.settle(text,bigint,integer)": {{
		how:    "settle of A's lease names as keys, with A's fences as reservations",
		sql:    `SELECT r::text FROM unnest($1::text[], $2::bigint[]) AS u(n, f), pglease.settle(u.n, u.f, 0) AS r`,
		args:   func(e *stallEnv) []any { names, _, fences := e.liveLeases(); return []any{names, fences} },
		raises: "PGL20",
	}},
	"pglease.tenures(text,timestamp with time zone)": {{
		how:  "read of the tenure history of A's names",
		sql:  `SELECT count(*)::text FROM unnest($1::text[]) AS u(n), pglease.tenures(u.n, NULL) AS h`,
		args: func(e *stallEnv) []any { return []any{append(e.allLeases(), scopesOfA(e)...)} },
	}},
	"pglease.tenure_ends()": {{
		how: "read of the tenures ended",
		sql: `SELECT string_agg(e::text, ',') FROM pglease.tenure_ends() AS e`,
	}},
	"pglease.history_enable(text,interval)": {{
		how:    "history_enable of A's names (shared: the owner's)",
		sql:    `SELECT pglease.history_enable($1, '1 microsecond')::text`,
		args:   func(e *stallEnv) []any { return []any{e.live} },
		raises: "42501",
	}},
	"pglease.history_disable(text)": {{
		how:    "history_disable of A's names",
		sql:    `SELECT pglease.history_disable($1)::text`,
		args:   func(e *stallEnv) []any { return []any{e.live} },
		raises: "42501",
	}},
	"pglease.claim_and_take(text,text,integer,interval,integer,text[],integer[])": {{
		how:    "claim_and_take of A's full scope with a key without a limit",
		sql:    `SELECT c::text FROM pglease.claim_and_take($1, $2, 1, '1 hour', 1, ARRAY[$1], NULL) AS c`,
		args:   func(e *stallEnv) []any { return []any{e.fullScope, e.hB} },
		raises: "PGL20",
	}},
}

// ownerLocksEveryRow checks the harness: the owner locks every row of A's
// names, and every call of A's must be reported as delayed by it.
var ownerLocksEveryRow = hostileCall{
	how: "lock of every row of A's names",
	sql: `WITH l AS (SELECT 1 FROM pglease.leases WHERE name = ANY ($1) FOR UPDATE),
		       s AS (SELECT 1 FROM pglease.slot_scopes WHERE scope = ANY ($2) FOR UPDATE),
		       o AS (SELECT 1 FROM pglease.slots WHERE scope = ANY ($2) FOR UPDATE)
		  SELECT format('%s leases, %s scopes, %s slots locked',
		                (SELECT count(*) FROM l), (SELECT count(*) FROM s), (SELECT count(*) FROM o))`,
	args:  func(e *stallEnv) []any { return []any{e.allLeases(), scopesOfA(e)} },
	owner: true,
}

// victimCall is one call of role A (or of the owner) that no hostile call
// left open may delay. It returns nil when the call did what its contract
// says for A's state.
type victimCall struct {
	what  string
	owner bool
	call  func(ctx context.Context, q querier, e *stallEnv) error
}

var victimCalls = []victimCall{
	{what: "renew of its live lease", call: func(ctx context.Context, q querier, e *stallEnv) error {
		var renewed bool
		if err := q.QueryRow(ctx, `SELECT renewed FROM pglease.renew($1, $2, $3, '1 hour')`,
			e.live, e.hA, e.fence[e.live]).Scan(&renewed); err != nil {
			return err
		}
		return wantTrue("renewed", renewed)
	}},
	{what: "release of a held lease", call: func(ctx context.Context, q querier, e *stallEnv) error {
		var released bool
		if err := q.QueryRow(ctx, `SELECT released FROM pglease.release($1, $2, $3)`,
			e.rel, e.hA, e.fence[e.rel]).Scan(&released); err != nil {
			return err
		}
		return wantTrue("released", released)
	}},
	{what: "takeover of its expired lease", call: func(ctx context.Context, q querier, e *stallEnv) error {
		return wantGrant(ctx, q, e.exp, e.hA+"-taker", e.fence[e.exp]+1)
	}},
	{what: "acquire of a released lease", call: func(ctx context.Context, q querier, e *stallEnv) error {
		return wantGrant(ctx, q, e.freed, e.hA+"-taker", e.fence[e.freed]+1)
	}},
	{what: "refused acquire with a value (a waiter)", call: func(ctx context.Context, q querier, e *stallEnv) error {
		var acquired bool
		var holder string
		if err := q.QueryRow(ctx, `SELECT acquired, holder FROM pglease.acquire($1, $2, '1 hour', 'a')`,
			e.waited, e.hA).Scan(&acquired, &holder); err != nil {
			return err
		}
		if acquired || holder != e.hW {
			return fmt.Errorf("acquired = %v, holder %q; want refused by %q", acquired, holder, e.hW)
		}
		return nil
	}},
	{what: "claim beside its live slots", call: func(ctx context.Context, q querier, e *stallEnv) error {
		return wantClaim(ctx, q, e.scope, e.hA+"-claimer", 5, true)
	}},
	{what: "claim in a free scope", call: func(ctx context.Context, q querier, e *stallEnv) error {
		return wantClaim(ctx, q, e.freeScope, e.hA+"-claimer", 2, true)
	}},
	{what: "refused claim in a full scope (a waiter)", call: func(ctx context.Context, q querier, e *stallEnv) error {
		return wantClaim(ctx, q, e.fullScope, e.hA+"-claimer", 1, false)
	}},
	{what: "renew_slot", call: func(ctx context.Context, q querier, e *stallEnv) error {
		s := e.slots[0]
		var renewed bool
		if err := q.QueryRow(ctx, `SELECT renewed FROM pglease.renew_slot($1, $2, $3, $4, '1 hour')`,
			s.scope, s.slot, s.holder, s.fence).Scan(&renewed); err != nil {
			return err
		}
		return wantTrue("renewed", renewed)
	}},
	{what: "release_slot", call: func(ctx context.Context, q querier, e *stallEnv) error {
		s := e.slots[1]
		var released bool
		if err := q.QueryRow(ctx, `SELECT released FROM pglease.release_slot($1, $2, $3, $4)`,
			s.scope, s.slot, s.holder, s.fence).Scan(&released); err != nil {
			return err
		}
		return wantTrue("released", released)
	}},
	{what: "renew_holder", call: func(ctx context.Context, q querier, e *stallEnv) error {
		var leases, scopes []string
		var slots []int32
		if err := q.QueryRow(ctx, `SELECT leases, slot_scopes, slots FROM pglease.renew_holder($1, '1 hour')`,
			e.keeper).Scan(&leases, &scopes, &slots); err != nil {
			return err
		}
		if !slices.Equal(leases, []string{e.kept}) || !slices.Equal(scopes, []string{e.scope}) || !slices.Equal(slots, []int32{3}) {
			return fmt.Errorf("renewed leases %q, slots %q %v; want [%q] and slot 3 of %q", leases, scopes, slots, e.kept, e.scope)
		}
		return nil
	}},
	{what: "renewal of its shard (group_sync)", call: func(ctx context.Context, q querier, e *stallEnv) error {
		var shards []string
		if err := q.QueryRow(ctx, `SELECT shards FROM pglease.group_sync($1, $2, '1 hour', NULL)`,
			e.group, e.member).Scan(&shards); err != nil {
			return err
		}
		if !slices.Equal(shards, []string{"0"}) {
			return fmt.Errorf("shards %q, want [0]", shards)
		}
		return nil
	}},
	{what: "lease's force_release by the owner", owner: true, call: func(ctx context.Context, q querier, e *stallEnv) error {
		var released bool
		if err := q.QueryRow(ctx, `SELECT released FROM pglease.force_release($1)`, e.forced).Scan(&released); err != nil {
			return err
		}
		return wantTrue("released", released)
	}},
}

func wantTrue(what string, got bool) error {
	if !got {
		return fmt.Errorf("%s = false, want true", what)
	}
	return nil
}

func wantGrant(ctx context.Context, q querier, name, holder string, fence int64) error {
	r, err := tryAcquire(ctx, q, name, holder, time.Hour)
	if err != nil {
		return err
	}
	if !r.Acquired || r.Fence != fence {
		return fmt.Errorf("acquired = %v, fence %d (holder %q); want a grant with fence %d", r.Acquired, r.Fence, r.Holder, fence)
	}
	return nil
}

func wantClaim(ctx context.Context, q querier, scope, holder string, capacity int32, claimed bool) error {
	r, err := tryClaimSlot(ctx, q, scope, holder, capacity, time.Hour)
	if err != nil {
		return err
	}
	if r.Claimed != claimed {
		return fmt.Errorf("got %s, want claimed = %v", r, claimed)
	}
	return nil
}

// testStall sets up A's state, makes hostile call h as B (or the owner)
// in a transaction it leaves open, and makes every call of victimCalls
// meanwhile.
func testStall(t *testing.T, db *testDB, h hostileCall) {
	adminURL := pgtest.AdminURL(t)
	a := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	b := connectAs(t, db.url, createLoginRole(t, adminURL, db.url, true))
	owner := connect(t, db.url)
	e := newStallEnv(t)
	// Every name of the sweep has its tenure history on (0.4.0, #52): the
	// history's writes must delay nobody either.
	mustExec(t, owner, `SELECT pglease.history_enable($1, '1 day'), pglease.history_enable($2, '1 day')`,
		t.Name()+"/", "{"+e.group+"}/")
	if h.before != nil {
		h.before(t, e, b)
	}
	setUpVictim(t, e, a)

	attacker, who := b, "B"
	if h.owner {
		attacker, who = connect(t, db.url), "the owner"
	}
	ctx := testContext(t)
	tx, err := attacker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for _, sql := range []string{
		`SET LOCAL statement_timeout = 0`,
		`SET LOCAL idle_in_transaction_session_timeout = 0`,
		`SET LOCAL lock_timeout = 0`,
	} {
		mustExec(t, tx, sql)
	}
	var args []any
	if h.args != nil {
		args = h.args(e)
	}
	got, err := hostile(t, tx, h.sql, args)
	switch {
	case err != nil && pgCode(err) == h.raises:
		t.Logf("%s's %s raised %s (its transaction holds nothing now): %v", who, h.how, h.raises, err)
	case err != nil:
		t.Fatalf("%s's %s: got %v, want %s: the sweep would not test the call it names", who, h.how, err, raisesWhat(h.raises))
	case h.raises != "":
		t.Fatalf("%s's %s: got %s, want SQLSTATE %s: the sweep would not test the call it names", who, h.how, got, h.raises)
	default:
		t.Logf("%s's %s returned %s", who, h.how, got)
	}

	attackerPID := attacker.PgConn().PID()
	mustExec(t, a, `SET lock_timeout = '100ms'`)
	mustExec(t, owner, `SET lock_timeout = '100ms'`)
	var delayed []string
	for _, v := range victimCalls {
		conn := a
		if v.owner {
			conn = owner
		}
		callCtx, cancel := callContext(t)
		err := v.call(callCtx, conn, e)
		cancel()
		switch {
		case err == nil:
		case pgCode(err) == "55P03":
			if blocked, detail := retryBlockedBy(t, db, conn, attackerPID, func(ctx context.Context, q querier) error {
				return v.call(ctx, q, e)
			}); !blocked {
				t.Errorf("A's %s failed while %s's %s was open: %v; but %s", v.what, who, h.how, err, detail)
			} else if h.owner {
				delayed = append(delayed, v.what)
			} else {
				t.Errorf("%s's %s left open delays A's %s: %v (A's backend waits on %s's, pg_blocking_pids says)",
					who, h.how, v.what, err, who)
			}
		default:
			t.Errorf("A's %s while %s's %s is open: %v; want success", v.what, who, h.how, err)
		}
	}
	if h.owner && len(delayed) != len(victimCalls) {
		t.Errorf("harness: the owner's %s delayed only %q of A's %d calls; want every one reported",
			h.how, delayed, len(victimCalls))
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}

func raisesWhat(code string) string {
	if code == "" {
		return "no error"
	}
	return "SQLSTATE " + code
}

// hostile runs one statement in tx and returns its rows as text, cut
// short for the log.
func hostile(t *testing.T, tx pgx.Tx, sql string, args []any) (string, error) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return "", err
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[*string])
	if err != nil {
		return "", err
	}
	var parts []string
	for _, s := range got {
		parts = append(parts, ptrString(s))
	}
	out := fmt.Sprintf("%d rows: %s", len(got), strings.Join(parts, "; "))
	if len(out) > 400 {
		out = out[:400] + "..."
	}
	return out, nil
}

// retryBlockedBy makes call again on conn, allowed to wait 10 s for a
// lock, and reports whether its backend then waits on a lock held by
// backend blocker (pg_stat_activity and pg_blocking_pids); if it does,
// the call is cancelled (pg_cancel_backend) and changes nothing. detail
// says what happened otherwise.
func retryBlockedBy(t *testing.T, db *testDB, conn *pgx.Conn, blocker uint32,
	call func(ctx context.Context, q querier) error) (blocked bool, detail string) {
	t.Helper()
	mustExec(t, conn, `SET lock_timeout = '1min'`)
	defer mustExec(t, conn, `SET lock_timeout = '100ms'`)
	pid := conn.PgConn().PID()
	// The retry ends when it is cancelled below, after at most 15 s of
	// looking: its context must outlast that, however slow the machine.
	ctx := testContext(t)
	done := make(chan error, 1)
	go func() { done <- call(ctx, conn) }()
	var ended bool
	var endErr error
	waitFor(t, 15*time.Second, fmt.Sprintf("backend %d to end its call or wait on backend %d", pid, blocker), func() (bool, error) {
		select {
		case endErr = <-done:
			ended = true
			return true, nil
		default:
		}
		var waits bool
		err := db.pool.QueryRow(ctx, `SELECT coalesce(a.wait_event_type = 'Lock', false)
				AND $2::integer = ANY (pg_catalog.pg_blocking_pids(a.pid))
			FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = $1`, int64(pid), int64(blocker)).Scan(&waits)
		return waits, err
	})
	if ended {
		return false, fmt.Sprintf("the same call again, allowed to wait, did not wait on backend %d (it returned %v)", blocker, endErr)
	}
	var signalled bool
	if err := db.pool.QueryRow(ctx, `SELECT pg_catalog.pg_cancel_backend($1)`, int64(pid)).Scan(&signalled); err != nil {
		t.Fatalf("cancel the retry: %v", err)
	}
	select {
	case err := <-done:
		if pgCode(err) != "57014" {
			t.Fatalf("the retry, cancelled while it waited on backend %d: got %v, want SQLSTATE 57014", blocker, err)
		}
	case <-time.After(15 * time.Second):
		var state string
		_ = db.pool.QueryRow(ctx, `SELECT format('state %s, wait %s/%s, blocked by %s, query %s',
				a.state, a.wait_event_type, a.wait_event, pg_catalog.pg_blocking_pids(a.pid), a.query)
			FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = $1`, int64(pid)).Scan(&state)
		t.Fatalf("the retry still runs 15 s after pg_cancel_backend(%d) (signal sent: %v): %s", pid, signalled, state)
	}
	return true, ""
}
