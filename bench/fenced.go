package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pglease"
)

// minFencedWrite is the goal of issue 31 for a fenced write: BEGIN;
// assert_held; UPDATE; COMMIT over the same transaction without
// assert_held, in the same run.
const minFencedWrite = 0.8

// The fenced-write comparison (-fenced-only): one UPDATE of an application
// row per op, each client on a row and a lease of its own, unfenced and
// fenced, in a transaction of several round trips and in one round trip.
const (
	fencedTableSQL = `CREATE TABLE bench_app (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0) WITH (fillfactor = 50)`
	fencedRowSQL   = `INSERT INTO bench_app (id) VALUES ($1) ON CONFLICT (id) DO NOTHING`
	fencedWriteSQL = `UPDATE bench_app SET n = n + 1 WHERE id = $1`

	fencedTxKey      = "fenced-write/tx"       // BEGIN; UPDATE; COMMIT
	fencedOneKey     = "fenced-write/one"      // the UPDATE alone, autocommit
	fencedSQLKey     = "fenced-write/sql"      // BEGIN; assert_held; UPDATE; COMMIT
	fencedSQL1Key    = "fenced-write/sql-one"  // the same, BEGIN and assert_held in one message
	fencedRTKey      = "fenced-write/rt"       // BEGIN; SELECT 1; UPDATE; COMMIT: the fourth round trip alone
	fencedBareKey    = "fenced-write/bare"     // BEGIN and a bare locking check in one message; UPDATE; COMMIT
	fencedPkgKey     = "fenced-write/pkg"      // WithFence
	fencedPkgSendKey = "fenced-write/pkg-send" // SendFenced
)

// How a fencedSQL row sends its transaction.
type fencedMode int

const (
	fencedAlone    fencedMode = iota // the UPDATE alone, autocommit: one round trip
	fencedNone                       // BEGIN; UPDATE; COMMIT: three round trips
	fencedCheck                      // BEGIN; assert_held; UPDATE; COMMIT: four
	fencedOneBegin                   // BEGIN and assert_held in one message; UPDATE; COMMIT: three
	fencedProbe                      // BEGIN; SELECT 1; UPDATE; COMMIT: the fourth round trip alone, checking and locking nothing
	fencedBare                       // BEGIN and fencedBareSQL in one message; UPDATE; COMMIT: three
)

// fencedBareSQL is the floor of a check: the lease row locked FOR SHARE
// when fence, holder and end say the tenure is live, as one plain
// statement (no function, role test or timeouts). It refuses nothing in
// the bench: it only costs what such a check costs.
const fencedBareSQL = `SELECT 1 FROM pglease.leases WHERE name = '%s' AND fence = %d AND holder IS NOT NULL AND expires_at > clock_timestamp() FOR SHARE`

// fencedSQL is a row that sends the application UPDATE through SQL on a
// connection of its own, as mode says.
func (e *env) fencedSQL(key, name string, mode fencedMode) workload {
	return workload{
		key: key, name: name, path: "SQL via pgx", steps: []string{"write"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				lease := id(key, i)
				row := "app/" + lease
				if _, err := conn.Exec(ctx, fencedRowSQL, row); err != nil {
					return nil, err
				}
				if mode == fencedAlone {
					return []step{func(ctx context.Context) error {
						_, err := conn.Exec(ctx, fencedWriteSQL, row)
						return err
					}}, nil
				}
				var fence int64
				var opts pgx.TxOptions
				if mode == fencedCheck || mode == fencedOneBegin || mode == fencedBare {
					var err error
					if fence, err = sqlAcquire(ctx, conn, lease, "bench/"+lease, heldTTL); err != nil {
						return nil, err
					}
				}
				if mode == fencedOneBegin {
					// The lease names here need no quoting.
					opts.BeginQuery = fmt.Sprintf("BEGIN; SELECT pglease.assert_held('%s', %d)", lease, fence)
				}
				if mode == fencedBare {
					opts.BeginQuery = "BEGIN; " + fmt.Sprintf(fencedBareSQL, lease, fence)
				}
				return []step{func(ctx context.Context) error {
					return pgx.BeginTxFunc(ctx, conn, opts, func(tx pgx.Tx) error {
						if mode == fencedCheck {
							if _, err := tx.Exec(ctx, assertHeldSQL, lease, fence); err != nil {
								return err
							}
						}
						if mode == fencedProbe {
							if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
								return err
							}
						}
						_, err := tx.Exec(ctx, fencedWriteSQL, row)
						return err
					})
				}}, nil
			})
		},
	}
}

// fencedPkg is a row that makes the fenced write through the Go package:
// WithFence (BEGIN and the check, the UPDATE, COMMIT: three round trips),
// or SendFenced (the check and the UPDATE in one batch: one round trip).
func (e *env) fencedPkg(key string, send bool) workload {
	w := workload{
		key: key, name: "fenced UPDATE app row", path: "Go package: WithFence", steps: []string{"write"},
	}
	if send {
		w.path = "Go package: SendFenced"
	}
	w.start = func(ctx context.Context, n int) (*instance, error) {
		return e.perPoolClientWith(ctx, key, n, pglease.Config{}, func(ctx context.Context, c *pglease.Client, lease string) ([]step, error) {
			row := "app/" + lease
			if _, err := e.pool.Exec(ctx, fencedRowSQL, row); err != nil {
				return nil, err
			}
			l, err := c.TryAcquire(ctx, lease, heldTTL)
			if err != nil {
				return nil, err
			}
			if send {
				var b pgx.Batch
				b.Queue(fencedWriteSQL, row)
				return []step{func(ctx context.Context) error { return pglease.SendFenced(ctx, e.pool, l.Name(), l.Fence(), &b) }}, nil
			}
			return []step{func(ctx context.Context) error {
				return pglease.WithFence(ctx, e.pool, l.Name(), l.Fence(), func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, fencedWriteSQL, row)
					return err
				})
			}}, nil
		})
	}
	return w
}

// fencedWorkloads returns the rows of the comparison, the unfenced
// transaction first.
func (e *env) fencedWorkloads() []workload {
	return []workload{
		e.fencedSQL(fencedTxKey, "BEGIN; UPDATE app row; COMMIT (unfenced)", fencedNone),
		e.fencedSQL(fencedOneKey, "UPDATE app row, autocommit (unfenced)", fencedAlone),
		e.fencedSQL(fencedSQL1Key, "BEGIN; pglease.assert_held (one message); UPDATE app row; COMMIT", fencedOneBegin),
		e.fencedSQL(fencedSQLKey, "BEGIN; pglease.assert_held; UPDATE app row; COMMIT (four round trips)", fencedCheck),
		e.fencedSQL(fencedBareKey, "BEGIN; bare FOR SHARE check (one message); UPDATE app row; COMMIT (the floor of a check)", fencedBare),
		e.fencedSQL(fencedRTKey, "BEGIN; SELECT 1; UPDATE app row; COMMIT (unfenced: a fourth round trip alone)", fencedProbe),
		e.fencedPkg(fencedPkgKey, false),
		e.fencedPkg(fencedPkgSendKey, true),
	}
}

// FencedWrites is the fenced-write section: an application UPDATE with
// and without assert_held, interleaved turn by turn.
type FencedWrites struct {
	CellSeconds float64 `json:"cell_seconds"`
	Rounds      int     `json:"rounds"`
	Rows        []Row   `json:"rows"`
}

// row returns the section's row of key at n clients, or nil.
func (f *FencedWrites) row(key string, n int) *Row {
	if f == nil {
		return nil
	}
	return findRow(f.Rows, key, n)
}

// benchFenced measures the fenced-write rows on e at each of clients; the
// application table (fencedTableSQL) must exist.
func (e *env) benchFenced(ctx context.Context, cfg config, clients []int) (*FencedWrites, error) {
	rows, err := measureAt(ctx, e, "fenced writes", e.fencedWorkloads(), clients, cfg)
	if err != nil {
		return nil, err
	}
	return &FencedWrites{CellSeconds: cfg.cell.Seconds(), Rounds: cfg.rounds, Rows: rows}, nil
}

// checkFencedTarget adds the fenced-write targets at c clients, judged on
// the median of the turn-by-turn ratios: the transaction with BEGIN and
// assert_held sent in one message, and WithFence, which sends it so.
// The four-round-trip form and its bound (a fourth round trip that checks
// nothing) are reported beside the first.
func (r *Report) checkFencedTarget(c int) {
	f := r.Fenced
	off := f.row(fencedTxKey, c)
	var beside string
	bare := pairedRatio(f.row(fencedBareKey, c), off)
	four, probe := pairedRatio(f.row(fencedSQLKey, c), off), pairedRatio(f.row(fencedRTKey, c), off)
	if bare.N > 0 && four.N > 0 && probe.N > 0 {
		beside = fmt.Sprintf("; the floor of a check (a bare FOR SHARE statement in the same message): %.3f×; beside it, BEGIN; assert_held; UPDATE; COMMIT in four round trips: %.3f×, bounded by BEGIN; SELECT 1; UPDATE; COMMIT: %.3f×", bare.Median, four.Median, probe.Median)
	}
	for _, t := range []struct{ key, name, beside string }{
		{fencedSQL1Key, "BEGIN; assert_held (one message with BEGIN); UPDATE; COMMIT", beside},
		{fencedPkgKey, "WithFence", ""},
	} {
		name := fmt.Sprintf("%s ≥ %.2f× the same transaction without assert_held at C=%d", t.name, minFencedWrite, c)
		on := f.row(t.key, c)
		p := pairedRatio(on, off)
		if p.N == 0 {
			r.unmeasured(name)
			continue
		}
		r.add(name, p.Median >= minFencedWrite, "%.3f× median of %d turns (quartiles %.3f–%.3f), %s writes/s vs %s writes/s%s",
			p.Median, p.N, p.Q1, p.Q3, count(on.OpsPerSec), count(off.OpsPerSec), t.beside)
	}
}

// writeMarkdown writes the section under a heading of level h.
func (f *FencedWrites) writeMarkdown(w io.Writer, h string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s Fenced writes", h)
	p("")
	p("What a fence costs an application write: each client UPDATEs a row of its own application table while holding a lease of its own, without a check, with `pglease.assert_held` in the same transaction, and through the Go package (`Lease.WithFence`; `Lease.SendFenced`, which sends the check and the write in one round trip). The rows take turns (%s s each, in %d turns); ratios are the median of the turn-by-turn ratios (quartiles in brackets) over the unfenced transaction and over the unfenced UPDATE sent alone.",
		strconv.FormatFloat(f.CellSeconds, 'f', -1, 64), f.Rounds)
	p("")
	p("| Write | Path | C | writes/s | × BEGIN; UPDATE; COMMIT | × UPDATE alone | p50 ms | p99 ms |")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, row := range f.Rows {
		a, b := pairedRatio(&row, f.row(fencedTxKey, row.Clients)), pairedRatio(&row, f.row(fencedOneKey, row.Clients))
		p("| %s | %s | %d | %s | %.3f× (%.3f–%.3f) | %.3f× (%.3f–%.3f) | %.3f | %.3f |",
			row.Name, row.Path, row.Clients, count(row.OpsPerSec), a.Median, a.Q1, a.Q3, b.Median, b.Q1, b.Q3,
			row.Latency.P50, row.Latency.P99)
	}
}

// runFencedBench runs only the fenced-write rows, interleaved at each
// concurrency of cfg.clients, on a scratch database, and prints their
// section.
func runFencedBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_fenced"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	if err := e.exec(ctx, fencedTableSQL); err != nil {
		return fmt.Errorf("create the application table: %w", err)
	}
	load := loadavg()
	r := Report{}
	if r.Fenced, err = e.benchFenced(ctx, cfg, cfg.clients); err != nil {
		return err
	}
	for _, n := range cfg.clients {
		r.checkFencedTarget(n)
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	r.Fenced.writeMarkdown(os.Stdout, "##")
	fmt.Println()
	for _, t := range r.Targets {
		fmt.Printf("- %s: %s (%s)\n", t.Name, t.Measured, map[bool]string{true: "holds", false: "not met"}[t.Holds])
	}
	return nil
}
