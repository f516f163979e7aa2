package runslots_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/runslots"
)

// benchCapacities are the capacities BenchmarkClaim compares.
var benchCapacities = []int{1, 64, 1024, 16384}

// BenchmarkClaim measures a claim and a release of one slot per op, in a
// scope nobody else holds, for growing capacities. The SQL's cost grows
// with the live holders, not the capacity, so the ratios to capacity 1
// (metric x-cap1) should stay near 1.
func BenchmarkClaim(b *testing.B) {
	pool := benchPool(b)
	c := newClient(b, pool, "bench")
	benchClaims(b, c, func(capacity int) string { return fmt.Sprintf("idle-%d", capacity) })
}

// BenchmarkClaimNearlyFull is BenchmarkClaim with capacity-1 other holders
// live in the scope: each claim counts them, so the cost grows with them.
func BenchmarkClaimNearlyFull(b *testing.B) {
	pool := benchPool(b)
	c := newClient(b, pool, "bench")
	ctx := context.Background()
	scope := func(capacity int) string { return fmt.Sprintf("busy-%d", capacity) }
	for _, capacity := range benchCapacities {
		// Fill the scope by writing the rows that capacity-1 claims would
		// leave, as the schema owner: claiming them one by one costs
		// O(capacity²).
		// The scope counts them (slot_scopes.counted, slots.counted).
		if _, err := pool.Exec(ctx, `INSERT INTO pglease.slot_scopes (scope, counted) VALUES ($1, $2)`, scope(capacity), capacity-1); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO pglease.slots (scope, slot, holder, fence, acquired_at, expires_at, counted)
			SELECT $1, g, 'filler-' || g, 1, now(), now() + interval '1 hour', true FROM generate_series(1, $2::integer) AS g`,
			scope(capacity), capacity-1); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE pglease.slots`); err != nil {
		b.Fatal(err)
	}
	benchClaims(b, c, scope)
}

// benchPool returns a pool on a fresh migrated database whose sessions do
// not wait for the WAL flush at commit (synchronous_commit off): that wait,
// the same for every capacity and set by the server's disk, would drown the
// differences being measured. Times per op are therefore lower than with
// the server's defaults.
func benchPool(b *testing.B) *pgxpool.Pool {
	b.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewMigrated(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// benchClaims runs one sub-benchmark per capacity, claiming and releasing
// one slot of scope(capacity) per op, and reports each one's time per op
// as a ratio to that of capacity 1 (x-cap1).
func benchClaims(b *testing.B, c *runslots.Client, scope func(capacity int) string) {
	b.Helper()
	ctx := context.Background()
	var base float64 // ns/op at capacity 1
	for _, capacity := range benchCapacities {
		b.Run(fmt.Sprintf("capacity=%d", capacity), func(b *testing.B) {
			for b.Loop() {
				s, err := c.TryClaim(ctx, runslots.Want{Scope: scope(capacity), Capacity: capacity}, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if capacity == 1 {
				base = perOp
			}
			if base > 0 {
				b.ReportMetric(perOp/base, "x-cap1")
			}
		})
	}
}
