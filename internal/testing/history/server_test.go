package history

import (
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func at(msec float64) time.Time { return t0.Add(time.Duration(msec * float64(ms))) }

// grant is a new tenure of lease L replacing (oldHolder, oldFence).
func grant(seq int64, holder string, fence int64, acquired float64, oldHolder string, oldExpires float64) ServerEvent {
	e := ServerEvent{Seq: seq, Row: LeaseRow, Name: "L", Holder: holder, Fence: fence,
		AcquiredAt: at(acquired), ExpiresAt: at(acquired + 100), Clock: at(acquired + 0.5),
		OldHolder: oldHolder, OldFence: fence - 1, OldExpiresAt: at(oldExpires)}
	if fence == 1 {
		e.Inserted, e.OldHolder, e.OldFence, e.OldExpiresAt = true, "", 0, time.Time{}
	}
	return e
}

func renewal(seq int64, holder string, fence int64, acquired, prevExpires, now float64) ServerEvent {
	return ServerEvent{Seq: seq, Row: LeaseRow, Name: "L", Holder: holder, Fence: fence, OldHolder: holder, OldFence: fence,
		AcquiredAt: at(acquired), OldExpiresAt: at(prevExpires), ExpiresAt: at(now + 100), Clock: at(now)}
}

func release(seq int64, holder string, fence int64, acquired, prevExpires, now float64) ServerEvent {
	e := renewal(seq, holder, fence, acquired, prevExpires, now)
	e.Holder, e.ExpiresAt = "", at(now)
	return e
}

// purged is pglease.purge deleting lease L's row (fence, holder, expiry).
func purged(seq int64, holder string, fence int64, expires, now float64) ServerEvent {
	return ServerEvent{Seq: seq, Row: LeaseRow, Name: "L", Deleted: true, OldHolder: holder, OldFence: fence,
		OldExpiresAt: at(expires), Fence: fence, ExpiresAt: at(expires), Clock: at(now)}
}

// recreated is lease L's row created again after a purge, with fence.
func recreated(seq int64, holder string, fence int64, acquired float64) ServerEvent {
	e := grant(seq, holder, 1, acquired, "", 0)
	e.Fence = fence
	return e
}

func write(seq int64, holder string, fence int64, began float64) ServerEvent {
	return ServerEvent{Seq: seq, Row: WriteRow, Name: "L", Holder: holder, Fence: fence, Clock: at(began)}
}

func TestCheckServer(t *testing.T) {
	good := []ServerEvent{
		grant(1, "a", 1, 0, "", 0),
		write(2, "a", 1, 10),
		renewal(3, "a", 1, 0, 100, 50),
		write(4, "a", 1, 140),
		release(5, "a", 1, 0, 150, 145),
		grant(6, "b", 2, 146, "", 145),
		write(7, "b", 2, 147),
		grant(8, "c", 3, 250, "b", 246), // after b's expiry
	}
	if rep := CheckServer(good, nil); !rep.OK() {
		t.Fatalf("good history rejected: %v", rep.Violations)
	} else if rep.Grants != 3 || rep.Writes != 3 || rep.Releases != 1 || rep.Extends != 1 {
		t.Fatalf("counts: %s", rep.Summary())
	}

	// Purged and created again above its old fence; other rows may start
	// above 1 once anything was purged.
	purgeGood := []ServerEvent{
		grant(1, "a", 1, 0, "", 0), release(2, "a", 1, 0, 100, 50),
		purged(3, "", 1, 50, 400), recreated(4, "b", 2, 410), grant(5, "c", 3, 600, "b", 510),
		{Seq: 6, Row: LeaseRow, Name: "M", Inserted: true, Holder: "d", Fence: 2, AcquiredAt: at(700), ExpiresAt: at(800), Clock: at(700)},
	}
	if rep := CheckServer(purgeGood, nil); !rep.OK() {
		t.Fatalf("good history with a purge rejected: %v", rep.Violations)
	} else if rep.Purged != 1 || rep.Grants != 4 {
		t.Fatalf("counts with a purge: %s", rep.Summary())
	}

	// A re-entrant acquire with a shorter TTL moves the expiry earlier: a
	// purge after the new expiry deletes no live tenure.
	shortened := []ServerEvent{
		grant(1, "a", 1, 0, "", 0),
		{Seq: 2, Row: LeaseRow, Name: "L", Holder: "a", Fence: 1, OldHolder: "a", OldFence: 1,
			AcquiredAt: at(0), OldExpiresAt: at(100), ExpiresAt: at(40), Clock: at(10)},
		purged(3, "a", 1, 40, 60),
	}
	if rep := CheckServer(shortened, nil); !rep.OK() {
		t.Fatalf("purge after a shortening re-pin rejected: %v", rep.Violations)
	}

	tests := []struct {
		name string
		rule string
		evs  []ServerEvent
	}{
		{"write after takeover in commit order", RuleServerWrite, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), grant(2, "b", 2, 120, "a", 100), write(3, "a", 1, 90)}},
		{"write after release", RuleServerWrite, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), release(2, "a", 1, 0, 100, 50), write(3, "a", 1, 40)}},
		{"write begun after expiry", RuleServerWrite, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), write(2, "a", 1, 101)}},
		{"takeover of a live tenure", RuleServerTakeover, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), grant(2, "b", 2, 50, "a", 100)}},
		{"fence skipping", RuleServerFence, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), func() ServerEvent { e := grant(2, "b", 3, 120, "a", 100); e.OldFence = 1; return e }()}},
		{"fence restarting", RuleServerFence, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), grant(2, "b", 1, 120, "", 0)}},
		{"released tenure revived", RuleServerRevival, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), release(2, "a", 1, 0, 100, 50),
			{Seq: 3, Row: LeaseRow, Name: "L", Holder: "a", Fence: 1, OldFence: 1, OldExpiresAt: at(50), ExpiresAt: at(160), Clock: at(60)}}},
		{"fence back after purge", RuleServerFence, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), grant(2, "b", 2, 120, "a", 100), release(3, "b", 2, 120, 220, 130),
			purged(4, "", 2, 130, 500), recreated(5, "c", 2, 510)}},
		{"first fence not 1 without purges", RuleServerFence, []ServerEvent{
			recreated(1, "a", 5, 0)}},
		{"purge of a live tenure", RuleServerPurge, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), purged(2, "a", 1, 100, 50)}},
		{"purge of a stale version", RuleServerPurge, []ServerEvent{
			grant(1, "a", 1, 0, "", 0), renewal(2, "a", 1, 0, 100, 50), purged(3, "a", 1, 100, 120)}},
		{"purge of an unknown row", RuleServerPurge, []ServerEvent{
			purged(1, "", 3, 0, 50)}},
		{"slot above capacity", RuleServerSlot, []ServerEvent{
			{Seq: 1, Row: SlotRow, Name: "S", Slot: 3, Inserted: true, Holder: "a", Fence: 1, AcquiredAt: at(0), ExpiresAt: at(100), Clock: at(0)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckServer(tc.evs, map[string]int{"S": 2})
			if rep.Counts[tc.rule] == 0 {
				t.Fatalf("no %s violation: %v", tc.rule, rep.Violations)
			}
			t.Log(rep.Violations[0])
		})
	}
}

// TestCollapse: versions of one row written by one transaction are one
// change. pglease.acquire inserts a name purged meanwhile with the floor
// it read before waiting for the purge, and raises the fence once it sees
// the floor the purge raised: the first fence was never committed.
func TestCollapse(t *testing.T) {
	inTx := func(e ServerEvent, tx int64) ServerEvent { e.Tx = tx; return e }
	raised := func(seq int64, holder string, from, to int64, acquired float64) ServerEvent {
		e := renewal(seq, holder, to, acquired, acquired+100, acquired)
		e.OldFence, e.ExpiresAt = from, at(acquired+100)
		return e
	}
	evs := []ServerEvent{
		inTx(grant(1, "a", 1, 0, "", 0), 10), inTx(release(2, "a", 1, 0, 100, 50), 11),
		inTx(grant(3, "b", 2, 60, "", 50), 12), inTx(release(4, "b", 2, 60, 160, 70), 13),
		inTx(purged(5, "", 2, 70, 80), 14),
		inTx(recreated(6, "c", 2, 79), 15), inTx(raised(7, "c", 2, 3, 79), 15), // one transaction
	}
	evs[5].Clock = at(81)
	ops := []Op{
		op(Acquire, OK, "a", "L", 1, 0, 1), op(Release, OK, "a", "L", 1, 49, 51),
		op(Acquire, OK, "b", "L", 2, 59, 61), op(Release, OK, "b", "L", 2, 69, 71),
		op(Acquire, OK, "c", "L", 3, 78, 82),
	}
	if rep := CheckServer(evs, nil); !rep.OK() || rep.Grants != 3 {
		t.Fatalf("fence raised in the inserting transaction: %s %v, want 3 grants and no violation", rep.Summary(), rep.Violations)
	}
	if rep := Agree(ops, evs); !rep.OK() {
		t.Fatalf("fence raised in the inserting transaction: client and server disagree: %v", rep.Violations)
	}
	// The same versions from two transactions: fence 2 started again,
	// and granted to c, which was never told.
	evs[6].Tx = 16
	if rep := CheckServer(evs, nil); rep.Counts[RuleServerFence] == 0 {
		t.Fatalf("fence 2 committed again after its purge: no %s violation: %v", RuleServerFence, rep.Violations)
	}
	if rep := Agree(ops, evs); rep.Counts[RuleAgree] == 0 {
		t.Fatalf("fence 2 granted to c by the server: no %s violation", RuleAgree)
	}
}

func TestAgree(t *testing.T) {
	evs := []ServerEvent{grant(1, "a", 1, 0, "", 0), write(2, "a", 1, 10), write(3, "a", 1, 20)}
	ops := []Op{
		op(Acquire, OK, "a", "L", 1, 0, 1),
		op(Write, OK, "a", "L", 1, 10, 11),
		op(Write, Unknown, "a", "L", 1, 20, 21),
	}
	if rep := Agree(ops, evs); !rep.OK() {
		t.Fatalf("agreeing histories rejected: %v", rep.Violations)
	}
	for name, ops := range map[string][]Op{
		"write lost":              {op(Acquire, OK, "a", "L", 1, 0, 1), op(Write, OK, "a", "L", 1, 10, 11), op(Write, OK, "a", "L", 1, 20, 21), op(Write, OK, "a", "L", 1, 30, 31)},
		"grant nobody asked for":  {op(Write, OK, "a", "L", 1, 10, 11), op(Write, OK, "a", "L", 1, 20, 21)},
		"grant the server denies": {op(Acquire, OK, "a", "L", 1, 0, 1), op(Acquire, OK, "b", "L", 2, 200, 201), op(Write, OK, "a", "L", 1, 10, 11), op(Write, OK, "a", "L", 1, 20, 21)},
	} {
		if rep := Agree(ops, evs); rep.Counts[RuleAgree] == 0 {
			t.Errorf("%s: not caught", name)
		}
	}
}

func TestCheckSpans(t *testing.T) {
	spans := []Span{
		{Name: "L", Owner: "a", Fence: 1, Start: 0, End: 10 * ms},
		{Name: "L", Owner: "b", Fence: 2, Start: 10 * ms, End: 20 * ms}, // touching: fine
		{Name: "M", Owner: "c", Fence: 1, Start: 5 * ms, End: 15 * ms},
	}
	if live, vs := CheckSpans(spans, 1); len(vs) != 0 || live["L"] != 1 {
		t.Fatalf("CheckSpans = %v, %v; want no violation", live, vs)
	}
	spans = append(spans, Span{Name: "L", Owner: "d", Fence: 3, Start: 19 * ms, End: 25 * ms})
	if live, vs := CheckSpans(spans, 1); len(vs) != 1 || live["L"] != 2 {
		t.Fatalf("CheckSpans = %v, %v; want one overlap", live, vs)
	}
	if _, vs := CheckSpans(spans, 2); len(vs) != 0 {
		t.Fatalf("capacity 2: %v", vs)
	}
}

// slotGrant is a new tenure of slot n of scope S, claimed with capacity,
// live on the server's clock from acquired to expires.
func slotGrant(seq int64, n int, holder string, fence int64, capacity int, acquired, expires float64) ServerEvent {
	return ServerEvent{Seq: seq, Row: SlotRow, Name: "S", Slot: n, Inserted: fence == 1, Holder: holder, Fence: fence,
		OldFence: fence - 1, AcquiredAt: at(acquired), ExpiresAt: at(expires), Clock: at(acquired + 0.1), Capacity: capacity}
}

// slotRelease ends slot n's tenure at now.
func slotRelease(seq int64, n int, holder string, fence int64, acquired, prevExpires, now float64) ServerEvent {
	return ServerEvent{Seq: seq, Row: SlotRow, Name: "S", Slot: n, OldHolder: holder, OldFence: fence, Fence: fence,
		AcquiredAt: at(acquired), OldExpiresAt: at(prevExpires), ExpiresAt: at(now), Clock: at(now)}
}

// TestCheckServerClock: the rules on the server's clock, which commit
// order alone does not see (issue 14: grants stamped before the release
// they waited for, a slot scope over capacity for half a millisecond).
func TestCheckServerClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []ServerEvent
		rule string // "" when the history is correct
	}{{
		name: "takeover after the release",
		evs:  []ServerEvent{grant(1, "a", 1, 0, "", 0), release(2, "a", 1, 0, 100, 50), grant(3, "b", 2, 50, "", 50)},
	}, {
		name: "takeover stamped before the release it waited for",
		evs:  []ServerEvent{grant(1, "a", 1, 0, "", 0), release(2, "a", 1, 0, 100, 50), grant(3, "b", 2, 49.8, "", 50)},
		rule: RuleServerInterval,
	}, {
		name: "recreated after a purge, stamped before the purged tenure ended",
		evs:  []ServerEvent{grant(1, "a", 1, 0, "", 0), purged(2, "a", 1, 100, 400), recreated(3, "b", 2, 90)},
		rule: RuleServerInterval,
	}, {
		name: "recreated after a purge it waited for: stamped before the purged tenure ended, inserted after",
		evs: []ServerEvent{grant(1, "a", 1, 0, "", 0), purged(2, "a", 1, 100, 400),
			func() ServerEvent { e := recreated(3, "b", 2, 90); e.Clock = at(401); return e }()},
	}, {
		name: "slots within capacity on the server's clock",
		evs: []ServerEvent{
			slotGrant(1, 1, "a", 1, 1, 0, 100), slotRelease(2, 1, "a", 1, 0, 100, 50),
			slotGrant(3, 2, "b", 1, 1, 50, 150),
		},
	}, {
		name: "a claim counted a slot free that was released after its clock reading",
		evs: []ServerEvent{
			slotGrant(1, 1, "a", 1, 1, 0, 100), slotRelease(2, 1, "a", 1, 0, 100, 50.5),
			slotGrant(3, 2, "b", 1, 1, 50, 150),
		},
		rule: RuleServerCapacity,
	}, {
		name: "one capacity per scope: a claim with capacity 3 beside a holder of capacity 1",
		evs:  []ServerEvent{slotGrant(1, 1, "a", 1, 1, 0, 100), slotGrant(2, 2, "b", 1, 3, 10, 110)},
		rule: RuleServerCapacity,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckServer(tc.evs, nil)
			switch {
			case tc.rule == "" && !rep.OK():
				t.Fatalf("correct history rejected: %v", rep.Violations)
			case tc.rule != "" && rep.Counts[tc.rule] == 0:
				t.Fatalf("violation of %s not found: %s, %v", tc.rule, rep.Summary(), rep.Violations)
			}
		})
	}
}
