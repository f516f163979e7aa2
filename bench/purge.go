package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// purgeBatch is how many names one statement acquires and releases: one
// transaction per batch, so that a million names take a minute, not an
// hour. Right after a purge and VACUUM the planner's statistics say the
// table is empty until the next ANALYZE; the functions' statements find
// rows by primary key whatever the statistics say, and purge deletes
// without a join (TestNameKeyedCallsUsePrimaryKey in internal/testing/contract
// checks both), so the run with purge keeps the pace of the run without.
const purgeBatch = 1_000

// purgeEvery is how many names are used between two purges in the run
// with purge.
const purgeEvery = 100_000

const (
	// purgeCycleSQL acquires and releases the names prefix || i for i in
	// [$2, $3], one after the other, in one statement: the per-entity
	// locking of a service that takes a lease per order or job.
	purgeCycleSQL = `SELECT count(*)
		FROM generate_series($2::integer, $3::integer) AS i,
		LATERAL pglease.acquire($1 || i, 'bench/purge', interval '1 hour') AS a,
		LATERAL pglease.release($1 || i, 'bench/purge', a.fence) AS r
		WHERE a.acquired AND r.released`
	purgeSizeSQL = `SELECT (SELECT count(*) FROM pglease.leases),
		pg_catalog.pg_total_relation_size('pglease.leases')`
	purgeSQL = `SELECT pglease.purge(interval '0')`
)

// PurgeResult is the table size of per-entity locking (every name used
// once) with and without purge, and what purge costs.
type PurgeResult struct {
	Names      int `json:"names"`
	Batch      int `json:"batch"`
	PurgeEvery int `json:"purge_every"`
	// Without purge: the table after every name was used once.
	WithoutRows  int64 `json:"without_rows"`
	WithoutBytes int64 `json:"without_bytes"`
	// With purge: purge(0) and VACUUM (what autovacuum does on its own
	// schedule) after every PurgeEvery names; the table at the end.
	WithRows  int64 `json:"with_rows"`
	WithBytes int64 `json:"with_bytes"`
	// Per10kMs are the purges of the run with purge, each in ms per
	// 10,000 rows deleted; Per10k is their median.
	Per10kMs []float64 `json:"purge_ms_per_10k"`
	Per10k   float64   `json:"purge_median_ms_per_10k"`
	// CatchUpMs is one purge of every row of the run without purge (a
	// purge that was never run before), and its cost per 10,000 rows.
	CatchUpRows    int64   `json:"catch_up_rows"`
	CatchUpMs      float64 `json:"catch_up_ms"`
	CatchUpPer10k  float64 `json:"catch_up_ms_per_10k"`
	CyclesPerSec   float64 `json:"acquire_release_per_sec"` // server-side, in batches
	WithoutSeconds float64 `json:"without_seconds"`
}

// benchPurge uses names unique names once each in two scratch databases,
// one never purged and one purged every purgeEvery names, and reports the
// tables' sizes and the cost of purge.
func benchPurge(ctx context.Context, serverURL string, names int) (PurgeResult, error) {
	res := PurgeResult{Names: names, Batch: purgeBatch, PurgeEvery: purgeEvery}

	err := withScratchConn(ctx, serverURL, "purge_off", func(conn *pgx.Conn) error {
		t0 := time.Now()
		if err := useNames(ctx, conn, "job-a/", 1, names, nil); err != nil {
			return err
		}
		res.WithoutSeconds = time.Since(t0).Seconds()
		res.CyclesPerSec = float64(names) / res.WithoutSeconds
		if err := conn.QueryRow(ctx, purgeSizeSQL).Scan(&res.WithoutRows, &res.WithoutBytes); err != nil {
			return err
		}
		t0 = time.Now()
		if err := conn.QueryRow(ctx, purgeSQL).Scan(&res.CatchUpRows); err != nil {
			return err
		}
		res.CatchUpMs = ms(time.Since(t0))
		res.CatchUpPer10k = res.CatchUpMs / float64(res.CatchUpRows) * 10_000
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("without purge: %w", err)
	}

	err = withScratchConn(ctx, serverURL, "purge_on", func(conn *pgx.Conn) error {
		purge := func() error {
			t0 := time.Now()
			var n int64
			if err := conn.QueryRow(ctx, purgeSQL).Scan(&n); err != nil {
				return err
			}
			d := time.Since(t0)
			if n > 0 {
				res.Per10kMs = append(res.Per10kMs, ms(d)/float64(n)*10_000)
			}
			_, err := conn.Exec(ctx, "VACUUM (TRUNCATE false) pglease.leases")
			return err
		}
		if err := useNames(ctx, conn, "job-b/", 1, names, purge); err != nil {
			return err
		}
		return conn.QueryRow(ctx, purgeSizeSQL).Scan(&res.WithRows, &res.WithBytes)
	})
	if err != nil {
		return res, fmt.Errorf("with purge: %w", err)
	}
	res.Per10k = medianFloat(res.Per10kMs)
	return res, nil
}

// useNames acquires and releases prefix || i for i in [from, to], in
// batches, and calls purge (when not nil) after every purgeEvery names.
func useNames(ctx context.Context, conn *pgx.Conn, prefix string, from, to int, purge func() error) error {
	next := from + purgeEvery
	for lo := from; lo <= to; lo += purgeBatch {
		hi := min(lo+purgeBatch-1, to)
		var n int
		if err := conn.QueryRow(ctx, purgeCycleSQL, prefix, lo, hi).Scan(&n); err != nil {
			return fmt.Errorf("names %d-%d: %w", lo, hi, err)
		}
		if n != hi-lo+1 {
			return fmt.Errorf("names %d-%d: %d of %d acquired and released", lo, hi, n, hi-lo+1)
		}
		if purge != nil && hi+1 >= next {
			if err := purge(); err != nil {
				return fmt.Errorf("purge after %d names: %w", hi-from+1, err)
			}
			next += purgeEvery
		}
		if (hi-from+1)%purgeEvery == 0 {
			log.Printf("purge: %s%d used", prefix, hi)
		}
	}
	return nil
}

// withScratchConn runs f on a connection to a new migrated scratch
// database, dropped afterwards.
func withScratchConn(ctx context.Context, serverURL, suffix string, f func(*pgx.Conn) error) (err error) {
	sc, err := createScratch(ctx, serverURL, scratchName(suffix))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	conn, err := pgx.Connect(ctx, sc.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return f(conn)
}

// medianFloat returns the median of xs, 0 when empty.
func medianFloat(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
