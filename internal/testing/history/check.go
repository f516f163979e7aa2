package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// forever is a time after every other.
const forever = time.Duration(math.MaxInt64)

// DefaultSlack is Config.Slack's default.
const DefaultSlack = time.Millisecond

// Rules a Violation can break.
const (
	// RuleSequential: a holder had two calls in flight at once. Not a
	// property of pglease but a precondition of the checker (the harness
	// is broken).
	RuleSequential = "sequential-holder"
	// RuleTwoHolders: one fence of one lease (or slot) granted to two
	// holders.
	RuleTwoHolders = "fence-two-holders"
	// RuleFenceOrder: a tenure granted after another had been granted (in
	// real time) got a fence that is not larger.
	RuleFenceOrder = "fence-order"
	// RuleOverlap: two tenures of one lease, or of one slot, certainly live
	// at the same instant.
	RuleOverlap = "overlap"
	// RuleCapacity: more live holders of a scope than its capacity, or a
	// claim with capacity c granted while c others were certainly live.
	RuleCapacity = "over-capacity"
	// RuleOutside: a renewal, release, re-grant or fenced write succeeded
	// where its tenure cannot have been live: before it was granted, after
	// it was released or refused, after its latest possible expiry, while
	// another tenure of the same lease or slot was certainly live, or
	// under a fence never granted.
	RuleOutside = "outside-tenure"
	// RuleRefusal: a refusal that no possible state explains: an acquire
	// refused in the name of a tenure that cannot have been live, or
	// reporting a time left (expires_in) that is negative or that the
	// tenure's expiry at the decision cannot have been; or a claim refused
	// with more live holders than could have been.
	RuleRefusal = "bad-refusal"
)

// Config tunes Check. The zero value is usable.
type Config struct {
	// Slack absorbs the difference in rate between the server's clock and
	// the recorder's: certain intervals are shrunk by it and possible ones
	// grown by it. Defaults to DefaultSlack (1ms).
	Slack time.Duration
	// Capacity is the largest number of live holders each slot scope may
	// have. Defaults, per scope, to the largest capacity any of its claims
	// passed.
	Capacity map[string]int
	// Coalescing lists holders whose calls on different names may be in
	// flight at once: a client shared by goroutines, each on names of its
	// own, whose concurrent calls go out in one batched call (pglease's
	// coalescing, docs/go.md#batched-calls). Their calls must be
	// sequential per name; every other holder's, across all names.
	Coalescing map[string]bool
}

// Violation is one breach of a rule, with the ops that show it.
type Violation struct {
	Rule   string
	Detail string
	Ops    []Op
}

// String describes the violation on one or more lines.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Rule, v.Detail)
	for _, op := range v.Ops {
		fmt.Fprintf(&b, "\n\t%s", op)
	}
	return b.String()
}

// maxKept bounds the violations a Report keeps per rule; all are counted.
const maxKept = 20

// Report is what Check found.
type Report struct {
	// Ops is the number of operations checked.
	Ops int
	// Outcomes counts the ops per outcome.
	Outcomes map[Outcome]int
	// Tenures is the number of distinct tenures (lease or slot, fence).
	Tenures int
	// MaxLive is, per slot scope, the largest number of units held by
	// certainly-live tenures at one instant (live holders, when every claim
	// takes one unit).
	MaxLive map[string]int
	// Unverifiable counts refusals naming a tenure that only an operation
	// with an unknown outcome can have granted.
	Unverifiable int
	// SnapshotRefusals counts refusals at RepeatableRead or Serializable
	// that no state of the server during the call explains, but one since
	// the transaction's snapshot does: an acquire refused in the name of a
	// tenure released (or with the expiry it had) before a renewal or
	// release committed after the snapshot, a claim counting a slot
	// released after it (see checkRefusals). Not violations: what the
	// server read in the snapshot.
	SnapshotRefusals int
	// Counts counts violations per rule; Violations keeps the first few of
	// each.
	Counts     map[string]int
	Violations []Violation
}

// OK reports whether no rule was broken.
func (r *Report) OK() bool { return len(r.Counts) == 0 }

// Summary describes the report in one line.
func (r *Report) Summary() string {
	s := fmt.Sprintf("%d ops (%d ok, %d refused, %d unknown", r.Ops, r.Outcomes[OK], r.Outcomes[Refused], r.Outcomes[Unknown])
	if n := r.Outcomes[Aborted]; n > 0 {
		s += fmt.Sprintf(", %d aborted", n)
	}
	s += fmt.Sprintf("), %d tenures, %d violations", r.Tenures, r.total())
	if r.SnapshotRefusals > 0 {
		s += fmt.Sprintf(", %d refusals explained only by their snapshot", r.SnapshotRefusals)
	}
	if len(r.MaxLive) > 0 {
		scopes := make([]string, 0, len(r.MaxLive))
		for sc := range r.MaxLive {
			scopes = append(scopes, sc)
		}
		slices.Sort(scopes)
		parts := make([]string, len(scopes))
		for i, sc := range scopes {
			parts[i] = fmt.Sprintf("%s=%d", sc, r.MaxLive[sc])
		}
		s += ", max live " + strings.Join(parts, " ")
	}
	return s
}

func (r *Report) total() int {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return n
}

func (r *Report) add(rule, detail string, ops ...*Op) {
	if r.Counts == nil {
		r.Counts = map[string]int{}
	}
	r.Counts[rule]++
	if r.Counts[rule] > maxKept {
		return
	}
	v := Violation{Rule: rule, Detail: detail}
	for _, op := range ops {
		v.Ops = append(v.Ops, *op)
	}
	r.Violations = append(r.Violations, v)
}

// key is one lease, or one slot of a scope.
type key struct {
	slot bool
	name string
	num  int
}

func (k key) String() string {
	if k.slot {
		return fmt.Sprintf("slot %d of scope %q", k.num, k.name)
	}
	return fmt.Sprintf("lease %q", k.name)
}

// tkey is one tenure: a lease or slot and a fence.
type tkey struct {
	key
	fence int64
}

// pkey is a holder's acquires (slot false) or claims of one name.
type pkey struct {
	slot         bool
	name, holder string
}

// seg is a half-open interval of the recorder's clock.
type seg struct{ start, end time.Duration }

// tenure gathers what the history says about one tenure.
type tenure struct {
	tk      tkey
	holder  string
	grants  []*Op // OK acquires or claims that returned it (the first began it)
	ops     []*Op // renewals, releases and writes that carried its fence
	pending []*Op // acquires or claims of its holder with unknown outcome
	certain []seg // when it was certainly live (merged, sorted)
	// raw are the segments of certain before merging, one per OK
	// extension: throughout one, the row's expiry is at least its end.
	raw    []seg
	start  time.Duration
	endMax time.Duration // latest possible end
}

// grantOp is the op that began the tenure.
func (t *tenure) grantOp() *Op { return t.grants[0] }

// extends returns the ops that may have set the tenure's expiry: its
// grants, its renewals (OK or unknown) and its holder's acquires or claims
// with unknown outcome, sorted by Call.
func (t *tenure) extends() []*Op {
	var ext []*Op
	ext = append(ext, t.grants...)
	for _, op := range t.ops {
		if (op.Kind == Renew || op.Kind == RenewSlot) && op.Outcome != Refused && op.Holder == t.holder {
			ext = append(ext, op)
		}
	}
	ext = append(ext, t.pending...)
	slices.SortFunc(ext, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })
	return ext
}

// ends returns the releases (OK or unknown) by the holder.
func (t *tenure) ends() []*Op {
	var out []*Op
	for _, op := range t.ops {
		if (op.Kind == Release || op.Kind == ReleaseSlot) && op.Outcome != Refused && op.Holder == t.holder {
			out = append(out, op)
		}
	}
	return out
}

// mayRevive reports whether an operation of unknown outcome could have
// extended the tenure late, with a clock reading taken before a refusal.
func (t *tenure) mayRevive() bool {
	if len(t.pending) > 0 {
		return true
	}
	for _, op := range t.ops {
		if (op.Kind == Renew || op.Kind == RenewSlot) && op.Outcome == Unknown {
			return true
		}
	}
	return false
}

// computeCertain sets t.certain: the instants at which the tenure was
// certainly live. After an OK extension j committed (by j.Return), the
// latest committed version of the row expires at least at the Call+TTL of
// whichever extension committed last; candidates are j and every later
// extension already called (an unknown one: called at any time before).
// A release (OK or unknown) may end it from its Call on.
func (t *tenure) computeCertain(slack time.Duration) {
	ext := t.extends()
	ends := t.ends()
	var segs []seg
	for _, j := range ext {
		if j.Outcome != OK {
			continue
		}
		s, e := j.Return, j.Call+j.TTL
		for _, x := range ext {
			if x == j || (x.Outcome == OK && x.Call < j.Call) {
				continue
			}
			if x.Call >= e {
				break
			}
			e = min(e, x.Call+x.TTL)
		}
		for _, x := range ends {
			if x.Outcome == OK && x.Call < j.Call {
				continue
			}
			e = min(e, x.Call)
		}
		if e -= slack; e > s {
			segs = append(segs, seg{s, e})
		}
	}
	t.raw = slices.Clone(segs)
	t.certain = merge(segs)
}

// possibleEnd returns the latest instant the tenure can have been live
// until, judging by the extensions called before `before` other than
// `except`: an OK one expires at most TTL after it returned (plus slack),
// an unknown one may have happened at any time.
func (t *tenure) possibleEnd(before time.Duration, except *Op, slack time.Duration) time.Duration {
	end := time.Duration(math.MinInt64)
	for _, y := range t.extends() {
		if y == except || y.Call >= before {
			continue
		}
		if y.Outcome == Unknown {
			return forever
		}
		end = max(end, y.Return+y.TTL+slack)
	}
	return end
}

// definiteEnd returns the op that proves the tenure over earliest (an OK
// release, or a refusal of one of its ops when no late extension can have
// revived it), other than except, or nil.
func (t *tenure) definiteEnd(except *Op) *Op {
	revive := t.mayRevive()
	var best *Op
	for _, op := range t.ops {
		if op == except {
			continue
		}
		isEnd := false
		switch {
		case (op.Kind == Release || op.Kind == ReleaseSlot) && op.Outcome == OK && op.Holder == t.holder:
			isEnd = true
		case op.Outcome == Refused && !revive && (op.Holder == t.holder || op.Kind == Write):
			isEnd = true
		}
		if isEnd && (best == nil || op.Return < best.Return) {
			best = op
		}
	}
	return best
}

// merge sorts and merges overlapping or touching segments.
func merge(segs []seg) []seg {
	if len(segs) == 0 {
		return nil
	}
	slices.SortFunc(segs, func(a, b seg) int { return cmp.Compare(a.start, b.start) })
	out := segs[:1]
	for _, s := range segs[1:] {
		last := &out[len(out)-1]
		if s.start <= last.end {
			last.end = max(last.end, s.end)
			continue
		}
		out = append(out, s)
	}
	return out
}

// owned is a segment of a tenure.
type owned struct {
	seg
	t *tenure
}

// coverIndex answers "which tenures were certainly live throughout [a, b]".
type coverIndex struct {
	segs   []owned         // sorted by start
	maxEnd []time.Duration // prefix maximum of end
}

func newCoverIndex(ts []*tenure) *coverIndex {
	ci := &coverIndex{}
	for _, t := range ts {
		for _, s := range t.certain {
			ci.segs = append(ci.segs, owned{s, t})
		}
	}
	slices.SortFunc(ci.segs, func(a, b owned) int { return cmp.Compare(a.start, b.start) })
	ci.maxEnd = make([]time.Duration, len(ci.segs))
	m := time.Duration(math.MinInt64)
	for i, s := range ci.segs {
		m = max(m, s.end)
		ci.maxEnd[i] = m
	}
	return ci
}

// covering returns the tenures other than except with a certain segment
// containing [a, b].
func (ci *coverIndex) covering(a, b time.Duration, except *tenure) []*tenure {
	i := sort.Search(len(ci.segs), func(i int) bool { return ci.segs[i].start > a }) - 1
	var out []*tenure
	for ; i >= 0 && ci.maxEnd[i] >= b; i-- {
		s := ci.segs[i]
		if s.end >= b && s.t != except && !slices.Contains(out, s.t) {
			out = append(out, s.t)
		}
	}
	return out
}

// Check checks a history of lease and slot operations against pglease's
// contract and returns what it found. See the package documentation for
// the rules and why each is sound.
func Check(ops []Op, cfg Config) Report {
	slack := cmp.Or(cfg.Slack, DefaultSlack)
	rep := Report{Ops: len(ops), Outcomes: map[Outcome]int{}, MaxLive: map[string]int{}}
	all := make([]*Op, len(ops))
	for i := range ops {
		all[i] = &ops[i]
		rep.Outcomes[ops[i].Outcome]++
	}
	slices.SortStableFunc(all, func(a, b *Op) int { return cmp.Compare(a.Call, b.Call) })

	checkSequential(&rep, all, cfg.Coalescing)
	// Aborted calls changed nothing and told nothing: past the check that
	// their holder waited for them, they play no part.
	all = slices.DeleteFunc(all, func(op *Op) bool { return op.Outcome == Aborted })

	// Tenures, from the grants; then the ops that carry their fences.
	tenures := map[tkey]*tenure{}
	byKey := map[key][]*tenure{}
	pending := map[pkey][]*Op{}
	capacity := map[string]int{}
	for _, op := range all {
		if op.Kind == Claim {
			capacity[op.Name] = max(capacity[op.Name], op.Capacity)
		}
		if (op.Kind == Acquire || op.Kind == Claim) && op.Outcome == Unknown {
			pk := pkey{op.Kind == Claim, op.Name, op.Holder}
			pending[pk] = append(pending[pk], op)
		}
		if (op.Kind != Acquire && op.Kind != Claim) || op.Outcome != OK {
			continue
		}
		tk := tkey{key{op.Kind == Claim, op.Name, op.Slot}, op.Fence}
		t := tenures[tk]
		if t == nil {
			t = &tenure{tk: tk, holder: op.Holder}
			tenures[tk] = t
			byKey[tk.key] = append(byKey[tk.key], t)
		} else if t.holder != op.Holder {
			rep.add(RuleTwoHolders, fmt.Sprintf("%s: fence %d granted to %s and to %s", tk.key, tk.fence, t.holder, op.Holder),
				t.grantOp(), op)
			continue
		}
		t.grants = append(t.grants, op)
	}
	for k, c := range cfg.Capacity {
		capacity[k] = c
	}
	rep.Tenures = len(tenures)

	// Attach the other ops; flag fenced ops under fences never granted.
	for _, op := range all {
		var tk tkey
		switch op.Kind {
		case Renew, Release, Write:
			tk = tkey{key{false, op.Name, 0}, op.Fence}
		case RenewSlot, ReleaseSlot:
			tk = tkey{key{true, op.Name, op.Slot}, op.Fence}
		default:
			continue
		}
		t := tenures[tk]
		if t == nil {
			if op.Outcome == OK {
				rep.add(RuleOutside, fmt.Sprintf("%s: %s succeeded under fence %d, which was never granted", tk.key, op.Kind, op.Fence), op)
			}
			continue
		}
		if op.Outcome == OK && op.Kind != Write && op.Holder != t.holder {
			rep.add(RuleOutside, fmt.Sprintf("%s: %s by %s succeeded on fence %d, granted to %s", tk.key, op.Kind, op.Holder, op.Fence, t.holder), t.grantOp(), op)
		}
		t.ops = append(t.ops, op)
	}
	for _, t := range tenures {
		t.pending = pending[pkey{t.tk.slot, t.tk.name, t.holder}]
		t.start = t.grantOp().Call
		for _, p := range t.pending {
			t.start = min(t.start, p.Call)
		}
		t.computeCertain(slack)
		t.endMax = t.possibleEnd(forever, nil, slack)
		if d := t.definiteEnd(nil); d != nil {
			t.endMax = min(t.endMax, d.Return+slack)
		}
		t.endMax = max(t.endMax, t.start+1)
	}

	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.num, b.num))
	})
	for _, k := range keys {
		ts := byKey[k]
		checkFenceOrder(&rep, k, ts)
		checkOverlap(&rep, k, ts)
		ci := newCoverIndex(ts)
		for _, t := range ts {
			checkInside(&rep, t, ci, slack)
		}
	}
	checkScopes(&rep, byKey, capacity)
	checkRefusals(&rep, all, tenures, byKey, pending, slack)
	return rep
}

// checkSequential verifies that each holder waited for each reply: on
// each name for the holders of coalescing, on every name for the others.
func checkSequential(rep *Report, all []*Op, coalescing map[string]bool) {
	last := map[[2]string]*Op{}
	for _, op := range all {
		k := [2]string{op.Holder, ""}
		if coalescing[op.Holder] {
			k[1] = op.Name
		}
		if p := last[k]; p != nil && op.Call < p.Return {
			rep.add(RuleSequential, fmt.Sprintf("holder %s called before its previous call returned", op.Holder), p, op)
		}
		if p := last[k]; p == nil || op.Return > p.Return {
			last[k] = op
		}
	}
}

// checkFenceOrder: a tenure whose grant was called after another's grant
// returned has a larger fence. The grants committed in that real-time
// order, and each new tenure's fence is the row's fence + 1.
func checkFenceOrder(rep *Report, k key, ts []*tenure) {
	byReturn := slices.Clone(ts)
	slices.SortFunc(byReturn, func(a, b *tenure) int { return cmp.Compare(a.grantOp().Return, b.grantOp().Return) })
	byCall := slices.Clone(ts)
	slices.SortFunc(byCall, func(a, b *tenure) int { return cmp.Compare(a.grantOp().Call, b.grantOp().Call) })
	var top *tenure // largest fence among grants returned so far
	i := 0
	for _, t := range byCall {
		for ; i < len(byReturn) && byReturn[i].grantOp().Return < t.grantOp().Call; i++ {
			if top == nil || byReturn[i].tk.fence > top.tk.fence {
				top = byReturn[i]
			}
		}
		if top != nil && t.tk.fence <= top.tk.fence {
			rep.add(RuleFenceOrder, fmt.Sprintf("%s: fence %d granted after fence %d had been", k, t.tk.fence, top.tk.fence),
				top.grantOp(), t.grantOp())
		}
	}
}

// checkOverlap: no two tenures of one lease or slot certainly live at once.
func checkOverlap(rep *Report, k key, ts []*tenure) {
	ci := newCoverIndex(ts)
	var cur owned
	for i, s := range ci.segs {
		if i > 0 && s.start < cur.end && s.t != cur.t {
			rep.add(RuleOverlap, fmt.Sprintf("%s: fences %d (%s) and %d (%s) both certainly live during [%s, %s]",
				k, cur.t.tk.fence, cur.t.holder, s.t.tk.fence, s.t.holder, s.start, min(s.end, cur.end)),
				cur.t.grantOp(), s.t.grantOp())
		}
		if i == 0 || s.end > cur.end {
			cur = s
		}
	}
}

// checkInside: every successful op of a tenure but its first grant falls
// where the tenure may have been live, and where no other tenure of the
// same lease or slot was certainly live throughout.
func checkInside(rep *Report, t *tenure, ci *coverIndex, slack time.Duration) {
	var ok []*Op
	ok = append(ok, t.grants...)
	for _, op := range t.ops {
		if op.Outcome == OK {
			ok = append(ok, op)
		}
	}
	for _, op := range ok {
		for _, o := range ci.covering(op.Call, op.Return, t) {
			rep.add(RuleOutside, fmt.Sprintf("%s: %s of fence %d succeeded while fence %d (%s) was certainly live throughout",
				t.tk.key, op.Kind, t.tk.fence, o.tk.fence, o.holder), o.grantOp(), op)
		}
		if op == t.grantOp() {
			continue
		}
		if op.Return < t.start {
			rep.add(RuleOutside, fmt.Sprintf("%s: %s of fence %d answered before the tenure was asked for", t.tk.key, op.Kind, t.tk.fence), t.grantOp(), op)
		}
		if end := t.possibleEnd(op.Return, op, slack); op.Call >= end {
			rep.add(RuleOutside, fmt.Sprintf("%s: %s of fence %d called %s after the tenure's latest possible expiry",
				t.tk.key, op.Kind, t.tk.fence, op.Call-end), t.grantOp(), op)
		}
		if d := t.definiteEnd(op); d != nil && d.Return <= op.Call {
			rep.add(RuleOutside, fmt.Sprintf("%s: %s of fence %d succeeded after the tenure had ended", t.tk.key, op.Kind, t.tk.fence), d, op)
		}
	}
}

// checkScopes: at no instant more units held by certainly-live tenures of
// a scope than its capacity; no claim of k units with capacity c granted
// while other tenures of the scope holding more than c - k units were
// certainly live throughout it.
func checkScopes(rep *Report, byKey map[key][]*tenure, capacity map[string]int) {
	scopes := map[string][]*tenure{}
	for k, ts := range byKey {
		if k.slot {
			scopes[k.name] = append(scopes[k.name], ts...)
		}
	}
	for scope, ts := range scopes {
		type edge struct {
			at    time.Duration
			delta int
			t     *tenure
		}
		var edges []edge
		for _, t := range ts {
			u := t.grantOp().units()
			for _, s := range t.certain {
				edges = append(edges, edge{s.start, +u, t}, edge{s.end, -u, t})
			}
		}
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
		live, top := 0, 0
		for _, e := range edges {
			live += e.delta
			if live > top {
				top = live
				if c := capacity[scope]; live > c {
					rep.add(RuleCapacity, fmt.Sprintf("scope %q: %d units held by certainly-live tenures at %s, capacity %d", scope, live, e.at, c), e.t.grantOp())
				}
			}
		}
		rep.MaxLive[scope] = top

		ci := newCoverIndex(ts)
		for _, t := range ts {
			g := t.grantOp()
			others := ci.covering(g.Call, g.Return, t)
			held := 0
			for _, o := range others {
				held += o.grantOp().units()
			}
			if held+g.units() > g.Capacity {
				ops := []*Op{g}
				for _, o := range others {
					ops = append(ops, o.grantOp())
				}
				rep.add(RuleCapacity, fmt.Sprintf("scope %q: claim of %d units with capacity %d granted while %d others holding %d units were certainly live",
					scope, g.units(), g.Capacity, len(others), held), ops...)
			}
		}
	}
}

// checkRefusals: a refused acquire names a tenure that may have been live
// during the call, with a time left that its expiry at the decision may
// have had; a refused claim reports no more live holders than may have
// been.
func checkRefusals(rep *Report, all []*Op, tenures map[tkey]*tenure, byKey map[key][]*tenure, pending map[pkey][]*Op, slack time.Duration) {
	// Possible intervals per scope, for counting.
	type bounds struct {
		starts, ends []time.Duration
		units        int // the most units any claim of the scope asked for
	}
	scopeBounds := map[string]*bounds{}
	for k, ts := range byKey {
		if !k.slot {
			continue
		}
		b := scopeBounds[k.name]
		if b == nil {
			b = &bounds{}
			scopeBounds[k.name] = b
		}
		for _, t := range ts {
			b.starts = append(b.starts, t.start)
			b.ends = append(b.ends, t.endMax)
			b.units = max(b.units, t.grantOp().units())
		}
	}
	unknownClaims := map[string][]time.Duration{}
	unknownUnits := map[string]int{}
	for pk, ops := range pending {
		if pk.slot {
			for _, op := range ops {
				unknownClaims[pk.name] = append(unknownClaims[pk.name], op.Call)
				unknownUnits[pk.name] = max(unknownUnits[pk.name], op.units())
			}
		}
	}
	for _, b := range scopeBounds {
		slices.Sort(b.starts)
		slices.Sort(b.ends)
	}
	for _, u := range unknownClaims {
		slices.Sort(u)
	}
	countBefore := func(xs []time.Duration, t time.Duration) int {
		return sort.Search(len(xs), func(i int) bool { return xs[i] >= t })
	}
	for _, op := range all {
		if op.Outcome != Refused {
			continue
		}
		switch op.Kind {
		case Acquire:
			if op.Other == op.Holder {
				rep.add(RuleRefusal, fmt.Sprintf("lease %q: acquire refused in the name of the caller itself", op.Name), op)
				continue
			}
			t := tenures[tkey{key{false, op.Name, 0}, op.Fence}]
			if t == nil {
				if len(pending[pkey{false, op.Name, op.Other}]) > 0 {
					rep.Unverifiable++
					continue
				}
				rep.add(RuleRefusal, fmt.Sprintf("lease %q: acquire refused in the name of %s, fence %d, never granted", op.Name, op.Other, op.Fence), op)
				continue
			}
			if t.holder != op.Other {
				rep.add(RuleRefusal, fmt.Sprintf("lease %q: acquire refused in the name of %s, fence %d, granted to %s", op.Name, op.Other, op.Fence, t.holder), t.grantOp(), op)
				continue
			}
			detail := acquireRefusal(t, op, op.Call, slack)
			if detail == "" {
				continue
			}
			// At REPEATABLE READ and SERIALIZABLE the acquire reads the row
			// as its snapshot has it: the FOR KEY SHARE lock it takes
			// before refusing does not conflict with a release or renewal
			// (which changes no key) committed after the snapshot, so
			// PostgreSQL raises no 40001 and the refusal describes that
			// older version.
			if op.Snapshot > 0 && op.Snapshot < op.Call && acquireRefusal(t, op, op.Snapshot, slack) == "" {
				rep.SnapshotRefusals++
				continue
			}
			rep.add(RuleRefusal, detail, t.grantOp(), op)
		case Claim:
			b := scopeBounds[op.Name]
			// The tenures that can have been live during [from, Return]:
			// start < Return and endMax > from; endMax > start for each, so
			// those with endMax <= from all start before Return.
			possibleFrom := func(from time.Duration) (possible, units int) {
				possible = countBefore(unknownClaims[op.Name], op.Return)
				units = max(unknownUnits[op.Name], 1)
				if b != nil {
					possible += countBefore(b.starts, op.Return) - countBefore(b.ends, from+1)
					units = max(units, b.units)
				}
				return possible, units
			}
			// Each possibly-live tenure holds at most the scope's largest
			// claim in units (exactly one unit each when none asked for more).
			possible, units := possibleFrom(op.Call)
			if op.InUse <= possible*units {
				continue
			}
			// At REPEATABLE READ and SERIALIZABLE the claim locks the
			// scope's row, not the slot rows it counts: a release that
			// committed after the snapshot (it writes the slot row only) is
			// read as still in use. The count is then that of a state since
			// the snapshot (the claim ordered before the release, as
			// SERIALIZABLE allows), not of the clock reading.
			if op.Snapshot > 0 && op.Snapshot < op.Call {
				if p, u := possibleFrom(op.Snapshot); op.InUse <= p*u {
					rep.SnapshotRefusals++
					continue
				}
			}
			rep.add(RuleRefusal, fmt.Sprintf("scope %q: claim refused with %d units in use, at most %d can have been (%d tenures of at most %d units)",
				op.Name, op.InUse, possible*units, possible, units), op)
		}
	}
}

// acquireRefusal checks a refused acquire op in the name of tenure t,
// read in a state of the row from `from` (the op's Call, or its Snapshot)
// on: the tenure may have been live since then, and the time left it
// reported (when recorded) is one its expiry at the decision may have had.
// It returns what is wrong, or "".
//
// The server decided at one clock reading d inside the call, [Call,
// Return], and reported the row's expiry at d minus d: so it is positive
// (the refusal needs the expiry after d); d + ExpiresIn is no later than
// the latest expiry any extension called before Return can have set
// (possibleEnd); and when one extension's certain segment covers the whole
// of [from, Return], the row's expiry is at least that segment's end, so
// Return + ExpiresIn reaches it.
func acquireRefusal(t *tenure, op *Op, from, slack time.Duration) string {
	if t.start >= op.Return || t.endMax <= from {
		return fmt.Sprintf("lease %q: acquire refused in the name of fence %d, which cannot have been live then", op.Name, op.Fence)
	}
	if op.ExpiresIn == 0 {
		return ""
	}
	if op.ExpiresIn < 0 {
		return fmt.Sprintf("lease %q: acquire refused in the name of fence %d with expires_in %s: the tenure had ended by the clock reading that decided",
			op.Name, op.Fence, op.ExpiresIn)
	}
	if end := t.possibleEnd(op.Return, nil, slack); op.Call+op.ExpiresIn > end {
		return fmt.Sprintf("lease %q: acquire refused in the name of fence %d with expires_in %s, %s past the latest expiry its extensions can have set",
			op.Name, op.Fence, op.ExpiresIn, op.Call+op.ExpiresIn-end)
	}
	for _, s := range t.raw {
		if s.start <= from && s.end > op.Return && op.Return+op.ExpiresIn < s.end {
			return fmt.Sprintf("lease %q: acquire refused in the name of fence %d with expires_in %s, %s before the tenure's certain expiry",
				op.Name, op.Fence, op.ExpiresIn, s.end-(op.Return+op.ExpiresIn))
		}
	}
	return ""
}
