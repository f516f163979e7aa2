package contract

import (
	"testing"
	"time"
)

// TestTenureHistoryClockStep: a server clock stepped back by more than a
// TTL (a tenure granted "later" than the clock now reads, and expired on
// it) makes no takeover, release or acquire fail with the history on: the
// history keeps its times in order instead, and a forged grant while a
// tenure is live is still refused (testHistoryForgedOverlapRefused).
func TestTenureHistoryClockStep(t *testing.T) {
	runGroup(t, 4, []subtest{{"TakeoverReleaseAcquire", testHistoryClockStep}})
}

func testHistoryClockStep(t *testing.T, db *testDB) {
	n := namer(t)
	name := n("lease")
	historyOn(t, db.pool, n(""))
	mustAcquire(t, db.pool, name, "a", time.Hour, 1)
	// The clock read an hour later at the grant than it does now, and the
	// tenure has run out on today's reading.
	mustExec(t, db.pool, `UPDATE pglease.tenures SET granted_at = clock_timestamp() + interval '1 hour'
		WHERE name = $1 AND fence = 1`, name)
	mustExec(t, db.pool, `UPDATE pglease.leases SET acquired_at = clock_timestamp() + interval '1 hour',
		expires_at = clock_timestamp() - interval '1 second' WHERE name = $1`, name)
	mustAcquire(t, db.pool, name, "b", time.Hour, 2)
	if !release(t, db.pool, name, "b", 2) {
		t.Fatal("b's release after the takeover: refused")
	}
	mustAcquire(t, db.pool, name, "c", time.Hour, 3)
	rows := tenures(t, db.pool, name)
	requireEnds(t, rows, "1:a:taken_over", "2:b:released", "3:c:NULL")
	for i, r := range rows {
		if r.EndedAt != nil && r.EndedAt.Before(r.GrantedAt) {
			t.Fatalf("fence %d ends at %s, before its grant at %s", r.Fence, r.EndedAt, r.GrantedAt)
		}
		if i > 0 && (rows[i-1].EndedAt == nil || r.GrantedAt.Before(*rows[i-1].EndedAt)) {
			t.Fatalf("fence %d granted at %s, before fence %d ended (%v)", r.Fence, r.GrantedAt, rows[i-1].Fence, rows[i-1].EndedAt)
		}
	}
}
