package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimUnitsSQL is the weighted claim (0.3.0); slotsOnlyCapacity is the
// capacity of its rows, slotsOnlyUnits the unit counts compared.
const (
	claimUnitsSQL     = `SELECT claimed, slot, fence FROM pglease.claim_slot($1, $2, $3, $4, $5)`
	renewSlotSQL      = `SELECT renewed FROM pglease.renew_slot($1, $2, $3, $4, $5)`
	slotsOnlyCapacity = 64
	slotsOnlyRenews   = 2000
	hotShareSQL       = `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = 'pglease' AND relname = $1`
)

var slotsOnlyUnits = []int{1, 4, 16}

// unitsCycle is a claim of units units of scope at capacity and its release.
func unitsCycle(conn *pgx.Conn, scope string, capacity, units int) []step {
	holder := "bench/" + scope
	var slot int32
	var fence int64
	return []step{
		func(ctx context.Context) error {
			var claimed bool
			var s *int32
			var f *int64
			if err := conn.QueryRow(ctx, claimUnitsSQL, scope, holder, capacity, cycleTTL, units).Scan(&claimed, &s, &f); err != nil {
				return err
			}
			if !claimed {
				return errRefused("claim_slot " + scope)
			}
			slot, fence = *s, *f
			return nil
		},
		func(ctx context.Context) error {
			var released bool
			if err := conn.QueryRow(ctx, releaseSlotSQL, scope, slot, holder, fence).Scan(&released); err != nil {
				return err
			}
			if !released {
				return errRefused("release_slot " + scope)
			}
			return nil
		},
	}
}

// slotsOnlyWorkloads: the lease cycle, the 0.2.0 claim of one slot, and
// the weighted claims, each client in a scope (lease) of its own.
func (e *env) slotsOnlyWorkloads() []workload {
	ws := []workload{e.acquireReleaseSQL("acquire-release/sql", "SQL via pgx", releaseSQL)}
	key := "slots-only/one"
	ws = append(ws, workload{
		key: key, name: fmt.Sprintf("claim_slot (0.2.0 form) + release_slot, capacity %d", slotsOnlyCapacity), path: "SQL via pgx",
		steps: []string{"claim", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				return slotCycle(conn, id(key, i), slotsOnlyCapacity), nil
			})
		},
	})
	for _, u := range slotsOnlyUnits {
		key := fmt.Sprintf("slots-only/units-%d", u)
		ws = append(ws, workload{
			key: key, name: fmt.Sprintf("claim_slot of %d unit(s) + release_slot, capacity %d", u, slotsOnlyCapacity), path: "SQL via pgx",
			steps: []string{"claim", "release"},
			start: func(ctx context.Context, n int) (*instance, error) {
				return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
					return unitsCycle(conn, id(key, i), slotsOnlyCapacity, u), nil
				})
			},
		})
	}
	return ws
}

// renewShare times renew and renew_slot on the server (EXPLAIN ANALYZE,
// median of slotsOnlyRenews each, interleaved) on a live lease and a live
// slot, and returns the slot renewals' share of HOT updates.
func (e *env) renewShare(ctx context.Context) (renew, renewSlot time.Duration, hot float64, err error) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close(ctx)
	const name, holder = "slots-only/renew", "bench/slots-only/renew"
	fence, err := sqlAcquire(ctx, conn, name, holder, heldTTL)
	if err != nil {
		return 0, 0, 0, err
	}
	var claimed bool
	var slot *int32
	var sfence *int64
	if err := conn.QueryRow(ctx, claimUnitsSQL, name, holder, slotsOnlyCapacity, heldTTL, 1).Scan(&claimed, &slot, &sfence); err != nil || !claimed {
		return 0, 0, 0, errors.Join(err, errRefused("claim_slot "+name))
	}
	var upd0, hot0 int64
	if err := conn.QueryRow(ctx, hotShareSQL, "slots").Scan(&upd0, &hot0); err != nil {
		return 0, 0, 0, err
	}
	rs, ss := make([]time.Duration, slotsOnlyRenews), make([]time.Duration, slotsOnlyRenews)
	for i := range rs {
		if rs[i], err = explainExec(ctx, conn, renewSQL, name, holder, fence, heldTTL); err != nil {
			return 0, 0, 0, err
		}
		if ss[i], err = explainExec(ctx, conn, renewSlotSQL, name, *slot, holder, *sfence, heldTTL); err != nil {
			return 0, 0, 0, err
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, 0, 0, err
	}
	// The statistics of this backend are flushed at its next transaction.
	var upd, hotUpd int64
	if err := conn.QueryRow(ctx, hotShareSQL, "slots").Scan(&upd, &hotUpd); err != nil {
		return 0, 0, 0, err
	}
	if upd > upd0 {
		hot = float64(hotUpd-hot0) / float64(upd-upd0)
	}
	return median(rs), median(ss), hot, nil
}

// runSlotsBench runs only the slot section (-slots-only): the claim +
// release cycles against a lease's acquire + release at -clients, weighted
// claims of 1, 4 and 16 units of capacity 64, and renew_slot's server time
// against renew's with its share of HOT updates.
func runSlotsBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_slots"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	load := loadavg()
	ws := e.slotsOnlyWorkloads()
	var r Report
	for _, n := range cfg.clients {
		log.Printf("slot cycles at C=%d: %d rows × %s in %d turns", n, len(ws), cfg.cell, cfg.rounds)
		ts, err := runGroupOn(ctx, e, ws, n, cfg)
		if err != nil {
			return err
		}
		for i, w := range ws {
			r.Throughput = append(r.Throughput, newRow(w, n, ts[i]))
		}
	}
	renew, renewSlot, hot, err := e.renewShare(ctx)
	if err != nil {
		return fmt.Errorf("renew_slot's server time: %w", err)
	}
	fmt.Printf("## Slots (%s per cell, %d turns)\n\n", cfg.cell, cfg.rounds)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	fmt.Println("Each client claims in a scope (acquires a lease) of its own. Ratios are the median of the turn-by-turn ratios (first and third quartile in brackets) over the lease's acquire + release cycle; the target for one unit of capacity 64 is at least 0.85×.")
	fmt.Println()
	fmt.Println("| Cycle | C | cycles/s | × acquire + release | p50 ms | p99 ms |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range cfg.clients {
		base := r.row("acquire-release/sql", n)
		for _, w := range ws {
			row := r.row(w.key, n)
			p := pairedRatio(row, base)
			fmt.Printf("| %s | %d | %s | %.3f× (%.3f–%.3f) | %.3f | %.3f |\n",
				w.name, n, count(row.OpsPerSec), p.Median, p.Q1, p.Q3, row.Latency.P50, row.Latency.P99)
		}
	}
	fmt.Println()
	fmt.Printf("Server time (EXPLAIN ANALYZE, median of %d each, interleaved): renew %.1f µs, renew_slot %.1f µs, %.2f× (target at most 1.15×); %.0f%% of those slot renewals were HOT updates.\n",
		slotsOnlyRenews, float64(renew.Nanoseconds())/1e3, float64(renewSlot.Nanoseconds())/1e3,
		float64(renewSlot)/float64(renew), 100*hot)
	return nil
}
