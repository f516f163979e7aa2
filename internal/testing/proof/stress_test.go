//go:build proof

package proof

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/history"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

// EnvStressDuration sets how long TestStress runs: 20s by default (CI);
// `make stress` sets it to minutes.
const EnvStressDuration = "PGLEASE_STRESS_DURATION"

// The stress test's shape: many clients, few leases and scopes, small
// capacities, short TTLs.
const (
	stressClients  = 32
	stressConns    = 8
	stressMinTTL   = 100 * time.Millisecond
	stressMaxTTL   = 300 * time.Millisecond
	stressPauseMax = 400 * time.Millisecond // a client's occasional stall, past its TTL
	stressKillMin  = 100 * time.Millisecond // the killer terminates a backend every 100-300 ms
	stressKillMax  = 300 * time.Millisecond
	// The first 2*stressPairs clients come in pairs that share one
	// pglease.Client (one holder), each of a pair on one lease of its own:
	// their concurrent acquires and releases are coalesced into batched
	// calls (docs/go.md#batched-calls), checked like every other call.
	stressPairs = 4
)

var (
	stressLeases = []string{"lease-a", "lease-b"}
	// stressScopes maps each scope to its capacity; scope-b's claims pass 2
	// one time in four (a shrinking capacity: documented as allowed).
	stressScopes   = []string{"scope-a", "scope-b"}
	stressCapacity = map[string]int{"scope-a": 2, "scope-b": 3}
)

// TestStress has 32 clients hammer two leases and two slot scopes with
// every operation, random TTLs of 100-300 ms and random stalls, records
// every call with its invocation and response times, and checks the
// history (package history): no two tenures of a lease or slot certainly
// live at once, never more live holders of a scope than its capacity,
// fences increasing in real-time order and never reused, every successful
// renewal, release and fenced write inside its tenure, every refusal
// explained. The server's own history (an audit trigger and the write
// log) is checked too, and against the clients': in commit order and on
// the server's clock (no tenure starts before the previous one of its
// lease or slot ended, no instant with more live tenures of a scope than
// the smallest capacity any of them claimed with). Throughout, a killer
// terminates one of the clients' backends every 100-300 ms: calls cut off
// have an unknown outcome, and the histories must hold all the same.
func TestStress(t *testing.T) {
	dur := envDuration(t, EnvStressDuration, 20*time.Second)
	url := pgtest.NewMigrated(t)
	installAudit(t, url)
	historyOn(t, url, "lease-", "scope-")
	// Commits need not wait for the WAL flush: crashes are not this test's
	// subject (TestFaultServerRestart's, with the default), and the shared
	// server's disk is the bottleneck otherwise.
	pool := openPool(t, url, stressConns, "pglease-proof-stress", map[string]string{"synchronous_commit": "off"})
	admin := openPool(t, url, 1, "pglease-proof-killer")
	rec := history.NewRecorder()

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var wg sync.WaitGroup
	stats := make([]stressStats, stressClients)
	coalescing := map[string]bool{}
	var first *stressClient
	for i := range stressClients {
		c := newStressClient(t, pool, rec, i)
		if i < 2*stressPairs {
			if i%2 == 0 {
				// A pool of one connection: the pair's calls made while
				// one is in flight queue and go out batched (a Client
				// batches only what its pool's connections cannot carry).
				one := openPool(t, url, 1, "pglease-proof-stress", map[string]string{"synchronous_commit": "off"})
				lc, err := pglease.New(one, pglease.Config{Holder: c.holder})
				if err != nil {
					t.Fatal(err)
				}
				c.leases = lc
				first = c
			} else {
				c.leases, c.holder = first.leases, first.holder
				coalescing[c.holder] = true
			}
			c.only = stressLeases[i%2]
		}
		wg.Go(func() { c.run(ctx, &stats[i]) })
	}
	// A purger deletes every free lease and scope as fast as it can, so
	// that names are purged and used again throughout: their fences must
	// still never go backwards nor repeat.
	// (A purge cut off by the killer has an unknown outcome: counted.)
	var purged, purges, purgesCut int64
	wg.Go(func() {
		for ctx.Err() == nil {
			n, err := pgleaseadmin.Purge(ctx, pool, 0)
			if err != nil {
				purgesCut++
				continue
			}
			purged += n
			purges++
		}
	})
	var killed int64
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 14))
		for ctx.Err() == nil {
			sleep(ctx, stressKillMin+time.Duration(rng.Int64N(int64(stressKillMax-stressKillMin))))
			var n int64
			if admin.QueryRow(ctx, `
				SELECT count(pg_terminate_backend(pid)) FROM (
					SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = 'pglease-proof-stress'
					ORDER BY random() LIMIT 1) AS victim`).Scan(&n) == nil {
				killed += n
			}
		}
	})
	wg.Wait()
	elapsed := dur

	var total stressStats
	for _, s := range stats {
		total.add(s)
	}
	ops := rec.Ops()
	start := time.Now()
	rep := history.Check(ops, history.Config{Capacity: stressCapacity, Coalescing: coalescing})
	checkTime := time.Since(start)
	evs := readAudit(t, pool)
	srep := history.CheckServer(evs, stressCapacity)
	agree := history.Agree(ops, evs)
	tenures := history.CompareTenures(history.ServerTenures(evs), readTenures(t, pool))

	t.Logf("stress: %d clients, %s, %d ops (%.0f/s), checked in %s", stressClients, elapsed, len(ops),
		float64(len(ops))/elapsed.Seconds(), checkTime.Round(time.Millisecond))
	t.Logf("stress: %s", total)
	t.Logf("purge: %d purges deleted %d rows while the clients ran (%d cut off)", purges, purged, purgesCut)
	t.Logf("killer: %d backends terminated", killed)
	t.Logf("coalescing: %d pairs of clients sharing a holder; %d acquires or releases in flight at once with their pair's (batched)",
		stressPairs, overlapping(ops, coalescing))
	t.Logf("latency: %s", latencies(ops))
	t.Logf("history: %s", rep.Summary())
	t.Logf("server: %s", srep.Summary())
	t.Logf("client/server agreement: %d server writes matched, %d violations", agree.Writes, len(agree.Violations))
	failViolations(t, "history", rep.Violations)
	failViolations(t, "server history", srep.Violations)
	t.Logf("tenure history: %d tenures of pglease.tenures match the audit's, %d violations", tenures.Grants, len(tenures.Violations))
	failViolations(t, "client/server agreement", agree.Violations)
	failViolations(t, "tenure history", tenures.Violations)
	// Liveness, generously: the run did something of everything.
	if total.grants < 20 || total.writesOK < 10 || total.claims < 20 || total.takeovers < 5 || purged < 10 || killed < 10 {
		t.Errorf("too little happened to prove much: %s; %d rows purged, %d backends terminated", total, purged, killed)
	}
	if len(ops) < 100_000 {
		t.Logf("note: %d ops, below the 100,000 aimed at; run longer with %s=2m", len(ops), EnvStressDuration)
	}
}

// stressStats counts what one client did.
type stressStats struct {
	grants, takeovers, refusedAcquires, renews, lostRenews, releases int
	writesOK, writesRefused, staleWrites, batchedWrites              int
	claims, fullClaims, slotRenews, slotReleases, unknown, stalls    int
}

func (s *stressStats) add(o stressStats) {
	s.grants += o.grants
	s.takeovers += o.takeovers
	s.refusedAcquires += o.refusedAcquires
	s.renews += o.renews
	s.lostRenews += o.lostRenews
	s.releases += o.releases
	s.writesOK += o.writesOK
	s.writesRefused += o.writesRefused
	s.staleWrites += o.staleWrites
	s.batchedWrites += o.batchedWrites
	s.claims += o.claims
	s.fullClaims += o.fullClaims
	s.slotRenews += o.slotRenews
	s.slotReleases += o.slotReleases
	s.unknown += o.unknown
	s.stalls += o.stalls
}

func (s stressStats) String() string {
	return fmt.Sprintf("lease grants %d (%d after the previous holder's expiry), refused acquires %d, renewals %d (%d refused), releases %d, "+
		"fenced writes %d committed / %d refused (%d deliberately stale, %d sent with SendFenced), slot claims %d granted / %d full, slot renewals %d, slot releases %d, "+
		"unknown outcomes %d, stalls past a TTL %d",
		s.grants, s.takeovers, s.refusedAcquires, s.renews, s.lostRenews, s.releases, s.writesOK, s.writesRefused, s.staleWrites, s.batchedWrites,
		s.claims, s.fullClaims, s.slotRenews, s.slotReleases, s.unknown, s.stalls)
}

// stressClient is one holder making one call at a time.
type stressClient struct {
	holder  string
	pool    *pgxpool.Pool
	leases  *pglease.Client
	slots   *runslots.Client
	rec     *history.Recorder
	rng     *rand.Rand
	held    map[string]*pglease.Lease
	ended   map[string]int64 // a fence of ours that ended, per lease, for stale writes
	claimed map[string]*runslots.Slot
	only    string // when set, the one lease the client uses, and no slots
	units   int    // of each claim: 2 for every third client, else 1
}

// overlapping counts the acquires and releases of coalescing holders that
// were in flight while another of the same holder was (on another name):
// calls that went out in one batch, or queued for one.
func overlapping(ops []history.Op, coalescing map[string]bool) int {
	var calls []history.Op
	for _, op := range ops {
		if coalescing[op.Holder] && (op.Kind == history.Acquire || op.Kind == history.Release) {
			calls = append(calls, op)
		}
	}
	slices.SortFunc(calls, func(a, b history.Op) int { return cmp.Compare(a.Call, b.Call) })
	n := 0
	for i, op := range calls {
		for _, next := range calls[i+1:] {
			if next.Call >= op.Return {
				break
			}
			if next.Holder == op.Holder && next.Name != op.Name {
				n++
			}
		}
	}
	return n
}

func newStressClient(t *testing.T, pool *pgxpool.Pool, rec *history.Recorder, i int) *stressClient {
	holder := fmt.Sprintf("client-%02d", i)
	lc, err := pglease.New(pool, pglease.Config{Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	// Every third client claims 2 units (weighted claims), so the capacity
	// sweeps count units, not holders.
	units := 1 + i%3/2
	sc, err := runslots.New(pool, runslots.Config{Holder: holder, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return &stressClient{
		holder: holder, pool: pool, leases: lc, slots: sc, rec: rec, units: units,
		rng:  rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))),
		held: map[string]*pglease.Lease{}, ended: map[string]int64{}, claimed: map[string]*runslots.Slot{},
	}
}

func (c *stressClient) ttl() time.Duration {
	return stressMinTTL + time.Duration(c.rng.Int64N(int64(stressMaxTTL-stressMinTTL)))
}

// run makes calls until ctx ends.
func (c *stressClient) run(ctx context.Context, st *stressStats) {
	for ctx.Err() == nil {
		if c.only != "" || c.rng.IntN(2) == 0 {
			c.leaseStep(st)
		} else {
			c.slotStep(st)
		}
		switch r := c.rng.IntN(100); {
		case r < 2:
			st.stalls++
			sleep(ctx, time.Duration(c.rng.Int64N(int64(stressPauseMax))))
		case r < 30:
			sleep(ctx, time.Duration(c.rng.Int64N(int64(2*time.Millisecond))))
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// call runs fn with a bounded context and records it as op.
func (c *stressClient) call(op history.Op, fn func(ctx context.Context, op *history.Op) history.Outcome) history.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	op.Holder = c.holder
	op.Call = c.rec.Now()
	op.Outcome = fn(ctx, &op)
	op.Return = c.rec.Now()
	c.rec.Add(op)
	return op.Outcome
}

func (c *stressClient) leaseStep(st *stressStats) {
	name := stressLeases[c.rng.IntN(len(stressLeases))]
	if c.only != "" {
		name = c.only
	}
	l := c.held[name]
	r := c.rng.IntN(100)
	switch {
	case l == nil || r < 8: // acquire (re-entrant when held)
		ttl := c.ttl()
		op := history.Op{Kind: history.Acquire, Name: name, TTL: ttl}
		switch c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
			nl, err := c.leases.TryAcquire(ctx, name, ttl)
			if held, ok := errors.AsType[*pglease.HeldError](err); ok {
				op.Other, op.Fence, op.ExpiresIn = held.Holder, held.Fence, held.ExpiresIn
				return history.Refused
			}
			if err != nil {
				return history.Unknown
			}
			op.Fence = nl.Fence()
			if l == nil || l.Fence() != nl.Fence() {
				st.grants++
				if l != nil {
					st.takeovers++ // our own expired tenure replaced
				} else if nl.Fence() > 1 {
					st.takeovers++
				}
			}
			c.held[name] = nl
			return history.OK
		}) {
		case history.Refused:
			st.refusedAcquires++
		case history.Unknown:
			st.unknown++
		}
	case r < 45: // fenced write
		c.write(st, name, l.Fence(), false)
	case r < 50: // fenced write under a fence that ended
		if f, ok := c.ended[name]; ok {
			c.write(st, name, f, true)
		}
	case r < 85:
		op := history.Op{Kind: history.Renew, Name: name, Fence: l.Fence(), TTL: l.TTL()}
		switch c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
			return outcome(l.Renew(ctx))
		}) {
		case history.OK:
			st.renews++
		case history.Refused:
			st.lostRenews++
			c.lose(name, l)
		default:
			st.unknown++
		}
	default:
		op := history.Op{Kind: history.Release, Name: name, Fence: l.Fence()}
		if out := c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
			return outcome(l.Release(ctx))
		}); out == history.OK {
			st.releases++
		} else if out == history.Unknown {
			st.unknown++
		}
		c.lose(name, l)
	}
}

func (c *stressClient) lose(name string, l *pglease.Lease) {
	delete(c.held, name)
	c.ended[name] = l.Fence()
}

// write makes one fenced write under fence: in a transaction of
// WithFence, or half the time as a batch of SendFenced (one round trip).
func (c *stressClient) write(st *stressStats, name string, fence int64, stale bool) {
	op := history.Op{Kind: history.Write, Name: name, Fence: fence}
	batched := c.rng.IntN(2) == 0
	out := c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
		if batched {
			var b pgx.Batch
			b.Queue(writeSQL, name, fence, c.holder)
			return outcome(pglease.SendFenced(ctx, c.pool, name, fence, &b))
		}
		err := pglease.WithFence(ctx, c.pool, name, fence, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, writeSQL, name, fence, c.holder)
			return err
		})
		return outcome(err)
	})
	if batched {
		st.batchedWrites++
	}
	if stale {
		st.staleWrites++
	}
	switch out {
	case history.OK:
		st.writesOK++
	case history.Refused:
		st.writesRefused++
		if l := c.held[name]; l != nil && l.Fence() == fence {
			c.lose(name, l)
		}
	default:
		st.unknown++
	}
}

func (c *stressClient) slotStep(st *stressStats) {
	scope := stressScopes[c.rng.IntN(len(stressScopes))]
	s := c.claimed[scope]
	r := c.rng.IntN(100)
	switch {
	case s == nil || r < 5:
		ttl, capacity := c.ttl(), stressCapacity[scope]
		if capacity > 2 && c.rng.IntN(4) == 0 {
			capacity--
		}
		op := history.Op{Kind: history.Claim, Name: scope, TTL: ttl, Capacity: capacity, Units: c.units}
		switch c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
			ns, err := c.slots.TryClaim(ctx, runslots.Want{Scope: scope, Capacity: capacity, Units: c.units}, ttl)
			if full, ok := errors.AsType[*runslots.FullError](err); ok {
				op.InUse = full.InUse
				return history.Refused
			}
			if err != nil {
				return history.Unknown
			}
			op.Slot, op.Fence = ns.Number(), ns.Fence()
			c.claimed[scope] = ns
			return history.OK
		}) {
		case history.OK:
			st.claims++
		case history.Refused:
			st.fullClaims++
		default:
			st.unknown++
		}
	case r < 70:
		op := history.Op{Kind: history.RenewSlot, Name: scope, Slot: s.Number(), Fence: s.Fence(), TTL: s.TTL()}
		switch c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
			return outcome(s.Renew(ctx))
		}) {
		case history.OK:
			st.slotRenews++
		case history.Refused:
			delete(c.claimed, scope)
		default:
			st.unknown++
		}
	default:
		op := history.Op{Kind: history.ReleaseSlot, Name: scope, Slot: s.Number(), Fence: s.Fence()}
		if c.call(op, func(ctx context.Context, op *history.Op) history.Outcome {
			return outcome(s.Release(ctx))
		}) == history.OK {
			st.slotReleases++
		}
		delete(c.claimed, scope)
	}
}

// latencies summarises call latencies per kind: median and 99th
// percentile.
func latencies(ops []history.Op) string {
	byKind := map[history.Kind][]time.Duration{}
	for _, op := range ops {
		byKind[op.Kind] = append(byKind[op.Kind], op.Return-op.Call)
	}
	var parts []string
	for k := history.Acquire; k <= history.ReleaseSlot; k++ {
		ds := byKind[k]
		if len(ds) == 0 {
			continue
		}
		slices.Sort(ds)
		parts = append(parts, fmt.Sprintf("%s p50 %s p99 %s", k, ds[len(ds)/2].Round(10*time.Microsecond), ds[len(ds)*99/100].Round(10*time.Microsecond)))
	}
	return strings.Join(parts, ", ")
}

// outcome classifies the error of a renewal, release or fenced write:
// ErrLeaseLost (and ErrSlotLost, which matches it) is the server's refusal.
func outcome(err error) history.Outcome {
	switch {
	case err == nil:
		return history.OK
	case errors.Is(err, pglease.ErrLeaseLost):
		return history.Refused
	}
	return history.Unknown
}
