package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
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

// CronCost is the cron section: plain cycles against cycles with the run
// ledger, on one connection.
type CronCost struct {
	Rows []CronRow `json:"rows"`
}

// CronRow is one kind of cycle of the cron section.
type CronRow struct {
	Name         string  `json:"name"`
	RoundTrips   int     `json:"round_trips"`
	Cycles       int     `json:"cycles"`
	P50Ms        float64 `json:"p50_ms"`
	P99Ms        float64 `json:"p99_ms"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
}

// measureCron measures the cost of the run ledger per run: runs cycles of
// each kind on one connection of a scratch database, in turns.
func measureCron(ctx context.Context, cfg config, runs int) (*CronCost, error) {
	var plain, cron []time.Duration
	err := withScratchConn(ctx, cfg.url, "_cron", func(conn *pgx.Conn) error {
		per := max(runs/cronTurns, 1)
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
		return nil, err
	}
	c := &CronCost{}
	for _, row := range []struct {
		name  string
		trips int
		ds    []time.Duration
	}{
		{"acquire + release", 2, plain},
		{"acquire + run_begin + run_end + release (pglease run --once-per)", 4, cron},
	} {
		slices.Sort(row.ds)
		var total time.Duration
		for _, d := range row.ds {
			total += d
		}
		c.Rows = append(c.Rows, CronRow{Name: row.name, RoundTrips: row.trips, Cycles: len(row.ds),
			P50Ms: ms(median(row.ds)), P99Ms: ms(percentile(row.ds, 99)), CyclesPerSec: float64(len(row.ds)) / total.Seconds()})
	}
	return c, nil
}

// writeMarkdown writes the section under a heading of level h.
func (c *CronCost) writeMarkdown(w io.Writer, h string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s Cron: what the run ledger costs per run", h)
	p("")
	p("`pglease run --once-per` records each run in a ledger: two more statements, each its own commit, around the command. One connection alternates plain acquire + release cycles with cycles that also begin and end a run, in %d turns; every statement commits on its own.", cronTurns)
	p("")
	p("| Cycle | Round trips | Cycles | p50 ms | p99 ms | cycles/s | p50 × plain |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, r := range c.Rows {
		p("| %s | %d | %s | %.3f | %.3f | %s | %.2f× |", r.Name, r.RoundTrips, count(float64(r.Cycles)), r.P50Ms, r.P99Ms, count(r.CyclesPerSec), r.P50Ms/c.Rows[0].P50Ms)
	}
}

// runCronBench runs only the cron section (-cron-only) and prints it.
func runCronBench(ctx context.Context, cfg config) error {
	load := loadavg()
	c, err := measureCron(ctx, cfg, cfg.cronRuns)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	c.writeMarkdown(os.Stdout, "##")
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
