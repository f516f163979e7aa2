package main

import (
	"fmt"
	"io"
)

// writeSummary renders the page's first section: the figures a user asks
// for first, each taken from a row of a later section, which it names.
func (r *Report) writeSummary(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	c := targetClients
	na := "not measured in this run"
	p("## In short")
	p("")
	p("The figures most users ask for, each from a section below (named in the last column). Each acquire, renew and release is one transaction, so each waits for one commit, a flush of Postgres' WAL to disk; concurrent commits share flushes. The limit rows show what this server's commits allow.")
	p("")
	p("| What | Figure | Section |")
	p("| --- | ---: | --- |")
	const calls = "[Each call's throughput and latency](#each-calls-throughput-and-latency)"
	lease := func(n int) *Row { return r.row("acquire-release/pkg-try", n) }
	if a, b := lease(1), lease(c); a != nil && b != nil {
		p("| Lock taken and given back through the Go package (TryAcquire + Release), cycles/s at C=1 / C=%d | %s / %s | %s |", c, count(a.CyclesPerSec), count(b.CyclesPerSec), calls)
	} else {
		p("| Lock taken and given back through the Go package | %s | |", na)
	}
	if rn := r.row(renewPkgKey, c); rn != nil {
		p("| Renewals through the Go package (Lease.Renew), ops/s at C=%d | %s | %s |", c, count(rn.OpsPerSec), calls)
	}
	if lim := r.row("update-limit", c); lim != nil {
		p("| The limit: one-row UPDATEs, each its own transaction, ops/s at C=%d | %s | %s |", c, count(lim.OpsPerSec), calls)
	}
	if lim := r.row("update-limit", 1); lim != nil {
		p("| One commit alone (that UPDATE at C=1), p50 / p99 | %.2f / %.2f ms | %s |", lim.Latency.P50, lim.Latency.P99, calls)
	}
	acq, ok := Latency{}, false
	if b := lease(c); b != nil {
		acq, ok = b.Steps["acquire"]
	}
	rn := r.row(renewPkgKey, c)
	fw := r.Fenced.row(fencedPkgKey, c)
	if ok && rn != nil && fw != nil {
		p("| p99 at C=%d of an acquire (TryAcquire) / a renewal (Lease.Renew) / a fenced write (Lease.WithFence: assert_held and an UPDATE in one transaction) | %.1f / %.1f / %.1f ms | %s, [Fenced writes](#fenced-writes) |",
			c, acq.P99, rn.Latency.P99, fw.Latency.P99, calls)
	} else {
		p("| p99 at C=%d of an acquire / a renewal / a fenced write | %s | |", c, na)
	}
	const handover = "[Handover and takeover after a crash](#handover-and-takeover-after-a-crash)"
	for _, h := range r.Handover {
		switch {
		case h.Kind == "release" && h.Level == "client":
			p("| A released lease reaches a waiting client (Acquire), p50 / p99 of %d | %.1f / %.1f ms | %s |", h.Trials, h.Latency.P50, h.Latency.P99, handover)
		case h.Kind == "release" && h.Level == "supervisor":
			p("| Supervisor handover: the leader's workload returns → the standby's starts, p50 / p99 of %d | %.1f / %.1f ms | %s |", h.Trials, h.Latency.P50, h.Latency.P99, handover)
		case h.Kind == "crash" && h.OverTTL != nil:
			p("| A crashed holder's lease taken over by a waiting client, after its last renewal (TTL %.0f ms), p50 / worst of %d | TTL + %.0f / TTL + %.0f ms | %s |", h.TTLMs, h.Trials, h.OverTTL.P50, h.OverTTL.Max, handover)
		}
	}
	if s := r.Stores; s != nil {
		base := s.row("acquire-release/pkg-try", c)
		for _, k := range []string{"acquire-release/pglock", etcdKey, redisKey} {
			if o := s.row(k, c); o != nil && base != nil && base.CyclesPerSec > 0 {
				p("| %s's lock against pglease's at C=%d (cycles/s, same disk) | %.2f× | [Against pglock, etcd and Redis](#against-pglock-etcd-and-redis) |", storeNames[k], c, o.CyclesPerSec/base.CyclesPerSec)
			}
		}
	}
	p("")
}
