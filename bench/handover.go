package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// waiterReadyTimeout bounds the wait for the waiter's first two, refused,
// acquires.
const waiterReadyTimeout = 10 * time.Second

// HandoverResult is the time from the holder letting go to the waiter
// holding, over a number of trials.
type HandoverResult struct {
	Kind   string  `json:"kind"`  // "release" or "crash"
	Level  string  `json:"level"` // "client" (pglease.Client) or "supervisor"
	Trials int     `json:"trials"`
	TTLMs  float64 `json:"ttl_ms"`
	// Latency is, for a release, from the holder's Release call to the
	// waiter's Acquire returning; for a crash, from the holder's last
	// renewal being sent to the waiter's Acquire returning.
	Latency Latency `json:"latency"`
	// OverTTL is Latency minus the TTL, for a crash.
	OverTTL *Latency `json:"over_ttl,omitempty"`
	// Parts splits a release handover. At client level: from the Release
	// call to the waiter sending its next acquire ("notified": the release's
	// commit and the NOTIFY's delivery), and that acquire ("acquire"). At
	// supervisor level: from the leader's workload returning to its
	// EventReleased ("release"), from there to the standby's EventAcquired
	// ("acquire"), and from there to the standby's workload starting
	// ("start").
	Parts map[string]Latency `json:"parts,omitempty"`
}

// acquireTracer records the acquire queries of the pool it traces, and
// signals the end of the second one after each arm: a refused Acquire
// starts to LISTEN and tries once more before it waits (so that a release
// in between is not missed), so after its second refusal the waiter
// listens and waits. Letting go after the first would race the release with
// that retry.
type acquireTracer struct {
	mu    sync.Mutex
	armed chan struct{}
	spans []span // acquire queries since the last arm
}

// span is when a query started and ended.
type span struct{ start, end time.Time }

type acquireQueryKey struct{}

// arm forgets the queries recorded so far and returns a channel closed at
// the end of the second acquire query from now.
func (t *acquireTracer) arm() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = make(chan struct{})
	t.spans = nil
	return t.armed
}

// last returns the latest acquire query recorded since arm.
func (t *acquireTracer) last() (span, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.spans) == 0 {
		return span{}, false
	}
	return t.spans[len(t.spans)-1], true
}

// TraceQueryStart implements pgx.QueryTracer.
func (t *acquireTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.Contains(data.SQL, "pglease.acquire(") {
		return context.WithValue(ctx, acquireQueryKey{}, time.Now())
	}
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (t *acquireTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	start, ok := ctx.Value(acquireQueryKey{}).(time.Time)
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.spans = append(t.spans, span{start: start, end: time.Now()})
	if t.armed != nil && len(t.spans) == 2 {
		close(t.armed)
		t.armed = nil
	}
}

// handoverPair is a holder and a waiter, each a pglease.Client on a pool of
// its own; the waiter's pool is traced.
type handoverPair struct {
	holder, waiter *pglease.Client
	tracer         *acquireTracer
	close          func()
}

func (e *env) handoverPair(ctx context.Context) (*handoverPair, error) {
	tracer := &acquireTracer{}
	var pools []*pgxpool.Pool
	p := &handoverPair{tracer: tracer, close: func() {
		for _, pool := range pools {
			pool.Close()
		}
	}}
	// Two connections each: Acquire LISTENs on one and acquires on the other.
	for _, t := range []pgx.QueryTracer{nil, tracer} {
		cfg, err := pgxpool.ParseConfig(e.url)
		if err != nil {
			p.close()
			return nil, err
		}
		cfg.MaxConns = 2
		cfg.ConnConfig.Tracer = t
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			p.close()
			return nil, err
		}
		pools = append(pools, pool)
	}
	var err error
	if p.holder, err = pglease.New(pools[0], pglease.Config{Holder: "bench/handover/holder"}); err == nil {
		p.waiter, err = pglease.New(pools[1], pglease.Config{Holder: "bench/handover/waiter"})
	}
	if err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// acquired is what the waiter's Acquire returned, and when.
type acquired struct {
	lease *pglease.Lease
	at    time.Time
	err   error
}

// handover is what one trial measured.
type handover struct {
	total time.Duration
	// For a release: from the Release call to the waiter's next acquire
	// query, and that query.
	notified, acquire time.Duration
}

// trial runs one handover of lease name: the holder takes it for ttl, the
// waiter starts a blocking Acquire, and once the waiter has been refused and
// waits (see acquireTracer) the holder lets go: it releases, or, for a crash, renews one last time and
// goes silent. total runs from the release call, or from the last renewal
// being sent, to the waiter's Acquire returning.
func (p *handoverPair) trial(ctx context.Context, name string, ttl time.Duration, crash bool) (handover, error) {
	var h handover
	sent := time.Now()
	held, err := p.holder.TryAcquire(ctx, name, ttl)
	if err != nil {
		return h, err
	}
	ready := p.tracer.arm()
	done := make(chan acquired, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, err := p.waiter.Acquire(wctx, name, cycleTTL)
		done <- acquired{lease: l, at: time.Now(), err: err}
	}()
	var from time.Time
	select {
	case <-ready:
		from = time.Now()
		switch err := p.letGo(ctx, held, crash); {
		case crash && errors.Is(err, pglease.ErrLeaseLost):
			from = sent // the machine stalled for a whole TTL: the acquire was the last renewal
		case err != nil:
			return h, err
		}
	case r := <-done:
		if !crash || r.err != nil {
			return h, fmt.Errorf("waiter acquired %s before the holder let go: %v", name, r.err)
		}
		done <- r
		from = sent // expired before the waiter first tried: the acquire was the last renewal
	case <-time.After(waiterReadyTimeout):
		return h, fmt.Errorf("waiter was not refused %s within %s", name, waiterReadyTimeout)
	}
	r := <-done
	if r.err != nil {
		return h, fmt.Errorf("waiter acquire %s: %w", name, r.err)
	}
	h.total = r.at.Sub(from)
	if q, ok := p.tracer.last(); ok && !crash {
		h.notified, h.acquire = q.start.Sub(from), q.end.Sub(q.start)
	}
	return h, r.lease.Release(ctx)
}

// letGo ends the holder's tenure: a release, or for a crash one last
// renewal, after which nothing renews the lease.
func (p *handoverPair) letGo(ctx context.Context, held *pglease.Lease, crash bool) error {
	if crash {
		return held.Renew(ctx)
	}
	return held.Release(ctx)
}

// benchHandover measures releases graceful handovers (Release wakes the
// waiter's Acquire through NOTIFY) and crashes crash takeovers (the holder
// stops renewing a lease of crashTTL; the waiter's Acquire returns after the
// expiry), the two kinds taking turns while both have trials left.
func (e *env) benchHandover(ctx context.Context, releases, crashes int, crashTTL time.Duration) ([]HandoverResult, error) {
	p, err := e.handoverPair(ctx)
	if err != nil {
		return nil, err
	}
	defer p.close()

	var graceful, crash, over, notified, acquire []time.Duration
	for i := range max(releases, crashes) {
		if i < releases {
			g, err := p.trial(ctx, fmt.Sprintf("handover/release/%d", i), cycleTTL, false)
			if err != nil {
				return nil, fmt.Errorf("release handover %d: %w", i, err)
			}
			graceful = append(graceful, g.total)
			notified, acquire = append(notified, g.notified), append(acquire, g.acquire)
		}
		if i >= crashes {
			continue
		}
		c, err := p.trial(ctx, fmt.Sprintf("handover/crash/%d", i), crashTTL, true)
		if err != nil {
			return nil, fmt.Errorf("crash takeover %d: %w", i, err)
		}
		crash, over = append(crash, c.total), append(over, c.total-crashTTL)
	}
	overTTL := summarize(over)
	return []HandoverResult{
		{
			Kind: "release", Level: "client", Trials: releases, TTLMs: ms(cycleTTL), Latency: summarize(graceful),
			Parts: map[string]Latency{"notified": summarize(notified), "acquire": summarize(acquire)},
		},
		{Kind: "crash", Level: "client", Trials: crashes, TTLMs: ms(crashTTL), Latency: summarize(crash), OverTTL: &overTTL},
	}, nil
}
