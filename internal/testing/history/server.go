package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Row says which table a ServerEvent comes from.
type Row uint8

// Rows.
const (
	// LeaseRow: a version of a row of pglease.leases (an audit trigger's
	// record).
	LeaseRow Row = iota + 1
	// SlotRow: a version of a row of pglease.slots.
	SlotRow
	// WriteRow: a fenced write that committed (a row of the test's write
	// log, inserted after pglease.assert_held in the same transaction).
	WriteRow
)

// ServerEvent is one record of the server's own history: a committed row
// version of pglease.leases or pglease.slots, or a committed fenced write.
// Seq is a value of one sequence taken inside the transaction after the row
// lock was held (trigger) or after assert_held returned (write): per lease
// row, Seq order is the order in which the writes and tenure changes
// committed (see the package documentation).
type ServerEvent struct {
	Seq  int64
	Row  Row
	Name string // lease name or slot scope
	Slot int    // slot number; 0 for leases and writes
	// Inserted is true for a row's first version (or its first after a
	// purge deleted it); the Old fields are then zero.
	Inserted bool
	// Deleted is true when pglease.purge deleted the row; the Old fields
	// describe the version deleted, Fence is its fence.
	Deleted bool
	// OldHolder ("" when NULL), OldFence and OldExpiresAt describe the
	// version replaced.
	OldHolder    string
	OldFence     int64
	OldExpiresAt time.Time
	// Holder ("" when NULL), Fence, AcquiredAt and ExpiresAt describe the
	// new version; for a write, Holder and Fence are the writer's.
	Holder     string
	Fence      int64
	AcquiredAt time.Time
	ExpiresAt  time.Time
	// Clock is the server's clock_timestamp() in the trigger, or for a
	// write the start of its transaction (before assert_held).
	Clock time.Time
	// Capacity is the capacity a slot's tenure was claimed with (0 when
	// not recorded: the capacity map of CheckServer applies).
	Capacity int
	// Units is the units a slot's tenure holds (0 when not recorded: 1).
	Units int
	// Tx is the transaction that wrote the version (txid_current()), 0
	// when not recorded. Versions of one row written by one transaction
	// are one change: only the last was ever committed (see collapse).
	Tx int64
}

// collapse returns events in Seq order with each run of versions of one
// row written by one transaction (Tx, when recorded) made one, in the
// place of the last: the first's old version, the last's new one.
// pglease.acquire, for one, inserts a row and raises its fence in the same
// transaction when it sees that a purge of that name, which the insert
// waited for, raised the floor: no one ever saw the first fence. The
// transaction holds the row's lock from its first version on, so its
// versions are consecutive among the row's.
func collapse(events []ServerEvent) []ServerEvent {
	evs := slices.Clone(events)
	slices.SortFunc(evs, func(a, b ServerEvent) int { return cmp.Compare(a.Seq, b.Seq) })
	type rowKey struct {
		row  Row
		name string
		slot int
	}
	last := map[rowKey]int{} // index in evs of the row's latest version
	dropped := make([]bool, len(evs))
	for j := range evs {
		e := &evs[j]
		k := rowKey{e.Row, e.Name, e.Slot}
		i, seen := last[k]
		last[k] = j
		if e.Row == WriteRow || e.Tx == 0 || !seen || evs[i].Tx != e.Tx || evs[i].Deleted || e.Deleted {
			continue
		}
		first := evs[i]
		e.Inserted = first.Inserted
		e.OldHolder, e.OldFence, e.OldExpiresAt = first.OldHolder, first.OldFence, first.OldExpiresAt
		dropped[i] = true
	}
	out := evs[:0]
	for j, e := range evs {
		if !dropped[j] {
			out = append(out, e)
		}
	}
	return out
}

// ServerReport is what CheckServer found.
type ServerReport struct {
	Events, Grants, Extends, Releases, Writes, Purged int
	// Intervals is the number of tenures whose interval on the server's
	// clock was checked against the others of their lease or scope.
	Intervals  int
	Counts     map[string]int
	Violations []Violation
}

// OK reports whether no rule was broken.
func (r *ServerReport) OK() bool { return len(r.Counts) == 0 }

// Summary describes the report in one line.
func (r *ServerReport) Summary() string {
	n := 0
	for _, c := range r.Counts {
		n += c
	}
	return fmt.Sprintf("%d server events (%d grants, %d renewals, %d releases, %d fenced writes, %d rows purged), %d tenure intervals on the server's clock, %d violations",
		r.Events, r.Grants, r.Extends, r.Releases, r.Writes, r.Purged, r.Intervals, n)
}

func (r *ServerReport) add(rule, detail string) {
	if r.Counts == nil {
		r.Counts = map[string]int{}
	}
	r.Counts[rule]++
	if r.Counts[rule] <= maxKept {
		r.Violations = append(r.Violations, Violation{Rule: rule, Detail: detail})
	}
}

// Server rules.
const (
	// RuleServerFence: a new tenure's fence is not the previous fence + 1;
	// a row's first fence is not 1 while nothing of its table was purged;
	// a row purged and created again does not start above every fence it
	// had.
	RuleServerFence = "server-fence"
	// RuleServerPurge: a purge deleted a row whose tenure was live by the
	// purge's clock, or a row the replay does not have.
	RuleServerPurge = "server-purge"
	// RuleServerTakeover: a new tenure replaced one that was neither
	// released nor expired by the taker's clock.
	RuleServerTakeover = "server-takeover"
	// RuleServerRevival: a released tenure got a holder back.
	RuleServerRevival = "server-revival"
	// RuleServerWrite: a fenced write committed while its fence was not
	// the current, unreleased tenure of the lease, or began after the
	// tenure's last expiry.
	RuleServerWrite = "server-write"
	// RuleServerSlot: a slot numbered above the scope's capacity.
	RuleServerSlot = "server-slot"
	// RuleServerInterval: on the server's clock, a tenure began before the
	// previous tenure of its lease or slot ended (its release, or its
	// expiry as last recorded), also across a purge (where a lease row
	// created again is checked by when it was inserted: see CheckServer).
	RuleServerInterval = "server-interval"
	// RuleServerCapacity: in commit order (at a grant, the tenures of the
	// scope the replay has live at its start) or on the server's clock (at
	// any instant, the tenures whose recorded interval contains it), more
	// units held by live tenures of a scope than the smallest capacity any
	// of them was claimed with.
	RuleServerCapacity = "server-capacity"
	// RuleAgree: the client history and the server's disagree.
	RuleAgree = "client-server"
)

// state is a row's current tenure while replaying the server history.
type state struct {
	fence    int64
	holder   string
	current  time.Time // the row's expiry now (a re-pin may shorten it)
	acquired time.Time // when the tenure began, on the server's clock
	capacity int       // the capacity a slot's tenure was claimed with
	units    int       // the units it holds (1 when not recorded)
}

// interval is one tenure of a slot on the server's clock: from its grant
// to its end as last recorded (release or expiry).
type interval struct {
	start, end time.Time
	capacity   int
	units      int
	what       string
}

// CheckServer replays the server's history in Seq order and checks it.
// capacity, when not nil, bounds the slot numbers of each scope.
func CheckServer(events []ServerEvent, capacity map[string]int) ServerReport {
	evs := collapse(events)
	rep := ServerReport{Events: len(events)}
	rows := map[key]*state{}
	purgedFence := map[key]int64{}   // the fence a purged row had
	purgedEnd := map[key]time.Time{} // when the purged row's last tenure ended
	purgedAny := map[bool]bool{}     // a row of the table (slot or not) was purged
	tenures := map[string][]interval{}
	capOf := func(e ServerEvent) int {
		if e.Capacity > 0 {
			return e.Capacity
		}
		return capacity[e.Name]
	}
	// closeTenure records the tenure a row had, once it is over.
	closeTenure := func(k key, st *state) {
		if k.slot && st != nil && !st.acquired.IsZero() {
			tenures[k.name] = append(tenures[k.name], interval{st.acquired, st.current, st.capacity, max(st.units, 1),
				fmt.Sprintf("%s fence %d", k, st.fence)})
		}
	}
	for _, e := range evs {
		k := key{e.Row == SlotRow, e.Name, e.Slot}
		st := rows[k]
		if e.Deleted {
			rep.Purged++
			switch {
			case st == nil:
				rep.add(RuleServerPurge, fmt.Sprintf("%s: #%d deleted a row the replay does not have", k, e.Seq))
			case st.fence != e.OldFence || st.holder != e.OldHolder || !st.current.Equal(e.OldExpiresAt):
				rep.add(RuleServerPurge, fmt.Sprintf("%s: #%d deleted a version (fence %d, holder %q, expiry %s) that is not the row's (fence %d, holder %q, expiry %s)",
					k, e.Seq, e.OldFence, e.OldHolder, e.OldExpiresAt.Format(time.StampMicro),
					st.fence, st.holder, st.current.Format(time.StampMicro)))
			case st.holder != "" && st.current.After(e.Clock):
				rep.add(RuleServerPurge, fmt.Sprintf("%s: #%d deleted fence %d of %s, live until %s, at %s",
					k, e.Seq, st.fence, st.holder, st.current.Format(time.StampMicro), e.Clock.Format(time.StampMicro)))
			}
			purgedFence[k] = max(purgedFence[k], e.Fence)
			purgedEnd[k] = e.OldExpiresAt
			purgedAny[k.slot] = true
			closeTenure(k, st)
			delete(rows, k)
			continue
		}
		if e.Row == WriteRow {
			rep.Writes++
			switch {
			case st == nil || st.fence != e.Fence:
				cur := int64(0)
				if st != nil {
					cur = st.fence
				}
				rep.add(RuleServerWrite, fmt.Sprintf("%s: write #%d by %s under fence %d committed while the fence was %d", k, e.Seq, e.Holder, e.Fence, cur))
			case st.holder == "":
				rep.add(RuleServerWrite, fmt.Sprintf("%s: write #%d by %s under fence %d committed after the tenure was released", k, e.Seq, e.Holder, e.Fence))
			case !e.Clock.Before(st.current):
				rep.add(RuleServerWrite, fmt.Sprintf("%s: write #%d under fence %d began %s after the tenure's expiry", k, e.Seq, e.Fence, e.Clock.Sub(st.current)))
			}
			continue
		}
		if c, ok := capacity[e.Name]; ok && e.Row == SlotRow && e.Slot > c {
			rep.add(RuleServerSlot, fmt.Sprintf("%s: slot number above the capacity %d", k, c))
		}
		if e.Inserted {
			if st != nil {
				rep.add(RuleServerFence, fmt.Sprintf("%s: row inserted twice (#%d)", k, e.Seq))
			}
			switch prev, purged := purgedFence[k]; {
			case purged && e.Fence <= prev:
				rep.add(RuleServerFence, fmt.Sprintf("%s: created again after its purge with fence %d, not above its purged fence %d (#%d)", k, e.Fence, prev, e.Seq))
			case !purgedAny[k.slot] && e.Fence != 1:
				rep.add(RuleServerFence, fmt.Sprintf("%s: first fence %d, want 1 (#%d)", k, e.Fence, e.Seq))
			case e.Fence < 1:
				rep.add(RuleServerFence, fmt.Sprintf("%s: first fence %d, want 1 or more (#%d)", k, e.Fence, e.Seq))
			}
			// A lease row created again right after its purge may carry an
			// acquired_at read before the insert waited for the purge's
			// commit (the one exception pglease.acquire documents; at
			// REPEATABLE READ and SERIALIZABLE, a snapshot that never saw the
			// row makes it common): the insert itself, on the trigger's
			// clock, came after the purged tenure's end all the same.
			if end, purged := purgedEnd[k]; purged {
				began, what := e.AcquiredAt, "began"
				if !k.slot {
					began, what = e.Clock, "was inserted"
				}
				if began.Before(end) {
					rep.add(RuleServerInterval, fmt.Sprintf("%s: fence %d %s at %s, before the purged row's last tenure ended at %s (#%d)",
						k, e.Fence, what, began.Format(time.StampMicro), end.Format(time.StampMicro), e.Seq))
				}
			}
			rep.Grants++
			if k.slot {
				checkLive(&rep, rows, k, e, capOf(e))
			}
			rows[k] = &state{fence: e.Fence, holder: e.Holder, current: e.ExpiresAt, acquired: e.AcquiredAt, capacity: capOf(e), units: max(e.Units, 1)}
			continue
		}
		if st == nil || st.fence != e.OldFence || st.holder != e.OldHolder {
			rep.add(RuleServerFence, fmt.Sprintf("%s: #%d replaced a version (fence %d, holder %q) the replay does not have", k, e.Seq, e.OldFence, e.OldHolder))
			st = &state{fence: e.OldFence, holder: e.OldHolder}
			rows[k] = st
		}
		st.current = e.ExpiresAt
		switch {
		case e.Fence != e.OldFence: // a new tenure
			rep.Grants++
			if e.Fence != e.OldFence+1 {
				rep.add(RuleServerFence, fmt.Sprintf("%s: fence went from %d to %d (#%d)", k, e.OldFence, e.Fence, e.Seq))
			}
			if e.Holder == "" {
				rep.add(RuleServerFence, fmt.Sprintf("%s: new fence %d without a holder (#%d)", k, e.Fence, e.Seq))
			}
			if e.OldHolder != "" && e.OldExpiresAt.After(e.AcquiredAt) {
				rep.add(RuleServerTakeover, fmt.Sprintf("%s: %s took fence %d at %s while fence %d of %s was live until %s (#%d)",
					k, e.Holder, e.Fence, e.AcquiredAt.Format(time.StampMicro), e.OldFence, e.OldHolder, e.OldExpiresAt.Format(time.StampMicro), e.Seq))
			}
			if e.OldHolder == "" && e.OldExpiresAt.After(e.AcquiredAt) {
				rep.add(RuleServerInterval, fmt.Sprintf("%s: %s took fence %d at %s, before fence %d was released at %s (#%d)",
					k, e.Holder, e.Fence, e.AcquiredAt.Format(time.StampMicro), e.OldFence, e.OldExpiresAt.Format(time.StampMicro), e.Seq))
			}
			if e.AcquiredAt.After(e.Clock) {
				rep.add(RuleServerTakeover, fmt.Sprintf("%s: fence %d acquired at %s, after the commit-time clock %s (#%d)", k, e.Fence, e.AcquiredAt, e.Clock, e.Seq))
			}
			if k.slot {
				st.current = e.OldExpiresAt
				closeTenure(k, st)
				checkLive(&rep, rows, k, e, capOf(e))
			}
			*st = state{fence: e.Fence, holder: e.Holder, current: e.ExpiresAt, acquired: e.AcquiredAt, capacity: capOf(e), units: max(e.Units, 1)}
		case e.Holder == "" && e.OldHolder != "": // released
			rep.Releases++
			st.holder = ""
		case e.Holder != e.OldHolder:
			rep.add(RuleServerRevival, fmt.Sprintf("%s: fence %d went from holder %q to %q (#%d)", k, e.Fence, e.OldHolder, e.Holder, e.Seq))
			st.holder = e.Holder
		default: // renewed or re-pinned
			rep.Extends++
		}
	}
	for k, st := range rows {
		closeTenure(k, st)
	}
	for scope, ivs := range tenures {
		rep.Intervals += len(ivs)
		checkIntervals(&rep, scope, ivs)
	}
	return rep
}

// checkLive checks a slot grant e in commit order: with the tenures of its
// scope the replay has live at its start, the scope must not hold more
// units than the smallest capacity any of them (and e) was claimed with.
func checkLive(rep *ServerReport, rows map[key]*state, k key, e ServerEvent, capacity int) {
	live, smallest := max(e.Units, 1), capacity
	for ok, st := range rows {
		if ok.slot && ok.name == k.name && ok != k && st.holder != "" && st.current.After(e.AcquiredAt) {
			live += max(st.units, 1)
			if st.capacity > 0 && (smallest == 0 || st.capacity < smallest) {
				smallest = st.capacity
			}
		}
	}
	if smallest > 0 && live > smallest {
		rep.add(RuleServerCapacity, fmt.Sprintf("%s: fence %d granted at %s with %d units of the scope held by live tenures (commit order), capacity %d (#%d)",
			k, e.Fence, e.AcquiredAt.Format(time.StampMicro), live, smallest, e.Seq))
	}
}

// checkIntervals sweeps the tenures of one scope on the server's clock: at
// no instant may the live ones hold more units than the smallest capacity
// any live one was claimed with. Intervals are half-open, [start, end).
func checkIntervals(rep *ServerReport, scope string, ivs []interval) {
	type point struct {
		at    time.Time
		start bool
		i     int
	}
	points := make([]point, 0, 2*len(ivs))
	for i, iv := range ivs {
		if iv.end.After(iv.start) {
			points = append(points, point{iv.start, true, i}, point{iv.end, false, i})
		}
	}
	slices.SortFunc(points, func(a, b point) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		switch { // ends before starts at the same instant
		case a.start == b.start:
			return 0
		case a.start:
			return 1
		}
		return -1
	})
	live := map[int]bool{}
	for _, p := range points {
		if !p.start {
			delete(live, p.i)
			continue
		}
		live[p.i] = true
		smallest, units := 0, 0
		for i := range live {
			units += max(ivs[i].units, 1)
			if c := ivs[i].capacity; c > 0 && (smallest == 0 || c < smallest) {
				smallest = c
			}
		}
		if smallest > 0 && units > smallest {
			rep.add(RuleServerCapacity, fmt.Sprintf("scope %q: %d units held by %d tenures live at %s on the server's clock (%s began), capacity %d",
				scope, units, len(live), p.at.Format(time.StampMicro), ivs[p.i].what, smallest))
		}
	}
}

// Agree checks the client history ops against the server's events: every
// tenure a client was granted is one the server granted to that holder;
// every tenure the server granted was asked for by its holder (an OK
// grant, or a call with unknown outcome); and each (lease, fence, holder)
// has between the OK and the OK + unknown number of client writes on the
// server.
func Agree(ops []Op, events []ServerEvent) ServerReport {
	var rep ServerReport
	type gkey struct {
		k      key
		fence  int64
		holder string
	}
	server := map[gkey]bool{}
	writes := map[gkey]int{}
	for _, e := range collapse(events) {
		switch {
		case e.Row == WriteRow:
			writes[gkey{key{false, e.Name, 0}, e.Fence, e.Holder}]++
		case e.Inserted || e.Fence != e.OldFence:
			server[gkey{key{e.Row == SlotRow, e.Name, e.Slot}, e.Fence, e.Holder}] = true
		}
	}
	client := map[gkey]bool{}
	unknown := map[pkey]bool{}
	okWrites, unknownWrites := map[gkey]int{}, map[gkey]int{}
	for _, op := range ops {
		switch {
		case (op.Kind == Acquire || op.Kind == Claim) && op.Outcome == OK:
			g := gkey{key{op.Kind == Claim, op.Name, op.Slot}, op.Fence, op.Holder}
			client[g] = true
			if !server[g] {
				rep.add(RuleAgree, fmt.Sprintf("client %s was granted fence %d of %s, the server never granted it to it", op.Holder, op.Fence, g.k))
			}
		case (op.Kind == Acquire || op.Kind == Claim) && op.Outcome == Unknown:
			unknown[pkey{op.Kind == Claim, op.Name, op.Holder}] = true
		case op.Kind == Write && op.Outcome == OK:
			okWrites[gkey{key{false, op.Name, 0}, op.Fence, op.Holder}]++
		case op.Kind == Write && op.Outcome == Unknown:
			unknownWrites[gkey{key{false, op.Name, 0}, op.Fence, op.Holder}]++
		}
	}
	for g := range server {
		if !client[g] && !unknown[pkey{g.k.slot, g.k.name, g.holder}] {
			rep.add(RuleAgree, fmt.Sprintf("the server granted fence %d of %s to %s, which no call of that holder can have asked for", g.fence, g.k, g.holder))
		}
	}
	for g, n := range writes {
		rep.Writes += n
		if o, u := okWrites[g], unknownWrites[g]; n < o || n > o+u {
			rep.add(RuleAgree, fmt.Sprintf("%s fence %d by %s: %d writes on the server, clients saw %d commit and %d unknown", g.k, g.fence, g.holder, n, o, u))
		}
	}
	for g, o := range okWrites {
		if writes[g] == 0 {
			rep.add(RuleAgree, fmt.Sprintf("%s fence %d by %s: clients saw %d writes commit, the server has none", g.k, g.fence, g.holder, o))
		}
	}
	return rep
}
