package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// renewHolderBulkCalls is how many renew_holder calls each round times
// (they are short, so one alone would be noisy).
const renewHolderBulkCalls = 5

const (
	renewHolderAcquireSQL = `SELECT 'renew-holder/' || i, a.fence
		FROM generate_series(1, $2::integer) AS i,
		LATERAL pglease.acquire('renew-holder/' || i, $1, $3) AS a
		WHERE a.acquired`
	renewHolderSQL = `SELECT cardinality(leases) FROM pglease.renew_holder($1, $2)`
)

// RenewHolderResult compares renewing every lease of one holder with one
// pglease.renew_holder call and with one pglease.renew call per lease, on
// one connection, one after the other.
type RenewHolderResult struct {
	Leases    int       `json:"leases"`
	SinglesMs []float64 `json:"singles_ms"` // each: all leases renewed one call at a time
	BulkMs    []float64 `json:"bulk_ms"`    // each: one renew_holder call
	Singles   float64   `json:"singles_median_ms"`
	Bulk      float64   `json:"bulk_median_ms"`
	Speedup   float64   `json:"speedup"` // Singles / Bulk
}

// benchRenewHolder has one holder acquire leases leases, then times, in
// rounds, leases single renews against renewHolderBulkCalls renew_holder
// calls.
func (e *env) benchRenewHolder(ctx context.Context, leases, rounds int) (RenewHolderResult, error) {
	res := RenewHolderResult{Leases: leases}
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return res, err
	}
	defer conn.Close(ctx)

	const holder = "bench/renew-holder"
	rows, _ := conn.Query(ctx, renewHolderAcquireSQL, holder, leases, heldTTL)
	type held struct {
		name  string
		fence int64
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (held, error) {
		var h held
		return h, r.Scan(&h.name, &h.fence)
	})
	if err != nil {
		return res, fmt.Errorf("acquire %d leases: %w", leases, err)
	}
	if len(all) != leases {
		return res, fmt.Errorf("acquired %d of %d leases", len(all), leases)
	}

	var singles, bulk []time.Duration
	for range rounds {
		t0 := time.Now()
		for _, h := range all {
			var renewed bool
			if err := conn.QueryRow(ctx, renewSQL, h.name, holder, h.fence, heldTTL).Scan(&renewed); err != nil {
				return res, err
			}
			if !renewed {
				return res, errRefused("renew " + h.name)
			}
		}
		singles = append(singles, time.Since(t0))
		for range renewHolderBulkCalls {
			t0 := time.Now()
			var n int
			if err := conn.QueryRow(ctx, renewHolderSQL, holder, heldTTL).Scan(&n); err != nil {
				return res, err
			}
			if n != leases {
				return res, fmt.Errorf("renew_holder renewed %d of %d leases", n, leases)
			}
			bulk = append(bulk, time.Since(t0))
		}
	}
	for _, d := range singles {
		res.SinglesMs = append(res.SinglesMs, ms(d))
	}
	for _, d := range bulk {
		res.BulkMs = append(res.BulkMs, ms(d))
	}
	res.Singles, res.Bulk = ms(median(singles)), ms(median(bulk))
	res.Speedup = res.Singles / res.Bulk
	return res, nil
}
