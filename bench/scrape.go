package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The scrape cost (-scrape-leases): what one call of pglease.metrics, the
// query of each scrape of `pglease exporter`, costs with n leases in the
// table, for the calls an exporter makes.
const (
	scrapeWarmup = 5
	scrapeRuns   = 30
	scrapeScopes = 100 // slot scopes, two live slots each
	scrapeBatch  = 10_000
)

// scrapeCase is one call of pglease.metrics.
type scrapeCase struct {
	label    string
	names    string
	maxNames int
}

// scrapeCases are the calls measured: the exporter's defaults, a name
// filter, totals only, and every name.
func scrapeCases(n int) []scrapeCase {
	return []scrapeCase{
		{"defaults: every name, at most 1,000 (`--max-series 1000`)", "", 1000},
		{"a name filter, 11% of the names (`--names '^lease/1'`)", "^lease/1", 1000},
		{"totals only (`--max-series 0`)", "", 0},
		{fmt.Sprintf("every name (`--max-series %d`)", n), "", n},
	}
}

// ScrapeRow is one size and call of the scrape comparison.
type ScrapeRow struct {
	Leases int     `json:"leases"`
	Call   string  `json:"call"`
	Names  int     `json:"names"` // per-lease entries returned
	P50Ms  float64 `json:"p50_ms"`
	P95Ms  float64 `json:"p95_ms"`
	ExecMs float64 `json:"server_exec_ms"` // EXPLAIN ANALYZE's execution time, median
	Bytes  int64   `json:"table_bytes"`    // pglease.leases with indexes
}

// measureScrape measures the scrape for each of sizes on a scratch
// database of its own.
func measureScrape(ctx context.Context, cfg config, sizes []int) (_ []ScrapeRow, err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_scrape"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	conn, err := pgx.Connect(ctx, sc.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	var rows []ScrapeRow
	have := 0
	for _, n := range sizes {
		log.Printf("scrape cost: %d leases", n)
		if err := fillLeases(ctx, conn, have, n); err != nil {
			return nil, fmt.Errorf("%d leases: %w", n, err)
		}
		have = max(have, n)
		for _, c := range scrapeCases(n) {
			row, err := benchScrape(ctx, conn, n, c)
			if err != nil {
				return nil, fmt.Errorf("%d leases, %s: %w", n, c.label, err)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// writeScrapeMarkdown writes the scrape section under a heading of level h.
func writeScrapeMarkdown(w io.Writer, h string, rows []ScrapeRow) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s What a scrape costs", h)
	p("")
	p("One call of pglease.metrics, the query behind each scrape of `pglease exporter`, with the exporter's settings, as the table of leases grows: each call %d times on one connection after %d unmeasured, with %d slot scopes of 2 live slots beside the leases (a quarter of the leases released, a quarter expired, half held). Round trip: the call and reading its row; server: EXPLAIN ANALYZE's execution time (median).",
		scrapeRuns, scrapeWarmup, scrapeScopes)
	p("")
	p("| Leases | pglease.leases | Call | Names returned | Round trip p50 | p95 | Server |")
	p("| ---: | ---: | --- | ---: | ---: | ---: | ---: |")
	for _, r := range rows {
		p("| %s | %.1f MiB | %s | %s | %.1f ms | %.1f ms | %.1f ms |",
			count(float64(r.Leases)), float64(r.Bytes)/(1<<20), r.Call, count(float64(r.Names)), r.P50Ms, r.P95Ms, r.ExecMs)
	}
}

// runScrapeBench runs only the scrape section (-scrape-leases) and prints
// it.
func runScrapeBench(ctx context.Context, cfg config) error {
	load := loadavg()
	rows, err := measureScrape(ctx, cfg, cfg.scrapeLeases)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	writeScrapeMarkdown(os.Stdout, "##", rows)
	return nil
}

// fillLeases adds leases lease/from+1 .. lease/to: half held for an hour,
// a quarter released, a quarter expired; and the slot scopes once. Then it
// vacuums and analyzes, as autovacuum would.
func fillLeases(ctx context.Context, conn *pgx.Conn, from, to int) error {
	for lo := from + 1; lo <= to; lo += scrapeBatch {
		hi := min(lo+scrapeBatch-1, to)
		_, err := conn.Exec(ctx, `SELECT count(*)
			FROM generate_series($1::integer, $2::integer) AS i,
			LATERAL pglease.acquire('lease/' || i, 'bench/scrape',
				CASE WHEN i % 4 = 3 THEN interval '1 microsecond' ELSE interval '1 hour' END) AS a,
			LATERAL (SELECT pglease.release('lease/' || i, 'bench/scrape', a.fence) WHERE i % 4 = 2) AS r`, lo, hi)
		if err != nil {
			return err
		}
	}
	if from == 0 {
		_, err := conn.Exec(ctx, `SELECT count(*) FROM generate_series(1, $1::integer) AS s, generate_series(1, 2) AS h,
			LATERAL pglease.claim_slot('scope/' || s, 'bench/scrape/' || h, 4, interval '1 hour') AS c`, scrapeScopes)
		if err != nil {
			return err
		}
	}
	_, err := conn.Exec(ctx, `VACUUM ANALYZE pglease.leases, pglease.slots, pglease.slot_scopes`)
	return err
}

// benchScrape times c on conn.
func benchScrape(ctx context.Context, conn *pgx.Conn, n int, c scrapeCase) (ScrapeRow, error) {
	row := ScrapeRow{Leases: n, Call: c.label}
	const q = `SELECT lease_names, lease_held, lease_expiry_seconds, lease_fences, leases_held, table_bytes
		FROM pglease.metrics($1, $2)`
	var times []time.Duration
	for i := range scrapeWarmup + scrapeRuns {
		var (
			names  []string
			held   []bool
			expiry []float64
			fences []int64
			total  int64
			bytes  []int64
		)
		start := time.Now()
		if err := conn.QueryRow(ctx, q, c.names, c.maxNames).Scan(&names, &held, &expiry, &fences, &total, &bytes); err != nil {
			return row, err
		}
		if i >= scrapeWarmup {
			times = append(times, time.Since(start))
		}
		row.Names, row.Bytes = len(names), bytes[0]
	}
	slices.Sort(times)
	row.P50Ms, row.P95Ms = ms(percentile(times, 50)), ms(percentile(times, 95))
	var execs []float64
	for range 5 {
		var plan []map[string]any
		if err := conn.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM pglease.metrics($1, $2)`,
			c.names, c.maxNames).Scan(&plan); err != nil {
			return row, err
		}
		if len(plan) == 0 {
			return row, errors.New("EXPLAIN returned no plan")
		}
		t, ok := plan[0]["Execution Time"].(float64)
		if !ok {
			return row, fmt.Errorf("EXPLAIN: no execution time in %v", plan[0])
		}
		execs = append(execs, t)
	}
	row.ExecMs = medianFloat(execs)
	return row, nil
}
