package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
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

// runLeaderBench measures leadership (docs/leadership.md) on a scratch
// database and prints its section: the handover on request, renew with and
// without the request check, acquire with and without a value, and the
// cost of observing a lease.
func runLeaderBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_leader"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	pool, err := pgxpool.New(ctx, sc.url)
	if err != nil {
		return err
	}
	defer pool.Close()
	load := loadavg()
	h, err := handoverOnRequest(ctx, pool, cfg.handovers)
	if err != nil {
		return fmt.Errorf("handover on request: %w", err)
	}
	renew, renewLease, err := pairedCalls(ctx, pool, cfg,
		`SELECT renewed FROM pglease.renew('bench/renew', 'h', 1, '1 hour')`,
		`SELECT renewed FROM pglease.renew_lease('bench/renew', 'h', 1, '1 hour')`,
		`SELECT acquired FROM pglease.acquire('bench/renew', 'h', '1 hour')`)
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	acq, acqValue, err := pairedCalls(ctx, pool, cfg,
		`SELECT acquired FROM pglease.acquire('bench/acquire', 'h', '1 hour')`,
		`SELECT acquired FROM pglease.acquire('bench/acquire', 'h', '1 hour', '10.0.0.1:8080')`,
		`SELECT acquired FROM pglease.acquire('bench/acquire', 'h', '1 hour')`)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	const c = 8
	unobserved, observed, err := observeCost(ctx, pool, cfg, c)
	if err != nil {
		return fmt.Errorf("observing: %w", err)
	}
	fmt.Printf("## Leadership (%d handovers; %s per cell, %d turns)\n\n", cfg.handovers, cfg.cell, cfg.rounds)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	fmt.Println("| Measure | Figure |")
	fmt.Println("|---|---:|")
	lat := summarize(h.took)
	fmt.Printf("| Handover on request: request → new holder's workload starts, p50 / p99 / max | %.1f / %.1f / %.1f ms |\n",
		lat.P50, lat.P99, lat.Max)
	fmt.Printf("| Fenced writes refused during the handovers (target 0) | %d of %d |\n", h.refused, h.writes)
	fmt.Printf("| renew, round trip without the WAL flush (mean) | %.3f ms |\n", ms(renew))
	fmt.Printf("| renew_lease (renew + request check), round trip without the WAL flush (mean) | %.3f ms |\n", ms(renewLease))
	fmt.Printf("| acquire of the own tenure, 0.2.0 overload, without the WAL flush (mean) | %.3f ms |\n", ms(acq))
	fmt.Printf("| acquire of the own tenure with a value, without the WAL flush (mean) | %.3f ms |\n", ms(acqValue))
	fmt.Printf("| acquire + release cycles/s at C=%d, unobserved | %s |\n", c, count(unobserved))
	fmt.Printf("| acquire + release cycles/s at C=%d, observed (2 NOTIFYs per cycle) | %s (%.3f×) |\n", c, count(observed), observed/unobserved)
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
