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

// TestTenureHistory: the tenure history of #52 (docs/tenure-history.md):
// one row per tenure written by the statements that grant and end it,
// how each ended, nothing on renewal, the database's own refusal of an
// overlap or a fence out of order (as the owner, too), who may read, turn
// on and delete it, and that a history write delays nobody else.
func TestTenureHistory(t *testing.T) {
	t.Parallel()
	// EveryEnd purges every free row: it runs on a database of its own.
	runGroup(t, 2, []subtest{{"EveryEnd", testHistoryEveryEnd}})
	// Archive turns archiving on for the whole database: one of its own.
	runGroup(t, 4, []subtest{{"Archive", testHistoryArchive}})
	runGroup(t, 8, []subtest{
		{"Slots", testHistorySlots},
		{"RenewWritesNothing", testHistoryRenewWritesNothing},
		{"ForgedOverlapRefused", testHistoryForgedOverlapRefused},
		{"ClientCannotWriteOrForge", testHistoryClientCannotWrite},
		{"WhoTurnsItOn", testHistoryWhoTurnsItOn},
		{"OperatorRefused", testHistoryOperatorRefused},
		{"OpenGrantDelaysNobody", testHistoryOpenGrantDelaysNobody},
		{"Retention", testHistoryRetention},
		{"OffWritesNothing", testHistoryOffWritesNothing},
	})
}

type tenureRow struct {
	Slot       *int32
	Fence      int64
	Holder     string
	Units      *int32
	GrantedAt  time.Time
	EndedAt    *time.Time
	EndedHow   *string
	ExpiresAt  *time.Time
	HolderRole *string
}

func tenures(t testing.TB, q querier, name string) []tenureRow {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	rows, err := q.Query(ctx, `SELECT slot, fence, holder, units, granted_at, ended_at, ended_how, expires_at, holder_role
		FROM pglease.tenures($1, NULL)`, name)
	if err != nil {
		t.Fatalf("tenures(%q): %v", name, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (tenureRow, error) {
		var v tenureRow
		err := r.Scan(&v.Slot, &v.Fence, &v.Holder, &v.Units, &v.GrantedAt, &v.EndedAt, &v.EndedHow, &v.ExpiresAt, &v.HolderRole)
		return v, err
	})
	if err != nil {
		t.Fatalf("tenures(%q): %v", name, err)
	}
	return out
}

func (r tenureRow) String() string {
	return fmt.Sprintf("fence %d %s %s", r.Fence, r.Holder, ptrString(r.EndedHow))
}

func historyOn(t testing.TB, q querier, prefix string) {
	t.Helper()
	mustExec(t, q, `SELECT pglease.history_enable($1, '30 days')`, prefix)
}

func requireEnds(t testing.TB, got []tenureRow, want ...string) {
	t.Helper()
	var g []string
	for _, r := range got {
		g = append(g, fmt.Sprintf("%d:%s:%s", r.Fence, r.Holder, ptrString(r.EndedHow)))
	}
	if strings.Join(g, " ") != strings.Join(want, " ") {
		t.Fatalf("tenures:\ngot  %s\nwant %s", strings.Join(g, " "), strings.Join(want, " "))
	}
}

// testHistoryEveryEnd: each way a lease's tenure ends, in order, with
// ended_at the release (or the expiry) and the counters of tenure_ends.
func testHistoryEveryEnd(t *testing.T, db *testDB) {
	n := namer(t)
	name := n("lease")
	historyOn(t, db.pool, n(""))
	ends := func() map[string]int64 {
		m := map[string]int64{}
		rows, err := db.pool.Query(testContext(t), `SELECT ended_how, tenures FROM pglease.tenure_ends()`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var how string
			var c int64
			if err := rows.Scan(&how, &c); err != nil {
				t.Fatal(err)
			}
			m[how] = c
		}
		return m
	}
	before := ends()

	mustAcquire(t, db.pool, name, "a", time.Hour, 1)
	if !release(t, db.pool, name, "a", 1) {
		t.Fatal("release: got false")
	}
	mustAcquire(t, db.pool, name, "b", time.Millisecond, 2)
	waitLeaseState(t, db.pool, name, "expired")
	mustAcquire(t, db.pool, name, "c", time.Hour, 3) // b taken over
	mustExec(t, db.pool, `SELECT pglease.force_release($1)`, name)
	mustAcquire(t, db.pool, name, "c", time.Hour, 4)
	mustExec(t, db.pool, `SELECT pglease.request_release($1, NULL, '1 second')`, name)
	if !release(t, db.pool, name, "c", 4) {
		t.Fatal("release on request: got false")
	}
	mustAcquire(t, db.pool, name, "c", time.Millisecond, 5)
	waitLeaseState(t, db.pool, name, "expired")
	mustAcquire(t, db.pool, name, "c", time.Hour, 6) // its own, again: expired
	got := tenures(t, db.pool, name)
	requireEnds(t, got, "1:a:released", "2:b:taken_over", "3:c:forced", "4:c:handed_over", "5:c:expired", "6:c:NULL")
	for i, r := range got[:5] {
		if r.EndedAt == nil || r.EndedAt.Before(r.GrantedAt) || r.EndedAt.After(got[i+1].GrantedAt) {
			t.Fatalf("tenure %s: ended at %v, want between its grant %v and the next grant %v",
				r, r.EndedAt, r.GrantedAt, got[i+1].GrantedAt)
		}
	}
	if got[5].ExpiresAt == nil || got[5].EndedAt != nil {
		t.Fatalf("open tenure: got ended_at %v expires_at %v, want NULL and its expiry", got[5].EndedAt, got[5].ExpiresAt)
	}
	after := ends()
	for _, how := range []string{"released", "taken_over", "forced", "handed_over", "expired"} {
		if after[how]-before[how] < 1 {
			t.Errorf("tenure_ends %s: got %d more, want at least 1", how, after[how]-before[how])
		}
	}

	// A purge of the row ends the open tenure of an expired lease, and of
	// each expired slot of a scope (one statement for both slots).
	purged := n("purged")
	mustAcquire(t, db.pool, purged, "p", time.Millisecond, 1)
	waitLeaseState(t, db.pool, purged, "expired")
	scope := n("purged-scope")
	mustClaimSlot(t, db.pool, scope, "s", 2, 500*time.Millisecond, 1, 1)
	mustClaimSlot(t, db.pool, scope, "t", 2, 500*time.Millisecond, 2, 1)
	waitSlotState(t, db.pool, scope, 1, "expired")
	waitSlotState(t, db.pool, scope, 2, "expired")
	mustExec(t, db.pool, `SELECT pglease.purge('0')`)
	requireEnds(t, tenures(t, db.pool, purged), "1:p:purged")
	requireEnds(t, tenures(t, db.pool, scope), "1:s:purged", "1:t:purged")
	if got := ends()["purged"] - after["purged"]; got != 3 {
		t.Errorf("tenure_ends purged: got %d more, want 3", got)
	}
}

// testHistorySlots: per slot, with units.
func testHistorySlots(t *testing.T, db *testDB) {
	n := namer(t)
	scope := n("scope")
	historyOn(t, db.pool, scope)
	r1 := mustClaimSlot(t, db.pool, scope, "a", 2, time.Hour, 1, 1)
	mustClaimSlot(t, db.pool, scope, "b", 2, time.Millisecond, 2, 1)
	waitSlotState(t, db.pool, scope, 2, "expired")
	if !releaseSlot(t, db.pool, scope, 1, "a", *r1.Fence) {
		t.Fatal("release_slot: got false")
	}
	mustClaimSlot(t, db.pool, scope, "c", 2, time.Hour, 2, 2) // b's slot, run out
	got := tenures(t, db.pool, scope)
	var g []string
	for _, r := range got {
		g = append(g, fmt.Sprintf("%s/%d:%s:%s:%s", ptrString(r.Slot), r.Fence, r.Holder, ptrString(r.Units), ptrString(r.EndedHow)))
	}
	want := "1/1:a:1:released 2/1:b:1:taken_over 2/2:c:1:NULL"
	if strings.Join(g, " ") != want {
		t.Fatalf("slot tenures:\ngot  %s\nwant %s", strings.Join(g, " "), want)
	}
}

// testHistoryRenewWritesNothing: renewals of a lease and a slot change no
// history row (not even its row version) and add none.
func testHistoryRenewWritesNothing(t *testing.T, db *testDB) {
	n := namer(t)
	historyOn(t, db.pool, n(""))
	mustAcquire(t, db.pool, n("l"), "h", time.Hour, 1)
	c := mustClaimSlot(t, db.pool, n("s"), "h", 1, time.Hour, 1, 1)
	snapshot := func() string {
		var s string
		mustScanHistory(t, db.pool, `SELECT string_agg(ctid::text || xmin::text, ',' ORDER BY name, slot, fence)
			FROM pglease.tenures WHERE starts_with(name, $1)`, n(""), &s)
		return s
	}
	before := snapshot()
	for range 5 {
		if r := renew(t, db.pool, n("l"), "h", 1, time.Hour); !r.Renewed {
			t.Fatal("renew: got false")
		}
		if r := renewSlot(t, db.pool, n("s"), 1, "h", *c.Fence, time.Hour); !r.Renewed {
			t.Fatal("renew_slot: got false")
		}
		mustExec(t, db.pool, `SELECT pglease.renew_holder('h', '1 hour')`)
		mustAcquire(t, db.pool, n("l"), "h", time.Hour, 1) // a re-acquire is a renewal too
	}
	if after := snapshot(); after != before {
		t.Fatalf("history rows after renewals:\ngot  %s\nwant %s (unchanged)", after, before)
	}
}

func mustScanHistory(t testing.TB, q querier, sql string, arg any, dst any) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	if err := q.QueryRow(ctx, sql, arg).Scan(dst); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// testHistoryForgedOverlapRefused: the schema owner, bypassing the
// functions, makes a second holder while the first is live: the
// exclusion constraint fails the statement and the lease keeps its
// holder. A row with a fence out of order fails too (23514), and so does
// an overlapping row written straight into the history.
func testHistoryForgedOverlapRefused(t *testing.T, db *testDB) {
	n := namer(t)
	name := n("lease")
	historyOn(t, db.pool, n(""))
	mustAcquire(t, db.pool, name, "a", time.Hour, 1)
	ctx := testContext(t)
	_, err := db.pool.Exec(ctx, `UPDATE pglease.leases SET holder = 'forger', fence = fence + 1,
		acquired_at = clock_timestamp(), expires_at = clock_timestamp() + interval '1 hour' WHERE name = $1`, name)
	requirePgError(t, err, "23P01", "tenures_no_overlap")
	if st := mustLeaseStatus(t, db.pool, name); st.Holder == nil || *st.Holder != "a" || st.Fence != 1 {
		t.Fatalf("lease after the refused forgery: got holder %s fence %d, want a, 1", ptrString(st.Holder), st.Fence)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at)
		VALUES ($1, 0, 7, 'forger', clock_timestamp())`, name)
	requirePgError(t, err, "23P01", "with fence 1, which is still open")
	_, err = db.pool.Exec(ctx, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at, ended_at, ended_how)
		VALUES ($1, 0, 8, 'forger', clock_timestamp() + interval '1 day', clock_timestamp() + interval '2 days', 'released')`, name)
	requirePgError(t, err, "23P01", "with fence 1, which is still open")
	// Without the trigger, the unique index still allows one open tenure.
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `ALTER TABLE pglease.tenures DISABLE TRIGGER tenure_order`); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at)
		VALUES ($1, 0, 7, 'forger', clock_timestamp())`, name)
	requirePgError(t, err, "23505", "tenures_one_open")
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = db.pool.Exec(ctx, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at, ended_at, ended_how)
		VALUES ($1, 0, 9, 'forger', '2000-01-01', '2000-01-02', 'released')`, name)
	requirePgError(t, err, "23514", "fence 9")
	_, err = db.pool.Exec(ctx, `UPDATE pglease.tenures SET granted_at = granted_at - interval '1 day' WHERE name = $1`, name)
	if err != nil {
		t.Fatalf("moving the only tenure's grant earlier: %v", err) // nothing out of order with one row
	}
	requireEnds(t, tenures(t, db.pool, name), "1:a:NULL")

	// An open tenure below a later one overlaps it: its range runs on.
	forged := n("forged")
	mustExec(t, db.pool, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at, ended_at, ended_how)
		VALUES ($1, 0, 5, 'forger', clock_timestamp() + interval '1 day', clock_timestamp() + interval '2 days', 'released')`, forged)
	_, err = db.pool.Exec(ctx, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at)
		VALUES ($1, 0, 3, 'forger', clock_timestamp())`, forged)
	requirePgError(t, err, "23P01", "is open, and overlaps the later tenure with fence 5")
}

// testHistoryClientCannotWrite: a client reads the history through
// pglease.tenures only, and cannot write, delete or forge a row.
func testHistoryClientCannotWrite(t *testing.T, db *testDB) {
	n := namer(t)
	historyOn(t, db.pool, n(""))
	mustAcquire(t, db.pool, n("l"), "h", time.Hour, 1)
	client := connectAs(t, db.url, createLoginRole(t, pgtest.AdminURL(t), db.url, true))
	ctx := testContext(t)
	for _, sql := range []string{
		`SELECT * FROM pglease.tenures`,
		`INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at) VALUES ('x', 0, 1, 'x', now())`,
		`UPDATE pglease.tenures SET ended_how = 'forced'`,
		`DELETE FROM pglease.tenures`,
		`DELETE FROM pglease.history_prefixes`,
		`SELECT pglease.history_delete('` + n("") + `', NULL)`,
		`SELECT pglease._tenure_forced('` + n("l") + `', 0, 1)`,
	} {
		if _, err := client.Exec(ctx, sql); pgCode(err) != "42501" {
			t.Errorf("%s as a client: got %v, want SQLSTATE 42501", sql, err)
		}
	}
	requireEnds(t, tenures(t, client, n("l")), "1:h:NULL")
}

// testHistoryWhoTurnsItOn: a client may turn on or off only prefixes
// inside one bound to its role; the owner any; history_delete is the
// owner's.
func testHistoryWhoTurnsItOn(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	role := createLoginRole(t, adminURL, db.url, true)
	client := connectAs(t, db.url, role)
	mustExec(t, db.pool, `SELECT pglease.prefix_bind($1, $2)`, n("svc/"), role.name)
	ctx := testContext(t)
	for _, p := range []string{n("shared/"), n("svc"), n("")} {
		_, err := client.Exec(ctx, `SELECT pglease.history_enable($1, '1 day')`, p)
		requirePgError(t, err, "42501", "pglease.history_enable")
		_, err = client.Exec(ctx, `SELECT pglease.history_disable($1)`, p)
		requirePgError(t, err, "42501", "pglease.history_disable")
	}
	mustExec(t, client, `SELECT pglease.history_enable($1, '1 day')`, n("svc/"))
	mustExec(t, client, `SELECT pglease.history_enable($1, '2 days')`, n("svc/jobs/"))
	mustAcquire(t, client, n("svc/jobs/a"), "h", time.Hour, 1)
	requireEnds(t, tenures(t, client, n("svc/jobs/a")), "1:h:NULL")
	var prev *time.Duration
	mustScanHistory(t, client, `SELECT pglease.history_disable($1)`, n("svc/jobs/"), &prev)
	if prev == nil || *prev != 48*time.Hour {
		t.Fatalf("history_disable: got %v, want the keep it had, 48h", prev)
	}
	var deleted int64
	mustScanHistory(t, db.pool, `SELECT pglease.history_delete($1, NULL)`, n(""), &deleted)
}

// testHistoryOperatorRefused: a member of pglease_operator may not turn
// the history on or off for a shared prefix or another role's (42501,
// saying who may; nothing changes), nor delete from it even were
// history_delete granted to it; once it is also a member of the prefix's
// role it may, as that role may.
func testHistoryOperatorRefused(t *testing.T, db *testDB) {
	n := namer(t)
	adminURL := pgtest.AdminURL(t)
	admin := connect(t, adminURL)
	svc := createLoginRole(t, adminURL, db.url, true)
	opRole := createLoginRole(t, adminURL, db.url, false)
	mustExec(t, admin, `GRANT pglease_operator TO `+ident(opRole.name))
	operator := connectAs(t, db.url, opRole)
	mustExec(t, db.pool, `SELECT pglease.prefix_bind($1, $2)`, n("svc/"), svc.name)
	mustExec(t, db.pool, `SELECT pglease.history_enable($1, '3 days')`, n("on/"))
	prefixes := func() string {
		t.Helper()
		var got string
		mustScanHistory(t, db.pool, `SELECT coalesce(string_agg(prefix || '=' || keep::text, ' ' ORDER BY prefix), '')
			FROM pglease.history_prefixes WHERE starts_with(prefix, $1)`, n(""), &got)
		return got
	}
	before := prefixes()
	ctx := testContext(t)
	for _, p := range []string{n("shared/"), n("on/"), n("svc/"), n("svc/jobs/")} {
		_, err := operator.Exec(ctx, `SELECT pglease.history_enable($1, '1 day')`, p)
		requirePgError(t, err, "42501", "only the schema owner, a superuser or a member of the role the prefix is bound to")
		_, err = operator.Exec(ctx, `SELECT pglease.history_disable($1)`, p)
		requirePgError(t, err, "42501", "pglease.history_disable")
	}
	if after := prefixes(); after != before {
		t.Fatalf("history prefixes after the operator's refused calls:\ngot  %s\nwant %s", after, before)
	}

	// history_delete is granted to no role; granted to the operator by
	// mistake, the function still refuses it. The grant is rolled back.
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	mustExec(t, tx, `GRANT EXECUTE ON FUNCTION pglease.history_delete(text, timestamptz) TO `+ident(opRole.name))
	mustExec(t, tx, `SET LOCAL SESSION AUTHORIZATION `+ident(opRole.name))
	_, err = tx.Exec(ctx, `SELECT pglease.history_delete($1, NULL)`, n(""))
	requirePgError(t, err, "42501", "only the schema owner or a superuser may")
	_ = tx.Rollback(ctx)

	mustExec(t, admin, `GRANT `+ident(svc.name)+` TO `+ident(opRole.name))
	mustExec(t, operator, `SELECT pglease.history_enable($1, '1 day')`, n("svc/jobs/"))
	_, err = operator.Exec(ctx, `SELECT pglease.history_disable($1)`, n("on/"))
	requirePgError(t, err, "42501", "pglease.history_disable")
	if got, want := prefixes(), n("on/")+"=72:00:00 "+n("svc/jobs/")+"=24:00:00"; got != want {
		t.Fatalf("history prefixes:\ngot  %s\nwant %s", got, want)
	}
}

// testHistoryOpenGrantDelaysNobody: a grant, a release and a takeover of
// names with history on, each left open in a transaction with the
// timeouts off, delay no grant, release, takeover, claim or read of
// another name of the same prefix (lock_timeout 100 ms), and a read of
// their own names.
func testHistoryOpenGrantDelaysNobody(t *testing.T, db *testDB) {
	n := namer(t)
	historyOn(t, db.pool, n(""))
	mustAcquire(t, db.pool, n("rel"), "a", time.Hour, 1)
	mustAcquire(t, db.pool, n("exp"), "a", time.Millisecond, 1)
	mustAcquire(t, db.pool, n("exp2"), "a", time.Millisecond, 1)
	waitLeaseState(t, db.pool, n("exp"), "expired")
	waitLeaseState(t, db.pool, n("exp2"), "expired")
	mustAcquire(t, db.pool, n("rel2"), "v", time.Hour, 1)

	ctx := testContext(t)
	open, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(context.Background()) }()
	for _, sql := range []string{
		`SET LOCAL statement_timeout = 0`, `SET LOCAL lock_timeout = 0`,
		`SET LOCAL idle_in_transaction_session_timeout = 0`,
	} {
		mustExec(t, open, sql)
	}
	mustAcquire(t, open, n("new"), "a", time.Hour, 1)
	if !release(t, open, n("rel"), "a", 1) {
		t.Fatal("open release: got false")
	}
	mustAcquire(t, open, n("exp"), "b", time.Hour, 2)
	mustClaimSlot(t, open, n("scope"), "a", 2, time.Hour, 1, 1)

	victim, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Release()
	mustExec(t, victim, `SET lock_timeout = '100ms'`)
	defer mustExec(t, victim, `RESET lock_timeout`)
	mustAcquire(t, victim, n("other"), "v", time.Hour, 1)
	if !release(t, victim, n("rel2"), "v", 1) {
		t.Fatal("release of another name: got false")
	}
	mustAcquire(t, victim, n("exp2"), "v", time.Hour, 2)
	mustClaimSlot(t, victim, n("scope2"), "v", 2, time.Hour, 1, 1) // a claim holds its scope: another scope
	for _, name := range []string{n("new"), n("rel"), n("exp"), n("other")} {
		tenures(t, victim, name)
	}
}

// testHistoryRetention: pglease.purge deletes the rows of tenures ended
// longer ago than their prefix's keep; open tenures' rows stay; a
// REPEATABLE READ transaction begun before the purge reads the history of
// its snapshot, and one begun after it sees the rows gone.
func testHistoryRetention(t *testing.T, db *testDB) {
	n := namer(t)
	name := n("l")
	mustExec(t, db.pool, `SELECT pglease.history_enable($1, '1 microsecond')`, n(""))
	mustAcquire(t, db.pool, name, "a", time.Hour, 1)
	release(t, db.pool, name, "a", 1)
	mustAcquire(t, db.pool, name, "b", time.Hour, 2)

	ctx := testContext(t)
	rr, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rr.Rollback(context.Background()) }()
	requireEnds(t, tenures(t, rr, name), "1:a:released", "2:b:NULL")

	mustExec(t, db.pool, `SELECT pglease.purge('1 hour')`)
	requireEnds(t, tenures(t, db.pool, name), "2:b:NULL")
	requireEnds(t, tenures(t, rr, name), "1:a:released", "2:b:NULL")
	// A grant in the old snapshot, after the purge committed, still writes
	// its history: release b and take it again.
	if !release(t, rr, name, "b", 2) {
		t.Fatal("release under REPEATABLE READ: got false")
	}
	mustAcquire(t, rr, name, "c", time.Hour, 3)
	if err := rr.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	requireEnds(t, tenures(t, db.pool, name), "2:b:released", "3:c:NULL")
}

// testHistoryOffWritesNothing: names under no prefix turned on get no
// rows, and turning a prefix off stops the writes.
func testHistoryOffWritesNothing(t *testing.T, db *testDB) {
	n := namer(t)
	mustAcquire(t, db.pool, n("l"), "a", time.Hour, 1)
	release(t, db.pool, n("l"), "a", 1)
	requireEnds(t, tenures(t, db.pool, n("l")))
	historyOn(t, db.pool, n(""))
	mustAcquire(t, db.pool, n("l"), "a", time.Hour, 2)
	mustExec(t, db.pool, `SELECT pglease.history_disable($1)`, n(""))
	release(t, db.pool, n("l"), "a", 2)
	mustAcquire(t, db.pool, n("l"), "a", time.Hour, 3)
	requireEnds(t, tenures(t, db.pool, n("l")), "2:a:NULL")
}

// testHistoryArchive: with archiving on, pglease.purge moves the tenures
// whose keep has passed to pglease.tenures_archive, one partition per
// month created as needed; pglease.tenures reads both tables (also in a
// REPEATABLE READ snapshot taken before the move, each tenure once); an
// open move delays no grant, release, takeover, claim or read, and
// another purge skips it; history_drop_before drops whole months, refuses
// bad input (22004, 22023) and every role but the owner (42501), changing
// nothing; a grant after the move gets the next fence.
func testHistoryArchive(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	name, old := n("l"), n("old")
	mustExec(t, db.pool, `SELECT pglease.history_enable($1, '1 microsecond')`, n(""))
	var prev bool
	mustScanHistory(t, db.pool, `SELECT pglease.history_archive($1)`, true, &prev)
	if prev {
		t.Fatal("history_archive: got previous true, want false (the default)")
	}
	mustAcquire(t, db.pool, name, "a", time.Hour, 1)
	release(t, db.pool, name, "a", 1)
	mustAcquire(t, db.pool, name, "b", time.Hour, 2)
	mustExec(t, db.pool, `INSERT INTO pglease.tenures (name, slot, fence, holder, granted_at, ended_at, ended_how)
		VALUES ($1, 0, 1, 'o', '2020-01-05Z', '2020-01-06Z', 'released'),
		       ($1, 0, 2, 'o', '2020-02-05Z', '2020-02-06Z', 'expired')`, old)
	before := fmt.Sprint(tenures(t, db.pool, name), tenures(t, db.pool, old))

	rr, err := db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rr.Rollback(context.Background()) }()
	tenures(t, rr, name) // the snapshot

	// The move left open, timeouts off: nobody else waits for it.
	open, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(context.Background()) }()
	for _, sql := range []string{`SET LOCAL statement_timeout = 0`, `SET LOCAL lock_timeout = 0`,
		`SET LOCAL idle_in_transaction_session_timeout = 0`} {
		mustExec(t, open, sql)
	}
	mustExec(t, open, `SELECT pglease.purge('1 hour')`)
	victim, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Release()
	mustExec(t, victim, `SET lock_timeout = '100ms'`)
	defer mustExec(t, victim, `RESET lock_timeout`)
	if !release(t, victim, name, "b", 2) {
		t.Fatal("release beside an open move: got false")
	}
	mustAcquire(t, victim, name, "c", time.Hour, 3)
	mustAcquire(t, victim, n("other"), "c", time.Hour, 1)
	mustClaimSlot(t, victim, n("scope"), "c", 1, time.Hour, 1, 1)
	tenures(t, victim, name)
	var moved int64
	mustScanHistory(t, victim, `SELECT pglease.purge($1)`, "1 hour", &moved) // skips: another purge is moving
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	var live, archived int64
	mustScanHistory(t, db.pool, `SELECT count(*) FROM pglease.tenures WHERE starts_with(name, $1)`, n(""), &live)
	mustScanHistory(t, db.pool, `SELECT count(*) FROM pglease.tenures_archive WHERE starts_with(name, $1)`, n(""), &archived)
	if archived != 3 {
		t.Fatalf("archived tenures: got %d, want 3 (a's and the two of 2020)", archived)
	}
	requireEnds(t, tenures(t, rr, name), "1:a:released", "2:b:NULL")
	if got := fmt.Sprint(tenures(t, rr, name), tenures(t, rr, old)); got != before {
		t.Fatalf("tenures in a snapshot from before the move:\ngot  %s\nwant %s", got, before)
	}
	_ = rr.Rollback(ctx) // its read holds the archive: a drop would wait for it
	requireEnds(t, tenures(t, db.pool, name), "1:a:released", "2:b:released", "3:c:NULL")
	requireEnds(t, tenures(t, db.pool, old), "1:o:released", "2:o:expired")
	var months []string
	mustScanHistory(t, db.pool, `SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_inherits AS i
		JOIN pg_class AS c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, "pglease.tenures_archive", &months)
	if len(months) != 3 || months[0] != "tenures_archive_202001" || months[1] != "tenures_archive_202002" {
		t.Fatalf("archive partitions: got %v, want 2020-01, 2020-02 and this month's", months)
	}

	// Bad input and other roles: refused, nothing dropped.
	_, err = db.pool.Exec(ctx, `SELECT pglease.history_drop_before(NULL)`)
	requirePgError(t, err, "22004")
	_, err = db.pool.Exec(ctx, `SELECT pglease.history_drop_before(now() + interval '1 day')`)
	requirePgError(t, err, "22023")
	_, err = db.pool.Exec(ctx, `SELECT pglease.history_archive(NULL)`)
	requirePgError(t, err, "22004")
	client := connectAs(t, db.url, createLoginRole(t, pgtest.AdminURL(t), db.url, true))
	for _, sql := range []string{`SELECT pglease.history_drop_before('2021-01-01Z')`, `SELECT pglease.history_archive(false)`,
		`DROP TABLE pglease.tenures_archive_202001`, `SELECT * FROM pglease.tenures_archive`} {
		if _, err := client.Exec(ctx, sql); pgCode(err) != "42501" {
			t.Errorf("%s as a client: got %v, want SQLSTATE 42501", sql, err)
		}
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	mustExec(t, tx, `GRANT EXECUTE ON FUNCTION pglease.history_drop_before(timestamptz) TO pglease_client`)
	mustExec(t, tx, `SET LOCAL SESSION AUTHORIZATION pglease_client`)
	_, err = tx.Exec(ctx, `SELECT pglease.history_drop_before('2021-01-01Z')`)
	requirePgError(t, err, "42501", "only the schema owner or a superuser may")
	_ = tx.Rollback(ctx)
	requireEnds(t, tenures(t, db.pool, old), "1:o:released", "2:o:expired")

	// The owner drops January 2020: its month goes, February stays.
	var dropped int32
	mustScanHistory(t, db.pool, `SELECT pglease.history_drop_before($1)`, "2020-02-01Z", &dropped)
	if dropped != 1 {
		t.Fatalf("history_drop_before: got %d months dropped, want 1", dropped)
	}
	requireEnds(t, tenures(t, db.pool, old), "2:o:expired")
	mustScanHistory(t, db.pool, `SELECT pglease.history_archive($1)`, false, &prev)
	if !prev {
		t.Fatal("history_archive(false): got previous false, want true")
	}
}
