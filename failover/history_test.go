//go:build failover

package failover_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Every time below is read with time.Now in this process, so comparisons
// use Go's monotonic clock: one clock for every supervisor, as the checks
// need.

// grant is one EventAcquired: a supervisor was given a tenure.
type grant struct {
	at     time.Time
	holder string
	fence  int64
}

// release is one EventReleased: a supervisor gave the lease back after its
// workload returned. The supervisors run on pools, so every release
// commits without waiting for its WAL flush or the standby (see
// internal/asyncrelease).
type release struct {
	at     time.Time
	holder string
	fence  int64
}

// tenure is one run of a supervisor's workload: from when the workload
// started to when it returned.
type tenure struct {
	holder     string
	fence      int64
	start, end time.Time
	running    bool
}

// server is one run of one Postgres server: its port and when its
// postmaster started, so that a primary restarted in place counts as new.
type server struct {
	port int
	boot int64 // pg_postmaster_start_time(), in Unix microseconds
}

func (s server) String() string { return fmt.Sprint(s.port) }

// serverSQL selects the server of a statement, for RETURNING.
const serverSQL = "inet_server_port(), (extract(epoch FROM pg_postmaster_start_time()) * 1e6)::bigint"

// write is an acknowledged fenced write: WithFence returned nil.
type write struct {
	at     time.Time
	holder string
	fence  int64
	seq    int64
	srv    server // the server that committed it
}

// probeWrite is a successful write of the availability probe.
type probeWrite struct {
	at  time.Time
	srv server
}

// history records what the supervisors, their workloads and the probe did.
// It is safe for concurrent use.
type history struct {
	seq      atomic.Int64 // last sequence number handed to a write
	handover atomic.Int64 // generation; a workload started earlier returns

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every record
	grants   []grant
	releases []release
	tenures  []*tenure
	acked    []write
	probes   []probeWrite
	lost     map[string]int // EventLost causes
	refused  int            // fenced writes refused (ErrLeaseLost)
	failed   int            // fenced writes with an unknown outcome
}

func newHistory() *history {
	return &history{changed: make(chan struct{}), lost: map[string]int{}}
}

// bump wakes the waiters; h.mu must be held.
func (h *history) bump() {
	close(h.changed)
	h.changed = make(chan struct{})
}

func (h *history) grant(holder string, fence int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.grants = append(h.grants, grant{at: time.Now(), holder: holder, fence: fence})
	h.bump()
}

func (h *history) release(holder string, fence int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.releases = append(h.releases, release{at: time.Now(), holder: holder, fence: fence})
	h.bump()
}

func (h *history) lose(cause string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lost[cause]++
}

func (h *history) start(holder string, fence int64) *tenure {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := &tenure{holder: holder, fence: fence, start: time.Now(), running: true}
	h.tenures = append(h.tenures, t)
	h.bump()
	return t
}

func (h *history) end(t *tenure) {
	h.mu.Lock()
	defer h.mu.Unlock()
	t.end, t.running = time.Now(), false
	h.bump()
}

func (h *history) ack(w write) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acked = append(h.acked, w)
	h.bump()
}

func (h *history) writeFailed(refused bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if refused {
		h.refused++
	} else {
		h.failed++
	}
}

func (h *history) probe(srv server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.probes = append(h.probes, probeWrite{at: time.Now(), srv: srv})
	h.bump()
}

// wait returns once cond, called with h.mu held, is true; or ctx.Err().
func (h *history) wait(ctx context.Context, cond func() bool) error {
	for {
		h.mu.Lock()
		ok, ch := cond(), h.changed
		h.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ackedSince counts acknowledged writes after t committed on srv (any
// server when srv is zero) under fence (any when 0); h.mu must be held.
func (h *history) ackedSince(t time.Time, srv server, fence int64) int {
	n := 0
	for i := len(h.acked) - 1; i >= 0 && h.acked[i].at.After(t); i-- {
		if (srv == server{} || h.acked[i].srv == srv) && (fence == 0 || h.acked[i].fence == fence) {
			n++
		}
	}
	return n
}

// firstAckOn returns the first acknowledged write after t on a server
// other than old; h.mu must be held.
func (h *history) firstAckOn(t time.Time, old server) (write, bool) {
	i, _ := slices.BinarySearchFunc(h.acked, t, func(w write, t time.Time) int { return w.at.Compare(t) })
	for ; i < len(h.acked); i++ {
		if h.acked[i].srv != old {
			return h.acked[i], true
		}
	}
	return write{}, false
}

// firstAckUnder returns the first acknowledged write under fence; h.mu
// must be held.
func (h *history) firstAckUnder(fence int64) (write, bool) {
	for _, w := range h.acked {
		if w.fence == fence {
			return w, true
		}
	}
	return write{}, false
}

// lastAckBefore returns the last acknowledged write before t; h.mu must be
// held.
func (h *history) lastAckBefore(t time.Time) (write, bool) {
	i, _ := slices.BinarySearchFunc(h.acked, t, func(w write, t time.Time) int { return w.at.Compare(t) })
	if i == 0 {
		return write{}, false
	}
	return h.acked[i-1], true
}

// firstProbeOn returns the first probe write after t on a server other
// than old; h.mu must be held.
func (h *history) firstProbeOn(t time.Time, old server) (probeWrite, bool) {
	i, _ := slices.BinarySearchFunc(h.probes, t, func(p probeWrite, t time.Time) int { return p.at.Compare(t) })
	for ; i < len(h.probes); i++ {
		if h.probes[i].srv != old {
			return h.probes[i], true
		}
	}
	return probeWrite{}, false
}

// firstGrantAfter returns the first grant after t; h.mu must be held.
func (h *history) firstGrantAfter(t time.Time) (grant, bool) {
	for _, g := range h.grants {
		if g.at.After(t) {
			return g, true
		}
	}
	return grant{}, false
}

// lastGrant returns the latest grant; h.mu must be held.
func (h *history) lastGrant() (grant, bool) {
	if len(h.grants) == 0 {
		return grant{}, false
	}
	return h.grants[len(h.grants)-1], true
}

// loggedRow is a row of the fenced log table on the final primary.
type loggedRow struct {
	fence  int64
	holder string
}

// verdict is what the checks found.
type verdict struct {
	grants, resumed int // grants checked; grants of the same fence to the same holder again
	tenures         int
	acked           int
	violations      []string
	doubleGrants    int // a fence granted to two holders
	backwards       int // a grant with a smaller fence than an earlier one
	overlaps        int // two workloads running at once
	lostWrites      int // acknowledged writes missing on the final primary
	foreignWrites   int // logged writes whose fence was granted to another holder
}

// check checks the invariants over the whole history; logged is the fenced
// log table of the final primary, by seq.
func (h *history) check(logged map[int64]loggedRow) verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	var v verdict
	v.grants = len(h.grants)
	addf := func(counter *int, format string, args ...any) {
		*counter++
		if len(v.violations) < 50 {
			v.violations = append(v.violations, fmt.Sprintf(format, args...))
		}
	}

	// Fences: strictly increasing across grants, in the order they were
	// made, except that a holder may be given back the tenure it still has
	// (acquire is re-entrant per holder: same fence, same holder).
	grants := slices.Clone(h.grants)
	slices.SortStableFunc(grants, func(a, b grant) int { return a.at.Compare(b.at) })
	holderOf := map[int64]grant{}
	for i, g := range grants {
		if first, ok := holderOf[g.fence]; ok && first.holder != g.holder {
			addf(&v.doubleGrants, "fence %d granted twice: to %s and, %s later, to %s",
				g.fence, first.holder, g.at.Sub(first.at).Round(time.Millisecond), g.holder)
		} else if !ok {
			holderOf[g.fence] = g
		}
		if i == 0 {
			continue
		}
		prev := grants[i-1]
		switch {
		case g.fence == prev.fence && g.holder == prev.holder:
			v.resumed++
		case g.fence <= prev.fence:
			addf(&v.backwards, "fence went backwards: %d (%s) granted after %d (%s)",
				g.fence, g.holder, prev.fence, prev.holder)
		}
	}

	// Tenures: no two workloads ran at the same time.
	tenures := make([]tenure, 0, len(h.tenures))
	for _, t := range h.tenures {
		c := *t
		if c.running {
			c.end = time.Now()
		}
		tenures = append(tenures, c)
	}
	slices.SortFunc(tenures, func(a, b tenure) int { return a.start.Compare(b.start) })
	v.tenures = len(tenures)
	for i := 1; i < len(tenures); i++ {
		for j := i - 1; j >= 0; j-- {
			if tenures[j].end.After(tenures[i].start) {
				addf(&v.overlaps, "two live tenures: %s (fence %d) ran until %s after %s (fence %d) started",
					tenures[j].holder, tenures[j].fence, tenures[j].end.Sub(tenures[i].start).Round(time.Millisecond),
					tenures[i].holder, tenures[i].fence)
			}
		}
	}

	// Acknowledged writes: all on the final primary, as acknowledged.
	// Losses are reported per tenure and server, as seq ranges.
	type lossKey struct {
		fence  int64
		holder string
		port   int
	}
	type loss struct {
		n, lo, hi int64
		from, to  time.Time
	}
	losses := map[lossKey]*loss{}
	var lossOrder []lossKey
	v.acked = len(h.acked)
	for _, w := range h.acked {
		row, ok := logged[w.seq]
		switch {
		case !ok:
			v.lostWrites++
			k := lossKey{w.fence, w.holder, w.srv.port}
			l := losses[k]
			if l == nil {
				l = &loss{lo: w.seq, from: w.at}
				losses[k] = l
				lossOrder = append(lossOrder, k)
			}
			l.n, l.hi, l.to = l.n+1, w.seq, w.at
		case row.fence != w.fence || row.holder != w.holder:
			addf(&v.lostWrites, "acknowledged write changed: seq %d was (fence %d, %s), is (fence %d, %s)",
				w.seq, w.fence, w.holder, row.fence, row.holder)
		}
	}
	for _, k := range lossOrder {
		l := losses[k]
		var n int
		addf(&n, "%d acknowledged writes lost: fence %d by %s on port %d, seq %d to %d, acknowledged over %s",
			l.n, k.fence, k.holder, k.port, l.lo, l.hi, l.to.Sub(l.from).Round(time.Millisecond))
	}
	// Every logged write was made under a fence granted to its writer.
	foreign := map[loggedRow]int{}
	for _, row := range logged {
		if g, ok := holderOf[row.fence]; ok && g.holder != row.holder {
			foreign[row]++
		}
	}
	for row, n := range foreign {
		v.foreignWrites += n
		var c int
		addf(&c, "%d writes under fence %d by %s, but that fence was first granted to %s",
			n, row.fence, row.holder, holderOf[row.fence].holder)
	}
	return v
}

// percentile returns the p-th percentile (0 to 100) of ds, nearest rank.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := max((p*len(s)+99)/100-1, 0)
	return s[min(i, len(s)-1)]
}

// maxOf returns the largest of ds.
func maxOf(ds []time.Duration) time.Duration {
	return slices.MaxFunc(append([]time.Duration{0}, ds...), cmp.Compare[time.Duration])
}
