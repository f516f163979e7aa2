package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/supervisor"
)

// Leadership is the leadership section (docs/leadership.md).
type Leadership struct {
	Handovers int     `json:"handovers"`
	Handover  Latency `json:"handover_ms"` // request → new holder's workload starts
	Writes    int64   `json:"fenced_writes"`
	Refused   int64   `json:"fenced_writes_refused"`
	// The calls' mean round trips on one connection, committed without
	// waiting for the WAL flush, in ms.
	RenewMs        float64 `json:"renew_ms"`
	RenewLeaseMs   float64 `json:"renew_lease_ms"`
	AcquireMs      float64 `json:"acquire_ms"`
	AcquireValueMs float64 `json:"acquire_value_ms"`
	// Cycles/s of acquire + release at Clients, unobserved and observed.
	Clients    int     `json:"clients"`
	Unobserved float64 `json:"unobserved_cycles_per_sec"`
	Observed   float64 `json:"observed_cycles_per_sec"`
}

// measureLeader measures leadership on a scratch database of its own: the
// handover on request, renew with and without the request check, acquire
// with and without a value, and the cost of observing a lease.
func measureLeader(ctx context.Context, cfg config) (_ *Leadership, err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_leader"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	pool, err := pgxpool.New(ctx, sc.url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	h, err := handoverOnRequest(ctx, pool, cfg.handovers)
	if err != nil {
		return nil, fmt.Errorf("handover on request: %w", err)
	}
	l := &Leadership{Handovers: len(h.took), Handover: summarize(h.took), Writes: h.writes, Refused: h.refused, Clients: 8}
	renew, renewLease, err := pairedCalls(ctx, pool, cfg,
		`SELECT renewed FROM pglease.renew('bench/renew', 'h', 1, '1 hour')`,
		`SELECT renewed FROM pglease.renew_lease('bench/renew', 'h', 1, '1 hour')`,
		`SELECT acquired FROM pglease.acquire('bench/renew', 'h', '1 hour')`)
	if err != nil {
		return nil, fmt.Errorf("renew: %w", err)
	}
	acq, acqValue, err := pairedCalls(ctx, pool, cfg,
		`SELECT acquired FROM pglease.acquire('bench/acquire', 'h', '1 hour')`,
		`SELECT acquired FROM pglease.acquire('bench/acquire', 'h', '1 hour', '10.0.0.1:8080')`,
		`SELECT acquired FROM pglease.acquire('bench/acquire', 'h', '1 hour')`)
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	l.RenewMs, l.RenewLeaseMs, l.AcquireMs, l.AcquireValueMs = ms(renew), ms(renewLease), ms(acq), ms(acqValue)
	if l.Unobserved, l.Observed, err = observeCost(ctx, pool, cfg, l.Clients); err != nil {
		return nil, fmt.Errorf("observing: %w", err)
	}
	return l, nil
}

// writeMarkdown writes the section under a heading of level h.
func (l *Leadership) writeMarkdown(w io.Writer, h string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s Leadership", h)
	p("")
	p("Two supervisors on one lease, whose workloads make fenced writes in a loop; the leader is asked to hand over to the other (pgleaseadmin.RequestRelease) %d times, and each handover is timed from the request to the new leader's workload starting. Then renew against renew_lease (which also tells the holder of a request), and acquire of the caller's own lease without and with a value, each the mean round trip on one connection with the commit not waiting for its flush (the functions' own time); and acquire + release cycles at C=%d on leases nobody observes, against leases observed with pglease.observe (each change then sends a notification).", l.Handovers, l.Clients)
	p("")
	p("| Measure | Figure |")
	p("| --- | ---: |")
	p("| Handover on request: request → new leader's workload starts, p50 / p99 / max | %.1f / %.1f / %.1f ms |", l.Handover.P50, l.Handover.P99, l.Handover.Max)
	p("| Fenced writes refused during the handovers | %d of %d |", l.Refused, l.Writes)
	p("| renew / renew_lease, round trip without the flush | %.3f / %.3f ms |", l.RenewMs, l.RenewLeaseMs)
	p("| acquire of the caller's own lease, without / with a value, round trip without the flush | %.3f / %.3f ms |", l.AcquireMs, l.AcquireValueMs)
	ratio := 0.0
	if l.Unobserved > 0 {
		ratio = l.Observed / l.Unobserved
	}
	p("| acquire + release cycles/s at C=%d, unobserved / observed | %s / %s (%.2f×) |", l.Clients, count(l.Unobserved), count(l.Observed), ratio)
}

// runLeaderBench runs only the leadership section (-leader-only) and
// prints it.
func runLeaderBench(ctx context.Context, cfg config) error {
	load := loadavg()
	l, err := measureLeader(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	l.writeMarkdown(os.Stdout, "##")
	return nil
}

// handovers are the latencies of the handovers on request and the fenced
// writes made meanwhile.
type handovers struct {
	took            []time.Duration
	writes, refused int64
}

// handoverOnRequest runs two supervisors on one lease, whose workloads make
// fenced writes in a loop, and asks the leader to hand over to the other n
// times: each handover is timed from the request to the new leader's
// workload start, through NOTIFY.
func handoverOnRequest(ctx context.Context, pool *pgxpool.Pool, n int) (*handovers, error) {
	if _, err := pool.Exec(ctx, `CREATE TABLE bench_fenced (id int PRIMARY KEY, fence bigint)`); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_fenced VALUES (1, 0)`); err != nil {
		return nil, err
	}
	h := &handovers{}
	started := make(chan string, 4)  // the holder whose workload started
	standing := make(chan string, 4) // a holder that stands by, seeing a new leader
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: the supervisors return
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, holder := range []string{"bench-a", "bench-b"} {
		s, err := supervisor.NewLease(pool, "bench/lead", supervisor.Config{
			Holder: holder, Value: holder + ":8080", TTL: 10 * time.Second,
			RestartDelay: 20 * time.Millisecond, Logger: quiet,
			Observer: func(e supervisor.Event) {
				if e.Kind == supervisor.EventLeaderSeen {
					select {
					case standing <- holder:
					default:
					}
				}
			},
		})
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			_ = s.Run(ctx, func(ctx context.Context) error {
				started <- holder
				fence := s.Fence()
				for ctx.Err() == nil {
					err := pglease.WithFence(ctx, pool, "bench/lead", fence, func(tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `UPDATE bench_fenced SET fence = $1 WHERE id = 1`, fence)
						return err
					})
					switch {
					case err == nil:
						atomic.AddInt64(&h.writes, 1)
					case errors.Is(err, pglease.ErrLeaseLost):
						atomic.AddInt64(&h.writes, 1)
						atomic.AddInt64(&h.refused, 1)
					}
				}
				return nil
			})
		})
	}
	leader := <-started
	for range n {
		other := map[string]string{"bench-a": "bench-b", "bench-b": "bench-a"}[leader]
		if err := awaitHolder(ctx, standing, other); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, "bench/lead", pgleaseadmin.ReleaseRequest{To: other}); err != nil {
			return nil, err
		}
		if err := awaitHolder(ctx, started, other); err != nil {
			return nil, err
		}
		h.took = append(h.took, time.Since(t0))
		leader = other
	}
	log.Printf("leader: %d handovers on request", n)
	return h, nil
}

// awaitHolder waits for holder on ch, dropping others, for up to a minute.
func awaitHolder(ctx context.Context, ch <-chan string, holder string) error {
	timeout := time.After(time.Minute)
	for {
		select {
		case got := <-ch:
			if got == holder {
				return nil
			}
		case <-timeout:
			return fmt.Errorf("%s did not show up in a minute", holder)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// pairedCalls times sqlA and sqlB on one connection, interleaved in
// cfg.rounds turns of cfg.cell each, after setup, and returns the mean of
// each.
func pairedCalls(ctx context.Context, pool *pgxpool.Pool, cfg config, sqlA, sqlB, setup string) (a, b time.Duration, err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Release()
	// Commits without waiting for the WAL flush, so that the rows compare
	// the functions' own time, not the disk's.
	if _, err := conn.Exec(ctx, `SET synchronous_commit = off`); err != nil {
		return 0, 0, err
	}
	defer conn.Exec(context.WithoutCancel(ctx), `RESET synchronous_commit`) //nolint:errcheck // the pool's connection
	if _, err := conn.Exec(ctx, setup); err != nil {
		return 0, 0, err
	}
	var took [2]time.Duration
	var calls [2]int
	for range cfg.rounds {
		for i, sql := range []string{sqlA, sqlB} {
			end := time.Now().Add(cfg.cell / 2)
			for time.Now().Before(end) {
				t0 := time.Now()
				if _, err := conn.Exec(ctx, sql); err != nil {
					return 0, 0, err
				}
				took[i] += time.Since(t0)
				calls[i]++
			}
		}
	}
	return took[0] / time.Duration(calls[0]), took[1] / time.Duration(calls[1]), nil
}

// observeCost returns acquire + release cycles per second at c clients,
// each on a lease of its own, with nobody observing the leases and with
// every lease observed (each cycle then NOTIFYs twice), interleaved.
func observeCost(ctx context.Context, pool *pgxpool.Pool, cfg config, c int) (unobserved, observed float64, err error) {
	var ops [2]int64
	var secs [2]float64
	for range cfg.rounds {
		for i, prefix := range []string{"bench/unobserved/", "bench/observed/"} {
			if i == 1 {
				for k := range c {
					if _, err := pool.Exec(ctx, `SELECT pglease.observe($1, '1 hour')`, fmt.Sprint(prefix, k)); err != nil {
						return 0, 0, err
					}
				}
			}
			var wg sync.WaitGroup
			var failed atomic.Value
			t0 := time.Now()
			end := t0.Add(cfg.cell / 2)
			for k := range c {
				wg.Go(func() {
					name := fmt.Sprint(prefix, k)
					for time.Now().Before(end) {
						var fence int64
						if err := pool.QueryRow(ctx, `SELECT fence FROM pglease.acquire($1, 'h', '1 min', 'v')`, name).Scan(&fence); err != nil {
							failed.Store(err)
							return
						}
						if _, err := pool.Exec(ctx, `SELECT pglease.release($1, 'h', $2)`, name, fence); err != nil {
							failed.Store(err)
							return
						}
						atomic.AddInt64(&ops[i], 1)
					}
				})
			}
			wg.Wait()
			secs[i] += time.Since(t0).Seconds()
			if err, ok := failed.Load().(error); ok {
				return 0, 0, err
			}
		}
	}
	return float64(ops[0]) / secs[0], float64(ops[1]) / secs[1], nil
}
