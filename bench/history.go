package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The tenure history's cost (#52, docs/tenure-history.md): acquire +
// release and renew of names whose history is on against names whose
// history is off, interleaved turn by turn at historyClients.
const (
	historyClients = 8
	// historyPrefix is turned on; the "off" rows' names are outside it.
	historyPrefix = "history-on/"
	// The targets of #52: acquire + release with history ≥ 0.85× without,
	// renew unchanged (≥ 0.98×: a renewal writes nothing).
	minHistoryAcquireRelease = 0.85
	minHistoryRenew          = 0.98
	// historyKept is how many ended tenures each name of the "kept" row
	// has before it is measured: a name that has changed hands that often
	// costs what a new one does (≥ minHistoryKept× the same row without).
	historyKept    = 3000
	minHistoryKept = 0.9
	historyKeptKey = historyPrefix + "kept/acquire-release"
)

// HistoryComparison is the tenure history section.
type HistoryComparison struct {
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
	Rows      []Row  `json:"rows"`
}

// historyWorkloads: acquire + release and renew, off and on.
func (e *env) historyWorkloads() []workload {
	relabel := func(w workload, path string) workload {
		w.path = path
		return w
	}
	return []workload{
		relabel(e.acquireReleaseSQL("history-off/acquire-release", "", releaseSQL), "SQL via pgx, history off"),
		relabel(e.acquireReleaseSQL(historyPrefix+"acquire-release", "", releaseSQL), "SQL via pgx, history on"),
		relabel(e.acquireReleaseSQL(historyKeptKey, "", releaseSQL), fmt.Sprintf("SQL via pgx, history on, %s tenures kept", count(float64(historyKept)))),
		relabel(e.renewSQL("history-off/renew"), "SQL via pgx, history off"),
		relabel(e.renewSQL(historyPrefix+"renew"), "SQL via pgx, history on"),
	}
}

// measureHistory measures the section on a scratch database of its own.
func measureHistory(ctx context.Context, cfg config) (_ *HistoryComparison, err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_history"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	conn, err := pgx.Connect(ctx, sc.url)
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, `SELECT pglease.history_enable($1, '1 day')`, historyPrefix)
	if err == nil {
		// Each name of the kept row changes hands historyKept times first.
		_, err = conn.Exec(ctx, `SELECT count(*) FROM generate_series(0, $1 - 1) AS c,
			LATERAL (SELECT $2 || '/' || c AS name) AS n,
			LATERAL generate_series(1, $3) AS i,
			LATERAL pglease.acquire(n.name, 'bench/kept', interval '1 hour') AS a,
			LATERAL pglease.release(n.name, 'bench/kept', a.fence) AS r`,
			historyClients, historyKeptKey, historyKept)
	}
	if cerr := conn.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("turn the history on: %w", err)
	}
	e := &env{url: sc.url}
	h := &HistoryComparison{LoadStart: loadavg()}
	ws := e.historyWorkloads()
	log.Printf("tenure history at C=%d: %d rows × %s", historyClients, len(ws), cfg.cell)
	ts, err := runGroupOn(ctx, e, ws, historyClients, cfg)
	if err != nil {
		return nil, err
	}
	for i, w := range ws {
		h.Rows = append(h.Rows, newRow(w, historyClients, ts[i]))
	}
	h.LoadEnd = loadavg()
	return h, nil
}

// runHistoryBench runs only the tenure history section (-history-only)
// and prints it with its targets.
func runHistoryBench(ctx context.Context, cfg config) error {
	h, err := measureHistory(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", h.LoadStart, h.LoadEnd, runtime.NumCPU())
	h.writeMarkdown(os.Stdout)
	var r Report
	r.History = h
	r.checkHistory()
	for _, t := range r.Targets {
		fmt.Printf("- %s: holds %v (%s)\n", t.Name, t.Holds, t.Measured)
	}
	return nil
}

// ratio returns on's rate over off's, for rows keyed off and on.
func (h *HistoryComparison) ratio(off, on string) (float64, *Row, *Row) {
	var a, b *Row
	for i := range h.Rows {
		switch h.Rows[i].Key {
		case off:
			a = &h.Rows[i]
		case on:
			b = &h.Rows[i]
		}
	}
	if a == nil || b == nil || a.OpsPerSec == 0 {
		return 0, a, b
	}
	return b.OpsPerSec / a.OpsPerSec, a, b
}

// offRow returns the row of call name with history off.
func (h *HistoryComparison) offRow(name string) *Row {
	for i := range h.Rows {
		if h.Rows[i].Name == name && strings.HasPrefix(h.Rows[i].Key, "history-off/") {
			return &h.Rows[i]
		}
	}
	return nil
}

// checkHistory adds the section's targets.
func (r *Report) checkHistory() {
	h := r.History
	for _, c := range []struct {
		what, off, on string
		min           float64
	}{
		{"pglease.acquire + release", "history-off/acquire-release", historyPrefix + "acquire-release", minHistoryAcquireRelease},
		{"pglease.renew", "history-off/renew", historyPrefix + "renew", minHistoryRenew},
	} {
		name := fmt.Sprintf("%s with tenure history on ≥ %.2f× off at C=%d", c.what, c.min, historyClients)
		if h == nil {
			r.unmeasured(name)
			continue
		}
		ratio, off, on := h.ratio(c.off, c.on)
		if off == nil || on == nil {
			r.unmeasured(name)
			continue
		}
		r.add(name, ratio >= c.min, "%.2f× (%s ops/s vs %s ops/s)", ratio, count(on.OpsPerSec), count(off.OpsPerSec))
	}
	name := fmt.Sprintf("pglease.acquire + release of names with %s tenures kept ≥ %.2f× names with none at C=%d", count(float64(historyKept)), minHistoryKept, historyClients)
	if h == nil {
		r.unmeasured(name)
		return
	}
	ratio, fresh, kept := h.ratio(historyPrefix+"acquire-release", historyKeptKey)
	if fresh == nil || kept == nil {
		r.unmeasured(name)
		return
	}
	r.add(name, ratio >= minHistoryKept, "%.2f× (%s ops/s vs %s ops/s)", ratio, count(kept.OpsPerSec), count(fresh.OpsPerSec))
}

// writeMarkdown renders the section.
func (h *HistoryComparison) writeMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## Tenure history")
	p("")
	p("%d clients, each on a name of its own, interleaved in turns: names under a prefix whose tenure history is on (pglease.history_enable: every grant and end writes a row of pglease.tenures, checked by its exclusion constraint) against names outside it, and against names with history on that have changed hands %s times already ([docs/tenure-history.md](docs/tenure-history.md#what-it-costs)). A renewal writes no history.", historyClients, count(float64(historyKept)))
	p("")
	p("| Call | Path | ops/s | × off | p50 ms | p99 ms |")
	p("| --- | --- | ---: | ---: | ---: | ---: |")
	for i := range h.Rows {
		row := &h.Rows[i]
		vs := "—"
		if off := h.offRow(row.Name); off != nil && off != row {
			if ratio, _, _ := h.ratio(off.Key, row.Key); ratio > 0 {
				vs = fmt.Sprintf("%.2f×", ratio)
			}
		}
		p("| %s | %s | %s | %s | %.3f | %.3f |", row.Name, row.Path, count(row.OpsPerSec), vs, row.Latency.P50, row.Latency.P99)
	}
}
