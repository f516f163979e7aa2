package history

import (
	"strings"
	"testing"
	"time"
)

// TestCheckLimits: histories that keep the bound pass, exactly replayed;
// one token too many in a span, a refund not given, a decision the
// replay disagrees with, or a final state that differs fail.
func TestCheckLimits(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	lim := map[string]Limit{"k": {Emission: 100 * time.Millisecond, Burst: 2}}
	spend := func(op int64, ms, n int, ok bool) LimitEvent {
		return LimitEvent{Op: op, Key: "k", Delta: n, Allowed: ok, Lo: at(ms), Hi: at(ms)}
	}
	for _, tc := range []struct {
		name  string
		evs   []LimitEvent
		final map[string]time.Time
		rule  string
	}{
		{name: "burst then the rate", evs: []LimitEvent{spend(1, 0, 2, true), spend(2, 50, 1, false), spend(3, 100, 1, true)},
			final: map[string]time.Time{"k": at(300)}},
		{name: "a refund makes room", evs: []LimitEvent{spend(1, 0, 2, true), {Op: 2, Key: "k", Delta: -2, Allowed: true, Lo: at(10), Hi: at(10)}, spend(3, 20, 2, true)}},
		{name: "one too many", evs: []LimitEvent{spend(1, 0, 2, true), spend(2, 50, 1, true)}, rule: RuleLimitBound},
		{name: "a refusal the replay allows", evs: []LimitEvent{spend(1, 0, 1, true), spend(2, 50, 1, false)}, rule: RuleLimitReplay},
		{name: "a final state that differs", evs: []LimitEvent{spend(1, 0, 1, true)}, final: map[string]time.Time{"k": at(200)}, rule: RuleLimitReplay},
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
