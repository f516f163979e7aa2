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
	// tokens a key's committed decisions spent are at most burst + (t2 -
	// t1) / emission, where a reservation spends its amount at its
	// decision and gives back, once, either amount - actual at the
	// committed settle that settled it or its whole amount at its expiry:
	// spent = takes + settled actuals + amounts of reservations still
	// live; an expired unsettled reservation spends nothing.
	RuleLimitBound = "limit-bound"
	// RuleLimitReplay: a key decided only at exact clock readings
	// (LimitEvent.Lo == Hi for every event) decides as GCRA replayed over
	// its committed events and its reservations' expiries in clock order,
	// to the microsecond: every allowed decision allowed, every refused
	// one refused, and the final state equal to the server's.
	RuleLimitReplay = "limit-replay"
	// RuleLimitSettle: a settle settles a reservation only before its
	// expiry on the server's clock, and at most once per key.
	RuleLimitSettle = "limit-settle"
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
	// back (<= 0, a settle's refund).
	Delta int
	// Allowed is the decision; a refused event spent nothing (Delta is
	// what it asked for). For a settle: whether it settled.
	Allowed bool
	// Reservation is the reservation a reserve made or a settle settled;
	// 0 for a take.
	Reservation int64
	// Expires is a reservation's expiry on the server's clock (a reserve's
	// event): unless a committed settle settled it, its Delta goes back
	// to the key then.
	Expires time.Time
	// Settle marks a settle's event.
	Settle bool
	// Lo and Hi bound the server's clock reading the key's decision was
	// made at: equal when the function returned the key's own reading
	// (decided_at), else Lo is an earlier reading of the same call and Hi a
	// later one (the other keys of a reserve_all).
	Lo, Hi time.Time
}

// LimitFinal is a key's state as the server reports it after the history
// (pglease.peek): At, its clock reading, and Tat, the theoretical arrival
// time as of At (decided_at + reset_in: At when the bucket is full).
type LimitFinal struct {
	At, Tat time.Time
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
// the bound of pglease's GCRA (RuleLimitBound), on the server's clock,
// checks settles against their reservations (RuleLimitSettle), and
// replays the keys decided at exact readings (RuleLimitReplay), comparing
// the replay's state with final, each key's as the server reports it
// after the history (a key missing from final is not compared).
//
// A reservation's expiry is an event of its own: at Expires, unless a
// committed settle settled the reservation, its amount goes back to the
// key (the server gives it back lazily, at the first call that locks the
// bucket after Expires, which decides the same as if it had at Expires).
//
// The bound is checked soundly for events known only within [Lo, Hi]: a
// spend counts in a span only when [Lo, Hi] lies inside it, and a refund
// whenever it may; so a violation reported is one of every order the
// readings could have had. Spans start at some event's Lo and end at some
// event's Hi (the others spend no more over a longer time).
func CheckLimits(events []LimitEvent, limits map[string]Limit, final map[string]LimitFinal) LimitReport {
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
		evs = append(evs, expiries(&rep, key, evs)...)
		checkBound(&rep, key, evs, lim)
		exact := true
		for _, e := range evs {
			exact = exact && e.Lo.Equal(e.Hi)
		}
		if exact {
			rep.Replayed++
			f, hasFinal := final[key]
			replay(&rep, key, evs, lim, f, hasFinal)
		}
	}
	return rep
}

// expiries checks RuleLimitSettle for one key and returns the give-backs
// of its reservations that no committed settle settled: one refund of the
// whole amount each, at the reservation's expiry.
func expiries(rep *LimitReport, key string, evs []LimitEvent) []LimitEvent {
	reserved := map[int64]LimitEvent{}
	for _, e := range evs {
		if e.Reservation != 0 && !e.Settle && e.Allowed {
			reserved[e.Reservation] = e
		}
	}
	settled := map[int64]bool{}
	for _, e := range evs {
		if !e.Settle || !e.Allowed {
			continue
		}
		r, ok := reserved[e.Reservation]
		switch {
		case !ok:
			rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitSettle,
				Detail: fmt.Sprintf("key %q, op %d: settled reservation %d, which no committed reserve of the key made", key, e.Op, e.Reservation)})
		case settled[e.Reservation]:
			rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitSettle,
				Detail: fmt.Sprintf("key %q, op %d: settled reservation %d a second time", key, e.Op, e.Reservation)})
		case !e.Hi.Before(r.Expires):
			rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitSettle,
				Detail: fmt.Sprintf("key %q, op %d: settled reservation %d at %s, not before its expiry %s",
					key, e.Op, e.Reservation, e.Hi.Format(time.RFC3339Nano), r.Expires.Format(time.RFC3339Nano))})
		}
		settled[e.Reservation] = true
	}
	var back []LimitEvent
	for id, r := range reserved {
		if !settled[id] {
			back = append(back, LimitEvent{Op: r.Op, Key: key, Delta: -r.Delta, Allowed: true,
				Reservation: id, Lo: r.Expires, Hi: r.Expires})
		}
	}
	slices.SortFunc(back, func(a, b LimitEvent) int { return a.Lo.Compare(b.Lo) })
	return back
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
	// At one reading, refunds first: they may have been first (an expiry
	// at a call's own reading was).
	slices.SortStableFunc(byHi, func(a, b LimitEvent) int {
		return cmp.Or(a.Hi.Compare(b.Hi), cmp.Compare(a.Delta, b.Delta))
	})
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
func replay(rep *LimitReport, key string, evs []LimitEvent, lim Limit, final LimitFinal, hasFinal bool) {
	evs = slices.Clone(evs)
	if hasFinal {
		// Expiries after the server's final reading have not happened.
		evs = slices.DeleteFunc(evs, func(e LimitEvent) bool { return isExpiry(e) && e.Lo.After(final.At) })
	}
	// Spends and refunds of one key serialise on its row lock and read the
	// clock after it: clock order is their order; an expiry at a call's
	// own reading is given back before it decides. Equal readings keep the
	// log's order.
	slices.SortStableFunc(evs, func(a, b LimitEvent) int {
		return cmp.Or(cmp.Compare(a.Lo.UnixMicro(), b.Lo.UnixMicro()), -cmp.Compare(b2i(isExpiry(a)), b2i(isExpiry(b))))
	})
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
		case e.Settle && !e.Allowed:
			// A settle refused: nothing given back.
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
	if !hasFinal || !has {
		return
	}
	// The server's state as of its final reading: the replay's, or that
	// reading when the bucket is full by then.
	want := max(tat, final.At.UnixMicro())
	if final.Tat.UnixMicro() != want {
		rep.Violations = append(rep.Violations, Violation{Rule: RuleLimitReplay,
			Detail: fmt.Sprintf("key %q: the server's state at %s is %s, the replay's %s",
				key, final.At.Format(time.RFC3339Nano), final.Tat.Format(time.RFC3339Nano),
				time.UnixMicro(want).UTC().Format(time.RFC3339Nano))})
	}
}

// isExpiry tells the give-back of an expired reservation (made by
// expiries) from the events the server logged.
func isExpiry(e LimitEvent) bool { return e.Reservation != 0 && !e.Settle && e.Delta < 0 }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
