package history

import (
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// op builds an Op on lease or scope name; times in milliseconds.
func op(kind Kind, out Outcome, holder, name string, fence int64, call, ret float64) Op {
	o := Op{Kind: kind, Outcome: out, Holder: holder, Name: name, Fence: fence,
		Call: time.Duration(call * float64(ms)), Return: time.Duration(ret * float64(ms))}
	switch kind {
	case Acquire, Renew, Claim, RenewSlot:
		o.TTL = 100 * ms
	}
	return o
}

func withTTL(o Op, ttl time.Duration) Op { o.TTL = ttl; return o }

func slotOp(kind Kind, out Outcome, holder, scope string, slot int, fence int64, capacity int, call, ret float64) Op {
	o := op(kind, out, holder, scope, fence, call, ret)
	o.Slot, o.Capacity = slot, capacity
	return o
}

// unitsOp is slotOp of a claim of units units.
func unitsOp(o Op, units int) Op {
	o.Units = units
	return o
}

func refusedAcquire(holder, name, other string, fence int64, call, ret float64) Op {
	o := op(Acquire, Refused, holder, name, fence, call, ret)
	o.Other = other
	return o
}

// refusedAcquireIn is refusedAcquire reporting expiresIn milliseconds left.
func refusedAcquireIn(holder, name, other string, fence int64, call, ret, expiresIn float64) Op {
	o := refusedAcquire(holder, name, other, fence, call, ret)
	o.ExpiresIn = time.Duration(expiresIn * float64(ms))
	return o
}

// atLevel is o run in a transaction at level.
func atLevel(o Op, level Isolation) Op {
	o.Isolation = level
	return o
}

func refusedClaim(holder, scope string, capacity, inUse int, call, ret float64) Op {
	o := op(Claim, Refused, holder, scope, 0, call, ret)
	o.Capacity, o.InUse = capacity, inUse
	return o
}

// TestCheckAccepts: histories pglease can produce pass.
func TestCheckAccepts(t *testing.T) {
	tests := []struct {
		name string
		ops  []Op
	}{
		{"handover by release, expiry and refusals", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			refusedAcquire("b", "L", "a", 1, 2, 3),
			op(Renew, OK, "a", "L", 1, 50, 51),
			op(Write, OK, "a", "L", 1, 60, 61),
			op(Release, OK, "a", "L", 1, 70, 71),
			op(Acquire, OK, "b", "L", 2, 72, 73),
			op(Write, OK, "b", "L", 2, 74, 75),
			op(Write, Refused, "a", "L", 1, 76, 77), // stale fence: refused
			op(Acquire, OK, "c", "L", 3, 200, 201),  // b's tenure expired at ~173
			op(Renew, Refused, "b", "L", 2, 202, 203),
			op(Release, Refused, "b", "L", 2, 204, 205),
		}},
		{"takeover right at expiry", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Acquire, OK, "b", "L", 2, 100, 101),
		}},
		{"release and acquire concurrent", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Release, OK, "a", "L", 1, 70, 90),
			op(Acquire, OK, "b", "L", 2, 75, 80),
		}},
		{"re-entrant acquire keeps the fence", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Acquire, OK, "a", "L", 1, 50, 51),
			op(Write, OK, "a", "L", 1, 140, 141), // inside the re-pinned tenure
		}},
		{"renewal with unknown outcome may have extended", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Renew, Unknown, "a", "L", 1, 90, 95),
			op(Write, OK, "a", "L", 1, 150, 151),
			refusedAcquire("b", "L", "a", 1, 160, 161),
		}},
		{"refusals report the time their holder had left", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),                 // expires in [100, 101]
			refusedAcquireIn("b", "L", "a", 1, 2, 3, 98),       // decided in [2, 3]
			op(Renew, OK, "a", "L", 1, 50, 51),                 // expires in [150, 151]
			refusedAcquireIn("c", "L", "a", 1, 60, 61, 90),     // decided in [60, 61]
			refusedAcquire("c", "L", "a", 1, 96, 97),           // not recorded
			refusedAcquireIn("b", "L", "a", 1, 148, 150, 0.05), // right before the expiry
		}},
		{"acquire with unknown outcome explains a refusal", []Op{
			op(Acquire, Unknown, "a", "L", 0, 0, 5),
			refusedAcquire("b", "L", "a", 1, 10, 11),
		}},
		{"separate leases do not exclude each other", []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Acquire, OK, "b", "M", 1, 0, 1),
		}},
		{"slots up to capacity", []Op{
			slotOp(Claim, OK, "a", "S", 1, 1, 2, 0, 1),
			slotOp(Claim, OK, "b", "S", 2, 1, 2, 2, 3),
			refusedClaim("c", "S", 2, 2, 4, 5),
			slotOp(RenewSlot, OK, "a", "S", 1, 1, 0, 50, 51),
			slotOp(ReleaseSlot, OK, "b", "S", 2, 1, 0, 60, 61),
			slotOp(Claim, OK, "c", "S", 2, 2, 2, 62, 63),
			slotOp(Claim, OK, "d", "S", 1, 2, 2, 160, 161), // a's slot expired at ~150
			refusedClaim("e", "S", 1, 2, 162, 163),
		}},
		{"aborted calls are neither grants nor refusals", []Op{
			op(Acquire, OK, "a", "L", 7, 0, 1),
			op(Release, OK, "a", "L", 7, 2, 3),
			// Granted in a transaction whose commit failed: fence 1 never was.
			atLevel(op(Acquire, Aborted, "b", "L", 1, 10, 12), Serializable),
			atLevel(op(Acquire, Aborted, "c", "L", 0, 10, 11), RepeatableRead),
			atLevel(op(Acquire, OK, "c", "L", 8, 20, 21), RepeatableRead),
			atLevel(slotOp(Claim, Aborted, "b", "S", 1, 1, 1, 30, 31), RepeatableRead),
			atLevel(slotOp(Claim, OK, "c", "S", 1, 1, 1, 30, 31), ReadCommitted),
		}},
		{"claim at a smaller capacity while a slot is being released", []Op{
			slotOp(Claim, OK, "a", "S", 1, 1, 2, 0, 1),
			slotOp(Claim, OK, "b", "S", 2, 1, 2, 2, 3),
			slotOp(ReleaseSlot, OK, "b", "S", 2, 1, 0, 20, 30),
			slotOp(Claim, OK, "c", "S", 2, 2, 2, 25, 28),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.ops, Config{})
			if !rep.OK() {
				for _, v := range rep.Violations {
					t.Errorf("%s", v)
				}
			}
			if rep.Ops != len(tc.ops) {
				t.Errorf("Ops = %d, want %d", rep.Ops, len(tc.ops))
			}
		})
	}
}

// TestCheckRejects: histories that break the contract are caught, by the
// rule that says why.
func TestCheckRejects(t *testing.T) {
	tests := []struct {
		name string
		rule string
		ops  []Op
	}{
		{"overlapping tenures", RuleOverlap, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Acquire, OK, "b", "L", 2, 10, 11),
		}},
		{"overlap kept up by renewals", RuleOverlap, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Renew, OK, "a", "L", 1, 60, 61),
			op(Acquire, OK, "b", "L", 2, 120, 121), // a renewed until ~160
		}},
		{"fence granted to two holders", RuleTwoHolders, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Release, OK, "a", "L", 1, 5, 6),
			op(Acquire, OK, "b", "L", 1, 10, 11),
		}},
		{"fence reused by its holder after release", RuleOutside, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Release, OK, "a", "L", 1, 5, 6),
			op(Acquire, OK, "a", "L", 1, 10, 11),
		}},
		{"fence reused by its holder after expiry", RuleOutside, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Acquire, OK, "a", "L", 1, 150, 151),
		}},
		{"fence going backwards across release", RuleFenceOrder, []Op{
			op(Acquire, OK, "a", "L", 2, 0, 1),
			op(Release, OK, "a", "L", 2, 2, 3),
			op(Acquire, OK, "b", "L", 1, 10, 11),
		}},
		{"fence going backwards across expiry", RuleFenceOrder, []Op{
			op(Acquire, OK, "a", "L", 5, 0, 1),
			op(Acquire, OK, "b", "L", 4, 200, 201),
		}},
		{"fence going backwards across a purge, at repeatable read", RuleFenceOrder, []Op{
			op(Acquire, OK, "a", "L", 7, 0, 1),
			op(Release, OK, "a", "L", 7, 2, 3),
			// The row purged; a snapshot from before its fences: fence 2.
			atLevel(op(Acquire, OK, "b", "L", 2, 20, 21), RepeatableRead),
		}},
		{"fence granted again across a purge, at serializable", RuleTwoHolders, []Op{
			op(Acquire, OK, "a", "L", 3, 0, 1),
			op(Release, OK, "a", "L", 3, 2, 3),
			atLevel(op(Acquire, OK, "b", "L", 3, 20, 21), Serializable),
		}},
		{"slot fence going backwards across a purge, at repeatable read", RuleFenceOrder, []Op{
			slotOp(Claim, OK, "a", "S", 1, 5, 2, 0, 1),
			slotOp(ReleaseSlot, OK, "a", "S", 1, 5, 0, 2, 3),
			atLevel(slotOp(Claim, OK, "b", "S", 1, 4, 2, 20, 21), RepeatableRead),
		}},
		{"holder with an aborted call still in flight", RuleSequential, []Op{
			atLevel(op(Acquire, Aborted, "a", "L", 0, 0, 10), RepeatableRead),
			op(Acquire, OK, "a", "M", 1, 5, 6),
		}},
		{"N+1 overlapping slot holders", RuleCapacity, []Op{
			slotOp(Claim, OK, "a", "S", 1, 1, 2, 0, 1),
			slotOp(Claim, OK, "b", "S", 2, 1, 2, 0, 1),
			slotOp(Claim, OK, "c", "S", 3, 1, 2, 5, 6),
		}},
		{"claim at capacity 1 granted while one holder is live", RuleCapacity, []Op{
			slotOp(Claim, OK, "a", "S", 1, 1, 2, 0, 1),
			slotOp(Claim, OK, "b", "S", 2, 1, 1, 5, 6),
		}},
		{"units over the capacity: 3 + 2 of 4", RuleCapacity, []Op{
			unitsOp(slotOp(Claim, OK, "a", "S", 1, 1, 4, 0, 1), 3),
			unitsOp(slotOp(Claim, OK, "b", "S", 2, 1, 4, 5, 6), 2),
		}},
		{"claim of 2 units granted while 3 of 4 were certainly held", RuleCapacity, []Op{
			unitsOp(slotOp(Claim, OK, "a", "S", 1, 1, 4, 0, 1), 3),
			unitsOp(slotOp(Claim, OK, "b", "S", 2, 1, 4, 5, 6), 2),
		}},
		{"two holders of one slot", RuleOverlap, []Op{
			slotOp(Claim, OK, "a", "S", 1, 1, 3, 0, 1),
			slotOp(Claim, OK, "b", "S", 1, 2, 3, 5, 6),
		}},
		{"write after the tenure expired", RuleOutside, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Write, OK, "a", "L", 1, 200, 201),
		}},
		{"write after release", RuleOutside, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Release, OK, "a", "L", 1, 10, 11),
			op(Write, OK, "a", "L", 1, 20, 21),
		}},
		{"write after a refused renewal", RuleOutside, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Renew, Refused, "a", "L", 1, 10, 11),
			op(Write, OK, "a", "L", 1, 20, 21),
		}},
		{"write while the next tenure is live", RuleOutside, []Op{
			withTTL(op(Acquire, OK, "a", "L", 1, 0, 1), 300*ms),
			op(Acquire, OK, "b", "L", 2, 10, 11), // itself an overlap
			op(Write, OK, "a", "L", 1, 50, 51),
		}},
		{"write under a fence never granted", RuleOutside, []Op{
			op(Write, OK, "a", "L", 7, 0, 1),
		}},
		{"write before its grant", RuleOutside, []Op{
			op(Write, OK, "a", "L", 1, 0, 1),
			op(Acquire, OK, "b", "L", 1, 5, 6),
		}},
		{"renewal of another holder's tenure", RuleOutside, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Renew, OK, "b", "L", 1, 5, 6),
		}},
		{"refusal in the name of a released tenure", RuleRefusal, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Release, OK, "a", "L", 1, 2, 3),
			refusedAcquire("b", "L", "a", 1, 10, 11),
		}},
		{"refusal reporting a negative time left", RuleRefusal, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			refusedAcquireIn("b", "L", "a", 1, 99, 102, -0.22),
		}},
		{"refusal reporting more time than the holder asked for", RuleRefusal, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			refusedAcquireIn("b", "L", "a", 1, 2, 3, 150),
		}},
		{"refusal reporting less time than the holder certainly had", RuleRefusal, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Renew, OK, "a", "L", 1, 50, 51),
			refusedAcquireIn("b", "L", "a", 1, 60, 61, 10),
		}},
		{"refusal in the name of the caller", RuleRefusal, []Op{
			refusedAcquire("a", "L", "a", 1, 10, 11),
		}},
		{"claim refused with more holders than possible", RuleRefusal, []Op{
			slotOp(Claim, OK, "a", "S", 1, 1, 2, 0, 1),
			refusedClaim("b", "S", 2, 2, 10, 11),
		}},
		{"holder with two calls in flight", RuleSequential, []Op{
			op(Acquire, OK, "a", "L", 1, 0, 10),
			op(Acquire, OK, "a", "M", 1, 5, 6),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(tc.ops, Config{})
			if rep.Counts[tc.rule] == 0 {
				t.Fatalf("no %s violation; got %v: %s", tc.rule, rep.Counts, rep.Summary())
			}
			for _, v := range rep.Violations {
				if v.Rule == tc.rule {
					t.Logf("%s", v)
					if !strings.Contains(v.String(), tc.rule) {
						t.Errorf("String() = %q, does not name the rule", v.String())
					}
					break
				}
			}
		})
	}
}

// TestCheckCapacityDefault: the capacity bound defaults to the largest any
// claim of the scope passed, and Config.Capacity overrides it.
// TestCheckUnits: tenures count their units: 3 + 1 of capacity 4 is
// within it, and MaxLive counts units.
func TestCheckUnits(t *testing.T) {
	ops := []Op{
		unitsOp(slotOp(Claim, OK, "a", "S", 1, 1, 4, 0, 1), 3),
		slotOp(Claim, OK, "b", "S", 2, 1, 4, 5, 6),
	}
	if rep := Check(ops, Config{}); !rep.OK() || rep.MaxLive["S"] != 4 {
		t.Fatalf("3 + 1 units of capacity 4: %s %v, MaxLive %d (want 4)", rep.Summary(), rep.Violations, rep.MaxLive["S"])
	}
}

func TestCheckCapacityDefault(t *testing.T) {
	ops := []Op{
		slotOp(Claim, OK, "a", "S", 1, 1, 3, 0, 1),
		slotOp(Claim, OK, "b", "S", 2, 1, 3, 0, 1),
		slotOp(Claim, OK, "c", "S", 3, 1, 3, 5, 6),
	}
	if rep := Check(ops, Config{}); !rep.OK() || rep.MaxLive["S"] != 3 {
		t.Fatalf("capacity 3: %s %v", rep.Summary(), rep.Violations)
	}
	if rep := Check(ops, Config{Capacity: map[string]int{"S": 2}}); rep.Counts[RuleCapacity] == 0 {
		t.Fatalf("capacity 2 configured: no violation: %s", rep.Summary())
	}
}

// TestCheckCoalescing: a coalescing holder (goroutines sharing one client,
// their calls batched) may have calls on different names in flight at
// once, not two on one name; other holders none.
func TestCheckCoalescing(t *testing.T) {
	overlap := []Op{op(Acquire, OK, "a", "L", 1, 0, 10), op(Acquire, OK, "a", "M", 1, 5, 6)}
	cfg := Config{Coalescing: map[string]bool{"a": true}}
	if rep := Check(overlap, cfg); rep.Counts[RuleSequential] != 0 {
		t.Fatalf("coalescing holder, two names in flight: got %s, want no %s violation", rep.Summary(), RuleSequential)
	}
	if rep := Check(overlap, Config{Coalescing: map[string]bool{"b": true}}); rep.Counts[RuleSequential] == 0 {
		t.Fatalf("holder not listed as coalescing, two names in flight: got %s, want a %s violation", rep.Summary(), RuleSequential)
	}
	same := []Op{op(Acquire, OK, "a", "L", 1, 0, 10), op(Release, OK, "a", "L", 1, 5, 6)}
	if rep := Check(same, cfg); rep.Counts[RuleSequential] == 0 {
		t.Fatalf("coalescing holder, two calls on one name in flight: got %s, want a %s violation", rep.Summary(), RuleSequential)
	}
}

// TestCheckSnapshotRefusal: a claim at REPEATABLE READ counts a slot
// released after its snapshot as in use. The refusal is explained by the
// snapshot (and counted), not by the call alone.
func TestCheckSnapshotRefusal(t *testing.T) {
	claim := atLevel(refusedClaim("c", "S", 2, 2, 20, 21), RepeatableRead)
	ops := []Op{
		slotOp(Claim, OK, "a", "S", 1, 1, 2, 0, 1),
		slotOp(Claim, OK, "b", "S", 2, 1, 2, 2, 3),
		slotOp(ReleaseSlot, OK, "b", "S", 2, 1, 0, 10, 11),
		claim,
	}
	if rep := Check(ops, Config{}); rep.Counts[RuleRefusal] == 0 {
		t.Fatalf("no snapshot recorded: got %s, want a %s violation", rep.Summary(), RuleRefusal)
	}
	ops[3].Snapshot = 5 * ms // before the release
	if rep := Check(ops, Config{}); !rep.OK() || rep.SnapshotRefusals != 1 {
		t.Fatalf("snapshot before the release: got %s %v, want no violation and 1 refusal on the snapshot", rep.Summary(), rep.Violations)
	}
	ops[3].Snapshot = 15 * ms // after it
	if rep := Check(ops, Config{}); rep.Counts[RuleRefusal] == 0 {
		t.Fatalf("snapshot after the release: got %s, want a %s violation", rep.Summary(), RuleRefusal)
	}
}

// TestCheckSnapshotAcquireRefusal: an acquire at SERIALIZABLE refused in
// the name of a tenure released after its snapshot, or with the expiry it
// had before a renewal committed after it.
func TestCheckSnapshotAcquireRefusal(t *testing.T) {
	for name, ops := range map[string][]Op{
		"released": {
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Release, OK, "a", "L", 1, 10, 11),
			atLevel(refusedAcquireIn("b", "L", "a", 1, 20, 21, 80), Serializable),
		},
		"renewed": {
			op(Acquire, OK, "a", "L", 1, 0, 1),
			op(Renew, OK, "a", "L", 1, 10, 11), // expires in [110, 111]
			atLevel(refusedAcquireIn("b", "L", "a", 1, 20, 21, 79.5), Serializable),
		},
	} {
		if rep := Check(ops, Config{}); rep.Counts[RuleRefusal] == 0 {
			t.Errorf("%s, no snapshot recorded: got %s, want a %s violation", name, rep.Summary(), RuleRefusal)
		}
		ops[2].Snapshot = 5 * ms
		if rep := Check(ops, Config{}); !rep.OK() || rep.SnapshotRefusals != 1 {
			t.Errorf("%s, snapshot before it: got %s %v, want no violation and 1 refusal on the snapshot", name, rep.Summary(), rep.Violations)
		}
		ops[2].Snapshot = 15 * ms
		if rep := Check(ops, Config{}); rep.Counts[RuleRefusal] == 0 {
			t.Errorf("%s, snapshot after it: got %s, want a %s violation", name, rep.Summary(), RuleRefusal)
		}
	}
}

// TestCheckAborted: aborted calls are counted, in the summary too, and a
// violation names the isolation level of a call in a transaction.
func TestCheckAborted(t *testing.T) {
	ops := []Op{
		op(Acquire, OK, "a", "L", 2, 0, 1),
		op(Release, OK, "a", "L", 2, 2, 3),
		atLevel(op(Acquire, Aborted, "b", "L", 0, 5, 6), Serializable),
		atLevel(op(Acquire, OK, "b", "L", 1, 10, 11), RepeatableRead),
	}
	rep := Check(ops, Config{})
	if rep.Outcomes[Aborted] != 1 || !strings.Contains(rep.Summary(), "1 aborted") {
		t.Fatalf("got %s, want 1 aborted", rep.Summary())
	}
	if rep.Counts[RuleFenceOrder] != 1 || !strings.Contains(rep.Violations[0].String(), "at repeatable read") {
		t.Fatalf("got %v, want one %s violation naming the level", rep.Violations, RuleFenceOrder)
	}
}
