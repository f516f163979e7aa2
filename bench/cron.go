package main

import (
	"context"
	"fmt"
	"log"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of the cron comparison, one round trip and one commit
// each, on one connection: a plain cycle (acquire + release) and a cycle
// of pglease run --once-per (acquire + run_begin + run_end + release). The
// window is a microsecond, so that every run begins a new one (a real
// window skips the runs after its first success, which cost less).
const (
	cronAcquireSQL = `SELECT fence FROM pglease.acquire('bench/cron', 'bench', interval '1 minute')`
	cronReleaseSQL = `SELECT released FROM pglease.release('bench/cron', 'bench', $1)`
	cronBeginSQL   = `SELECT run FROM pglease.run_begin('bench/cron', 'bench', $1, interval '1 microsecond')`
	cronEndSQL     = `SELECT recorded FROM pglease.run_end('bench/cron', 'bench', $1, 0)`
)

// cronTurns is how many turns each kind of cycle's runs are split into,
// alternating, so that a change of load hits both alike.
const cronTurns = 8

// runCronBench measures the cost of the run ledger per run (-cron-only):
// cfg.cronRuns cycles of each kind on one connection, and prints the
// section.
func runCronBench(ctx context.Context, cfg config) error {
	load := loadavg()
	var plain, cron []time.Duration
	err := withScratchConn(ctx, cfg.url, "_cron", func(conn *pgx.Conn) error {
		per := max(cfg.cronRuns/cronTurns, 1)
		for turn := range cronTurns {
			log.Printf("cron: turn %d of %d, %d cycles of each kind", turn+1, cronTurns, per)
			for range per {
				d, err := cronCycle(ctx, conn, false)
				if err != nil {
					return err
				}
				plain = append(plain, d)
				if d, err = cronCycle(ctx, conn, true); err != nil {
					return err
				}
				cron = append(cron, d)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(plain)
	slices.Sort(cron)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("## Cron: the run ledger's cost per run (%d cycles of each, one connection)\n\n", len(plain))
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs. Every statement commits on its own (fsync on).\n\n",
		load, loadavg(), runtime.NumCPU())
	fmt.Println("| Cycle | Round trips | p50 (ms) | p99 (ms) | Cycles/s | p50 / plain |")
	fmt.Println("|---|---:|---:|---:|---:|---:|")
	total := func(ds []time.Duration) time.Duration {
		var t time.Duration
		for _, d := range ds {
			t += d
		}
		return t
	}
	for _, row := range []struct {
		name  string
		trips int
		ds    []time.Duration
	}{
		{"acquire + release", 2, plain},
		{"acquire + run_begin + run_end + release (--once-per)", 4, cron},
	} {
		fmt.Printf("| %s | %d | %.3f | %.3f | %s | %.2f× |\n", row.name, row.trips, ms(median(row.ds)),
			ms(percentile(row.ds, 99)), count(float64(len(row.ds))/total(row.ds).Seconds()),
			float64(median(row.ds))/float64(median(plain)))
	}
	return nil
}

// cronCycle runs one cycle and returns how long it took.
func cronCycle(ctx context.Context, conn *pgx.Conn, ledger bool) (time.Duration, error) {
	start := time.Now()
	var fence int64
	if err := conn.QueryRow(ctx, cronAcquireSQL).Scan(&fence); err != nil {
		return 0, fmt.Errorf("acquire: %w", err)
	}
	if ledger {
		var run, recorded bool
		if err := conn.QueryRow(ctx, cronBeginSQL, fence).Scan(&run); err != nil || !run {
			return 0, fmt.Errorf("run_begin: run %v, %w", run, err)
		}
		if err := conn.QueryRow(ctx, cronEndSQL, fence).Scan(&recorded); err != nil || !recorded {
			return 0, fmt.Errorf("run_end: recorded %v, %w", recorded, err)
		}
	}
	var released bool
	if err := conn.QueryRow(ctx, cronReleaseSQL, fence).Scan(&released); err != nil || !released {
		return 0, fmt.Errorf("release: released %v, %w", released, err)
	}
	return time.Since(start), nil
}
