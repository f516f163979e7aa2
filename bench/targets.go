package main

import (
	"fmt"
	"strings"
)

// targetClients is the concurrency the throughput targets are set at.
const targetClients = 8

// Goals, as set for pglease (issue 31 for renew, acquire + release and
// pglock, against bounds measured in the same run; issue 17 for slots,
// renew_holder and handovers).
const (
	minRenewVsFloor    = 0.9  // renew throughput over its floor function's
	minARVsFloor       = 0.85 // acquire + release statements/s over the floor function's (pgbench)
	minVsPglock        = 1.15 // acquire+release cycles/s over pglock's
	maxSlotVsCap1      = 1.5  // claim p50 at the largest capacity over capacity 1
	minRenewHolder     = 20.0 // renew_holder speedup over single renews
	maxReleaseP99Ms    = 20.0 // release handover p99
	maxCrashOverTTLMs  = 50.0
	floorFunctionLabel = "the floor function (SECURITY DEFINER PL/pgSQL around the limit UPDATE)"
)

// checkTargets evaluates the goals against what was measured.
func (r *Report) checkTargets() {
	c := targetClients
	floor := r.row("renew-floor", c)
	for _, key := range []string{"renew/sql", "renew/pkg"} {
		name := fmt.Sprintf("%s ≥ %.1f× %s at C=%d", r.label(key), minRenewVsFloor, floorFunctionLabel, c)
		row := r.row(key, c)
		if row == nil || floor == nil {
			r.unmeasured(name)
			continue
		}
		ratio := row.OpsPerSec / floor.OpsPerSec
		r.add(name, ratio >= minRenewVsFloor, "%.2f× (%s ops/s vs %s ops/s); %.2f× the UPDATE limit",
			ratio, count(row.OpsPerSec), count(floor.OpsPerSec), row.VsLimit)
	}
	if pb := r.Pgbench; pb.Skipped == "" {
		f, rn, ar := pb.script("renew-floor"), pb.script("renew"), pb.script("acquire-release")
		if f != nil && rn != nil && ar != nil && f.StatementsPer > 0 {
			r.add(fmt.Sprintf("pglease.renew ≥ %.1f× the floor function in pgbench at C=%d", minRenewVsFloor, pb.Clients),
				rn.StatementsPer/f.StatementsPer >= minRenewVsFloor, "%.2f× (%s vs %s statements/s)",
				rn.StatementsPer/f.StatementsPer, count(rn.StatementsPer), count(f.StatementsPer))
			r.add(fmt.Sprintf("pglease.acquire + release per statement ≥ %.2f× the floor function in pgbench at C=%d", minARVsFloor, pb.Clients),
				ar.StatementsPer/f.StatementsPer >= minARVsFloor, "%.2f× (%s vs %s statements/s, synchronous release)",
				ar.StatementsPer/f.StatementsPer, count(ar.StatementsPer), count(f.StatementsPer))
		}
	}
	r.checkMetricsTarget(c)
	r.checkLimitsTarget()
	r.checkHistory()

	for _, key := range []string{"acquire-release/pkg-try", "acquire-release/sql-async"} {
		name := fmt.Sprintf("%s ≥ %.2f× pglock's cycles/s at C=%d", r.label(key), minVsPglock, c)
		ours, theirs := r.row(key, c), r.row("acquire-release/pglock", c)
		if ours == nil || theirs == nil {
			r.unmeasured(name)
			continue
		}
		ratio := ours.CyclesPerSec / theirs.CyclesPerSec
		var ceiling string
		if cy := r.row("limit-cycle", c); cy != nil {
			ceiling = fmt.Sprintf("; ceiling (two one-row UPDATEs, the second asynchronous): %.2f× pglock (%s cycles/s)",
				cy.CyclesPerSec/theirs.CyclesPerSec, count(cy.CyclesPerSec))
		}
		r.add(name, ratio >= minVsPglock,
			"%.2f× (%s vs %s cycles/s); p99 %.2f ms vs %.2f ms%s",
			ratio, count(ours.CyclesPerSec), count(theirs.CyclesPerSec), ours.Latency.P99, theirs.Latency.P99, ceiling)
	}

	top := slotCapacities[len(slotCapacities)-1]
	live := fmt.Sprintf("%d live holders", prefillHolders)
	name := fmt.Sprintf("slot claim at capacity %d (empty, and with %s), p50 and server execution time, ≤ %.1f× capacity 1", top, live, maxSlotVsCap1)
	var parts []string
	holds, measured := true, false
	for _, rows := range []string{"none", live} {
		for _, n := range r.Run.SlotClients {
			if s := r.slot(top, rows, n); s != nil {
				measured = true
				holds = holds && s.ClaimVsCap1 <= maxSlotVsCap1
				parts = append(parts, fmt.Sprintf("%s C=%d: %.2f×", rows, n, s.ClaimVsCap1))
			}
		}
	}
	for _, s := range r.SlotExec {
		if s.Capacity == top && (s.Rows == "none" || s.Rows == live) {
			holds = holds && s.ExecVsCap1 <= maxSlotVsCap1
			parts = append(parts, fmt.Sprintf("server execution time (%s): %.2f×", s.Rows, s.ExecVsCap1))
		}
	}
	if measured {
		r.add(name, holds, "claim p50 %s", strings.Join(parts, "; "))
	} else {
		r.unmeasured(name)
	}

	r.checkSlotTargets(c)
	if r.Fenced != nil {
		r.checkFencedTarget(c)
	}

	rh := r.RenewHolder
	r.add(fmt.Sprintf("renew_holder of %d leases ≥ %.0f× faster than %d single renews", rh.Leases, minRenewHolder, rh.Leases),
		rh.Speedup >= minRenewHolder, "%.0f× (%.2f ms vs %.1f ms)", rh.Speedup, rh.Bulk, rh.Singles)

	for _, h := range r.Handover {
		switch h.Kind {
		case "release":
			r.add(fmt.Sprintf("release handover p99 ≤ %.0f ms (%s)", maxReleaseP99Ms, h.Level),
				h.Latency.P99 <= maxReleaseP99Ms, "p99 %.2f ms (p50 %.2f ms, n=%d)", h.Latency.P99, h.Latency.P50, h.Trials)
		case "crash":
			r.add(fmt.Sprintf("crash takeover ≤ TTL + %.0f ms after the last renewal (%s)", maxCrashOverTTLMs, h.Level),
				h.OverTTL.Max <= maxCrashOverTTLMs, "TTL + %.1f ms worst (p50 + %.1f ms, p99 + %.1f ms, n=%d, TTL %.0f ms)",
				h.OverTTL.Max, h.OverTTL.P50, h.OverTTL.P99, h.Trials, h.TTLMs)
		}
	}
	r.checkPurge()
}

// checkPurge adds the table-size target: with purge, per-entity locking
// keeps no more rows than the names used between two purges.
func (r *Report) checkPurge() {
	p := r.Purge
	if p == nil {
		return
	}
	r.add(fmt.Sprintf("%s unique names: with purge the table keeps ≤ %s rows (the names used between purges)", count(float64(p.Names)), count(float64(p.PurgeEvery))),
		p.WithRows <= int64(p.PurgeEvery), "%s rows, %s (without purge: %s rows, %s)",
		count(float64(p.WithRows)), mebibytes(p.WithBytes), count(float64(p.WithoutRows)), mebibytes(p.WithoutBytes))
}

// label names a throughput row by its operation and path.
func (r *Report) label(key string) string {
	for _, t := range r.Throughput {
		if t.Key == key {
			return t.Name + " (" + t.Path + ")"
		}
	}
	return key
}

func (r *Report) add(name string, holds bool, format string, args ...any) {
	r.Targets = append(r.Targets, Target{Name: name, Holds: holds, Measured: fmt.Sprintf(format, args...)})
}

func (r *Report) unmeasured(name string) {
	r.Targets = append(r.Targets, Target{Name: name, Measured: "not measured in this run"})
}
