package history

import (
	"strings"
	"testing"
	"time"
)

// TestCheckLimits: histories that keep the bound pass, exactly replayed;
// one token too many in a span, a refund not given, an expiry given back
// twice, a settle after the expiry, a decision the replay disagrees with,
// or a final state that differs fail.
func TestCheckLimits(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lim := map[string]Limit{"k": {Emission: 100 * time.Millisecond, Burst: 2}}
	spend := func(op int64, ms, n int, ok bool) LimitEvent {
		return LimitEvent{Op: op, Key: "k", Delta: n, Allowed: ok, Lo: at(ms), Hi: at(ms)}
	}
	// reserve: reservation id of n tokens at ms, expiring at expires.
	reserve := func(id int64, ms, n, expires int) LimitEvent {
		return LimitEvent{Op: id, Key: "k", Delta: n, Allowed: true, Reservation: id, Expires: at(expires), Lo: at(ms), Hi: at(ms)}
	}
	// settle: reservation id settled (or not) at ms, refunded given back.
	settle := func(id int64, ms, refunded int, ok bool) LimitEvent {
		return LimitEvent{Op: 100 + id, Key: "k", Delta: -refunded, Allowed: ok, Reservation: id, Settle: true, Lo: at(ms), Hi: at(ms)}
	}
	fin := func(atMs, tatMs int) map[string]LimitFinal {
		return map[string]LimitFinal{"k": {At: at(atMs), Tat: at(tatMs)}}
	}
	for _, tc := range []struct {
		name  string
		evs   []LimitEvent
		final map[string]LimitFinal
		rule  string
	}{
		{name: "burst then the rate", evs: []LimitEvent{spend(1, 0, 2, true), spend(2, 50, 1, false), spend(3, 100, 1, true)},
			final: fin(100, 300)},
		{name: "an expiry gives the amount back", evs: []LimitEvent{reserve(1, 0, 2, 10), spend(2, 10, 2, true), spend(3, 20, 1, false)},
			final: fin(20, 210)},
		{name: "an expiry not yet at the final reading", evs: []LimitEvent{reserve(1, 0, 2, 500)}, final: fin(20, 200)},
		{name: "a settled reservation does not come back at its expiry",
			evs: []LimitEvent{reserve(1, 0, 2, 50), settle(1, 10, 1, true), spend(2, 20, 1, true), spend(3, 60, 1, false)}, final: fin(60, 200)},
		{name: "a settle refused after the expiry", evs: []LimitEvent{reserve(1, 0, 2, 10), settle(1, 15, 0, false), spend(2, 20, 2, true)}},
		{name: "an expiry given back twice", evs: []LimitEvent{reserve(1, 0, 2, 10), spend(2, 20, 2, true), spend(3, 30, 2, true)},
			rule: RuleLimitBound},
		{name: "a settle after the expiry", evs: []LimitEvent{reserve(1, 0, 2, 10), settle(1, 10, 0, true)}, rule: RuleLimitSettle},
		{name: "a reservation settled twice", evs: []LimitEvent{reserve(1, 0, 2, 50), settle(1, 10, 1, true), settle(1, 20, 1, true)},
			rule: RuleLimitSettle},
		{name: "a final state that misses an expiry", evs: []LimitEvent{reserve(1, 0, 2, 10)}, final: fin(20, 200), rule: RuleLimitReplay},
		{name: "a refund makes room", evs: []LimitEvent{spend(1, 0, 2, true), {Op: 2, Key: "k", Delta: -2, Allowed: true, Lo: at(10), Hi: at(10)}, spend(3, 20, 2, true)}},
		{name: "one too many", evs: []LimitEvent{spend(1, 0, 2, true), spend(2, 50, 1, true)}, rule: RuleLimitBound},
		{name: "a refusal the replay allows", evs: []LimitEvent{spend(1, 0, 1, true), spend(2, 50, 1, false)}, rule: RuleLimitReplay},
		{name: "a final state that differs", evs: []LimitEvent{spend(1, 0, 1, true)}, final: fin(0, 200), rule: RuleLimitReplay},
		{name: "inexact readings, certainly over", evs: []LimitEvent{spend(1, 0, 2, true), {Op: 2, Key: "k", Delta: 1, Allowed: true, Lo: at(10), Hi: at(20)}},
			rule: RuleLimitBound},
		{name: "inexact readings, possibly not over", evs: []LimitEvent{{Op: 1, Key: "k", Delta: 2, Allowed: true, Lo: at(0), Hi: at(10)}, spend(2, 105, 1, true)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := CheckLimits(tc.evs, lim, tc.final)
			if tc.rule == "" && len(rep.Violations) > 0 {
				t.Fatalf("got %v; want none", rep.Violations)
			}
			if tc.rule != "" && (len(rep.Violations) == 0 || rep.Violations[0].Rule != tc.rule) {
				t.Fatalf("got %v; want a violation of %s", rep.Violations, tc.rule)
			}
			if !strings.Contains(rep.Summary(), "1 keys") {
				t.Fatalf("summary %q: want 1 key", rep.Summary())
			}
		})
	}
}
