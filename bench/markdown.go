package main

import (
	"cmp"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// writeMarkdown renders r as the BENCHMARKS.md page, whole: every line of
// it comes from r. plot, when not empty, is the path of the comparison's
// SVG plot relative to the page.
func (r *Report) writeMarkdown(w io.Writer, plot string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	s := r.Server.Settings
	p("# pglease benchmarks")
	p("")
	p("Written by `make bench` (`%s`) on %s. Every figure on this page is from that one run, and [bench/results/latest.json](bench/results/latest.json) has them all; nothing here is written by hand. Run `make bench` to measure your own machine.",
		r.Command, r.Date.UTC().Format("2006-01-02 15:04 MST"))
	p("")
	p("- Machine: %s, shared by Postgres, the benchmark's clients and the other stores (loopback TCP).", r.Host.machine())
	p("- Load average (1, 5, 15 min) before the run: %s; after it: %s. The machine was shared with other work, which slows commits and adds noise.", cmp.Or(r.Host.LoadStart, "unknown"), cmp.Or(r.Host.LoadEnd, "unknown"))
	p("- Postgres: %s.", r.Server.Version)
	p("- Postgres settings: fsync=%s, synchronous_commit=%s, wal_sync_method=%s, full_page_writes=%s, commit_delay=%s, shared_buffers=%s, max_connections=%s. Every write is durable before its reply: nothing sets synchronous_commit off unless a row says so.",
		s["fsync"], s["synchronous_commit"], s["wal_sync_method"], s["full_page_writes"], s["commit_delay"], s["shared_buffers"], s["max_connections"])
	p("- Clients: %s, cirello.io/pglock %s. C is the number of clients working at once, each on a lease, lock or row of its own unless a section says otherwise.", r.Host.GoVersion, r.Host.Pglock)
	p("- Method: the rows of a table take turns (%s s per row and C, in %d turns, after a warm-up cycle per client), so that a change of the machine's speed during the run hits every row alike. p50 and p99 are the median and 99th percentile of the calls' latencies.",
		strconv.FormatFloat(r.Run.CellSeconds, 'f', -1, 64), r.Run.Rounds)
	p("")
	r.writeSummary(w)
	if r.Stores != nil {
		r.Stores.writeMarkdown(w, r.Run.StoreClients, plot)
		p("")
	}

	p("## Each call's throughput and latency")
	p("")
	p("Each client calls on a lease, slot scope or lock of its own, so the rows measure the cost of a call, not contention. An op is one call: one round trip and one transaction (BEGIN; assert_held; COMMIT is three round trips, one transaction); a cycle is the row's calls in order, such as an acquire and its release. × UPDATE compares a row's ops/s with the fastest a write can be on this server: one single-row UPDATE per transaction (the limit). Two more rows are bounds, not pglease calls: renew's floor (the same UPDATE inside an empty SECURITY DEFINER PL/pgSQL function, what every pglease function is) and the limit cycle (two such UPDATEs, the second committed asynchronously, as the Go package's release is).")
	p("")
	throughputTable(w, r.Throughput)
	p("")
	if pb := r.Pgbench; pb.Skipped != "" {
		p("The pgbench cross-check was skipped: %s.", pb.Skipped)
	} else {
		p("The same server measured by pgbench (`pgbench --protocol=prepared -c %d -j 2 -T %d`, each script %d times, taking turns): statements/s and mean latency per transaction.", pb.Clients, pb.Seconds, pgbenchTurns)
		p("")
		p("| Script | statements/s | × limit | latency ms |")
		p("| --- | ---: | ---: | ---: |")
		lim := pb.script("limit")
		for _, sc := range pb.Scripts {
			vs := "—"
			if lim != nil && lim.StatementsPer > 0 {
				vs = fmt.Sprintf("%.2f×", sc.StatementsPer/lim.StatementsPer)
			}
			p("| %s | %s | %s | %.3f |", sc.Name, count(sc.StatementsPer), vs, sc.LatencyMs)
		}
	}
	p("")

	r.writeHandover(w)
	if r.Fenced != nil {
		r.Fenced.writeMarkdown(w, "##")
		p("")
	}

	if r.Leader != nil {
		r.Leader.writeMarkdown(w, "##")
		p("")
	}
	if r.Batch != nil {
		r.Batch.writeMarkdown(w)
		p("")
	}
	if r.History != nil {
		r.History.writeMarkdown(w)
		p("")
	}
	rh := r.RenewHolder
	p("## Renewing every lease of a holder")
	p("")
	p("One holder with %d leases on one connection renews them all: one call per lease (pglease.renew), or one call for all (pglease.renew_holder, what a Keeper sends once per interval). Medians over %d passes of single renews and %d renew_holder calls.", rh.Leases, len(rh.SinglesMs), len(rh.BulkMs))
	p("")
	p("| Method | ms for all %d leases (median) |", rh.Leases)
	p("| --- | ---: |")
	p("| %d × pglease.renew | %.1f |", rh.Leases, rh.Singles)
	p("| 1 × pglease.renew_holder | %.2f |", rh.Bulk)
	p("")
	p("renew_holder is %.0f× faster.", rh.Speedup)
	p("")

	p("## Slot claims against capacity and rows")
	p("")
	p("A claim_slot + release_slot cycle, each client in a scope of its own, as the scope's capacity and its other rows grow; in the last row of each C all C clients share one scope of capacity %d, each as a holder of its own, so their claims take turns on the scope's lock. × capacity 1 is the claim's p50 over the p50 at capacity 1 on an empty scope at the same C. Prefilled scopes had %d holders (%d in the largest) claim a slot before the clock started, then release it for the free rows.", sharedCapacity, prefillSlots, prefillHolders)
	p("")
	p("| Capacity | Other rows in the scope | C | cycles/s | claim p50 ms | claim p99 ms | × capacity 1 | release p50 ms |")
	p("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range r.Slots {
		p("| %d | %s | %d | %s | %.3f | %.3f | %.2f× | %.3f |",
			s.Capacity, s.Rows, s.Clients, count(s.CyclesPerSec), s.Claim.P50, s.Claim.P99, s.ClaimVsCap1, s.Release.P50)
	}
	p("")
	p("The same claims timed by the server alone (EXPLAIN ANALYZE's execution time, median of %d claims by one client, each released again): no round trip, no commit.", slotExecSamples)
	p("")
	p("| Capacity | Other rows in the scope | claim execution ms | × capacity 1 |")
	p("| ---: | --- | ---: | ---: |")
	for _, s := range r.SlotExec {
		p("| %d | %s | %.3f | %.2f× |", s.Capacity, s.Rows, s.ExecMs, s.ExecVsCap1)
	}
	p("")

	if r.SlotCycles != nil {
		r.SlotCycles.writeMarkdown(w, "##")
		p("")
	}
	if r.Metrics != nil {
		r.Metrics.writeMarkdown(w, "##")
		p("")
	}

	if r.Cron != nil {
		r.Cron.writeMarkdown(w, "##")
		p("")
	}
	if len(r.Scrape) > 0 {
		writeScrapeMarkdown(w, "##", r.Scrape)
		p("")
	}
	if r.Limits != nil {
		r.Limits.writeMarkdown(w, "##")
		p("")
	}
	p("## Where the time goes")
	p("")
	p("Rows measured together at C=%d. The second row is the limit UPDATE with a pg_notify in its transaction: a notifying transaction commits under a cluster-wide lock, so such transactions commit one at a time instead of sharing WAL flushes, which is why pglease notifies only on a release that someone waits for.", targetClients)
	p("")
	throughputTable(w, r.Diagnostics)
	p("")
	p("Each call's own cost on the server (EXPLAIN ANALYZE's execution time, median of %d calls each, taking turns on one connection): no round trip, no commit. It matters once the server's CPUs, not its WAL flushes, are what clients wait for. The floor rows are the empty SECURITY DEFINER PL/pgSQL function with renew's signature, and the same around the limit UPDATE.", execSamples)
	p("")
	p("| Statement | Path | execution ms | × UPDATE |")
	p("| --- | --- | ---: | ---: |")
	for _, x := range r.ExecTimes {
		p("| %s | %s | %.3f | %.2f× |", x.Name, x.Path, x.Ms, x.VsLimit)
	}
	p("")
	r.writePurgeMarkdown(w)

	p("## Targets")
	p("")
	p("The goals set for pglease's own development, each judged on this run. A goal missed on a loaded machine may hold on a quiet one, and the reverse.")
	p("")
	p("| Target | Measured | Holds |")
	p("| --- | --- | --- |")
	for _, t := range r.Targets {
		verdict := "no"
		switch {
		case strings.HasPrefix(t.Measured, "not measured"):
			verdict = "—"
		case t.Holds:
			verdict = "yes"
		}
		p("| %s | %s | %s |", t.Name, t.Measured, verdict)
	}
	p("")

}

// writeHandover renders the handover section.
func (r *Report) writeHandover(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## Handover and takeover after a crash")
	p("")
	p("How long a lease stays unheld when its holder lets go. Client level: a holder and a waiter, each a pglease.Client on its own pool. The waiter calls Acquire (which LISTENs, is refused and waits); once it has been refused, the holder either calls Release (the waiter wakes on the NOTIFY), or renews one last time and goes silent, as a crashed process would (the waiter wakes at the expiry it was told, tries again, and takes over). Release latency runs from the Release call to the waiter's Acquire returning; crash latency from the last renewal being sent. Supervisor level: two supervisor.Supervisors on one lease, each on its own pool, OnExit Return; once the standby has reported the leader (EventLeaderSeen), the leader's workload returns, the leader releases and its Run returns, and the latency runs from the leader's workload returning to the standby's workload starting.")
	p("")
	p("| Handover | Level | Trials | TTL ms | p50 ms | p99 ms | max ms | p50 − TTL | p99 − TTL | max − TTL |")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, h := range r.Handover {
		over := "— | — | —"
		if h.OverTTL != nil {
			over = fmt.Sprintf("%.1f | %.1f | %.1f", h.OverTTL.P50, h.OverTTL.P99, h.OverTTL.Max)
		}
		p("| %s | %s | %d | %.0f | %.2f | %.2f | %.2f | %s |",
			h.Kind, h.Level, h.Trials, h.TTLMs, h.Latency.P50, h.Latency.P99, h.Latency.Max, over)
	}
	for _, h := range r.Handover {
		if h.Parts == nil {
			continue
		}
		part := func(k string) string { return fmt.Sprintf("%.2f / %.2f ms", h.Parts[k].P50, h.Parts[k].P99) }
		p("")
		var line string
		switch h.Level {
		case "supervisor":
			line = fmt.Sprintf("The supervisor-level release handover by part (p50 / p99, n=%d): from the leader's workload returning to the leader's EventReleased (the release, sent once the workload has returned) %s; from there to the standby's EventAcquired (the NOTIFY's delivery, the wake-up, the standby's acquire) %s; from there to the standby's workload starting %s.",
				h.Trials, part("release"), part("acquire"), part("start"))
		default:
			line = fmt.Sprintf("The %s-level release handover by part (p50 / p99, n=%d): from the Release call to the waiter sending its next acquire (the release's commit, the NOTIFY's delivery, the wake-up) %s; that acquire (a commit too) %s.",
				h.Level, h.Trials, part("notified"), part("acquire"))
		}
		if lim := r.row("update-limit", 1); lim != nil {
			line += fmt.Sprintf(" For scale, one commit (the limit UPDATE at C=1) took %.2f / %.2f ms in this run.", lim.Latency.P50, lim.Latency.P99)
		}
		p("%s", line)
	}
	p("")
}

// throughputTable renders rows as a markdown table.
func throughputTable(w io.Writer, rows []Row) {
	fmt.Fprintln(w, "| Operation | Path | C | ops/s | cycles/s | × UPDATE | p50 ms | p99 ms |")
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, t := range rows {
		cycles := "—"
		if t.OpsPerCycle > 1 {
			cycles = count(t.CyclesPerSec)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %.2f× | %.3f | %.3f |\n",
			t.Name, t.Path, t.Clients, count(t.OpsPerSec), cycles, t.VsLimit, t.Latency.P50, t.Latency.P99)
	}
}

// count formats a rate with thousands separators and no decimals.
func count(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// mebibytes formats a size in bytes as MiB.
func mebibytes(b int64) string {
	return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
}

// writePurgeMarkdown renders the table-size run, when there was one.
func (r *Report) writePurgeMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	pr := r.Purge
	if pr == nil {
		return
	}
	p("## Table size of per-entity locking, and purge")
	p("")
	p("A service that takes a lease per order or job uses every name once. Each run uses %s unique names once each (acquire, then release; %s names per statement, server-side, %s acquire + release pairs/s), in a scratch database of its own. With purge: `pglease.purge('0')` and a VACUUM (as autovacuum would run on its own schedule) after every %s names. The catch-up purge is one purge of the unpurged table at the end.",
		count(float64(pr.Names)), count(float64(pr.Batch)), count(pr.CyclesPerSec), count(float64(pr.PurgeEvery)))
	p("")
	p("| Run | Rows in pglease.leases | Table size (with indexes, TOAST) |")
	p("| --- | ---: | ---: |")
	p("| without purge | %s | %s |", count(float64(pr.WithoutRows)), mebibytes(pr.WithoutBytes))
	p("| with purge | %s | %s |", count(float64(pr.WithRows)), mebibytes(pr.WithBytes))
	p("")
	p("| Purge | Rows deleted | ms per 10,000 rows |")
	p("| --- | ---: | ---: |")
	p("| every %s names (median of %d) | %s each | %.1f |", count(float64(pr.PurgeEvery)), len(pr.Per10kMs), count(float64(pr.PurgeEvery)), pr.Per10k)
	p("| catch-up, once | %s | %.1f (%.0f ms in all) |", count(float64(pr.CatchUpRows)), pr.CatchUpPer10k, pr.CatchUpMs)
	p("")
}
