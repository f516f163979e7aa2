package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Rules of CheckLimits.
const (
	// RuleLimitBound: over any span [t1, t2] of the server's clock, the
	// tokens a key's committed decisions spent, less what committed
	// settles of them gave back, are at most burst + (t2 - t1) / emission.
	RuleLimitBound = "limit-bound"
	// RuleLimitReplay: a key decided only at exact clock readings
	// (LimitEvent.Lo == Hi for every event) decides as GCRA replayed over
	// its committed events in clock order, to the microsecond: every
	// allowed decision allowed, every refused one refused, and the final
	// state equal to the server's.
	RuleLimitReplay = "limit-replay"
)

// Limit is a key's limit as pglease.limits holds it.
type Limit struct {
	// Emission is the time one token takes to come back (per / rate,
	// rounded up to a whole microsecond).
	Emission time.Duration
	// Burst is the most tokens the bucket holds.
	Burst int
}

// LimitEvent is one committed decision of a key, as the server logged it
// in the transaction that made it (so a rolled-back spend has no event).
type LimitEvent struct {
	// Op identifies the client's call (several events for a multi-key
	// call).
	Op int64
	// Key is the rate-limited key.
	Key string
	// Delta is the tokens spent (> 0, a take or a reservation) or given
	// back (< 0, a settle's refund).
	Delta int
	// Allowed is the decision; a refused event spent nothing (Delta is
	// what it asked for).
	Allowed bool
	// Lo and Hi bound the server's clock reading the key's decision was
	// made at: equal when the function returned the key's own reading
	// (decided_at), else Lo is an earlier reading of the same call and Hi a
	// later one (the other keys of a reserve_all).
	Lo, Hi time.Time
}

// LimitReport is what CheckLimits found.
type LimitReport struct {
	// Keys is how many keys were checked, Events how many events, Spans
	// how many spans [t1, t2] were checked against the bound.
	Keys, Events, Spans int
	// Replayed is how many keys were replayed exactly (RuleLimitReplay).
	Replayed int
	// MaxRatio is the highest spent / (burst + elapsed / emission) over
	// every span checked: at most 1 when the bound holds.
	MaxRatio float64
	// MaxRatioKey and MaxRatioSpan say where it was seen.
	MaxRatioKey  string
	MaxRatioSpan time.Duration
	// Violations found, none when the history holds.
	Violations []Violation
}

// Summary is the report on one line.
func (r LimitReport) Summary() string {
	return fmt.Sprintf("%d keys, %d committed decisions, %d spans checked against burst + elapsed/emission, "+
		"%d keys replayed exactly; max spent/bound %.6f (key %q, span %s); %d violations",
		r.Keys, r.Events, r.Spans, r.Replayed, r.MaxRatio, r.MaxRatioKey, r.MaxRatioSpan, len(r.Violations))
}

// CheckLimits checks the committed decisions of rate-limited keys against
// the bound of pglease's GCRA (RuleLimitBound), on the server's clock, and
// replays the keys decided at exact readings (RuleLimitReplay), comparing
// the replay's final state with final, each key's theoretical arrival time
// as pglease.limit_state holds it (a key missing from final is not
// compared).
//
// The bound is checked soundly for events known only within [Lo, Hi]: a
// spend counts in a span only when [Lo, Hi] lies inside it, and a refund
// whenever it may; so a violation reported is one of every order the
// readings could have had. Spans start at some event's Lo and end at some
// event's Hi (the others spend no more over a longer time).
func CheckLimits(events []LimitEvent, limits map[string]Limit, final map[string]time.Time) LimitReport {
	var rep LimitReport
	byKey := map[string][]LimitEvent{}
	for _, e := range events {
		byKey[e.Key] = append(byKey[e.Key], e)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
		evs := byKey[key]
		lim, ok := limits[key]
		if !ok || lim.Emission <= 0 || lim.Burst < 1 {
			rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitBound,
				Detail: fmt.Sprintf("key %q has events but no limit to check them against", key)})
			continue
		}
		rep.Keys++
		rep.Events += len(evs)
		checkBound(&rep, key, evs, lim)
		exact := true
		for _, e := range evs {
			exact = exact && e.Lo.Equal(e.Hi)
		}
		if exact {
			rep.Replayed++
			replay(&rep, key, evs, lim, final)
		}
	}
	return rep
}

// checkBound checks RuleLimitBound for one key.
func checkBound(rep *LimitReport, key string, evs []LimitEvent, lim Limit) {
	var moves []LimitEvent // allowed spends and refunds
	for _, e := range evs {
		if e.Allowed && e.Delta != 0 {
			moves = append(moves, e)
		}
	}
	byHi := slices.Clone(moves)
	slices.SortStableFunc(byHi, func(a, b LimitEvent) int { return a.Hi.Compare(b.Hi) })
	starts := make([]time.Time, 0, len(moves))
	for _, e := range moves {
		starts = append(starts, e.Lo)
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	starts = slices.CompactFunc(starts, func(a, b time.Time) bool { return a.Equal(b) })
	emit := lim.Emission.Microseconds()
	tol := emit * int64(lim.Burst)
	for _, t1 := range starts {
		var spent int64
		for _, e := range byHi {
			if e.Hi.Before(t1) {
				continue // before the span
			}
			// A spend counts when certainly inside (it began in the span),
			// a refund when possibly inside.
			if e.Delta > 0 && e.Lo.Before(t1) {
				continue
			}
			spent += int64(e.Delta)
			if e.Delta < 0 {
				continue // a span ending at a refund spends no more than the one before it
			}
			rep.Spans++
			elapsed := e.Hi.Sub(t1).Microseconds()
			// spent * emission <= burst * emission + elapsed, in whole
			// microseconds: exact.
			bound := tol + elapsed
			if ratio := float64(spent*emit) / float64(bound); ratio > rep.MaxRatio {
				rep.MaxRatio, rep.MaxRatioKey, rep.MaxRatioSpan = ratio, key, e.Hi.Sub(t1)
			}
			if spent*emit > bound {
				rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitBound,
					Detail: fmt.Sprintf("key %q spent %d tokens net over the %s from %s to %s; its limit allows at most %d + %s / %s",
						key, spent, e.Hi.Sub(t1), t1.Format(time.RFC3339Nano), e.Hi.Format(time.RFC3339Nano),
						lim.Burst, e.Hi.Sub(t1), lim.Emission)})
				return // one per key is enough to read
			}
		}
	}
}

// replay checks RuleLimitReplay for one key whose events are all exact.
func replay(rep *LimitReport, key string, evs []LimitEvent, lim Limit, final map[string]time.Time) {
	evs = slices.Clone(evs)
	// Spends and refunds of one key serialise on its row lock and read the
	// clock after it: clock order is their order. Equal readings keep the
	// log's order.
	slices.SortStableFunc(evs, func(a, b LimitEvent) int { return cmp.Compare(a.Lo.UnixMicro(), b.Lo.UnixMicro()) })
	emit := lim.Emission.Microseconds()
	tol := emit * int64(lim.Burst)
	var tat int64
	has := false
	for _, e := range evs {
		now := e.Lo.UnixMicro()
		base := now
		if has && tat > now {
			base = tat
		}
		switch {
		case e.Delta > 0:
			next := base + emit*int64(e.Delta)
			want := next-now <= tol
			if want != e.Allowed {
				rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitReplay,
					Detail: fmt.Sprintf("key %q, op %d: %d tokens at %s: the server said allowed=%v, the replay %v (state %d µs ahead)",
						key, e.Op, e.Delta, e.Lo.Format(time.RFC3339Nano), e.Allowed, want, base-now)})
				return
			}
			if want {
				tat, has = next, true
			}
		case e.Delta < 0 && has:
			tat = max(base+emit*int64(e.Delta), now)
		}
	}
	if f, ok := final[key]; ok && has && f.UnixMicro() != tat {
		rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitReplay,
			Detail: fmt.Sprintf("key %q: the server's state is %s, the replay's %s",
				key, f.Format(time.RFC3339Nano), time.UnixMicro(tat).UTC().Format(time.RFC3339Nano))})
	}
}
