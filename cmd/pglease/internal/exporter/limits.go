package exporter

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/pgleaseadmin"
)

// seriesPerLimit: burst, period, remaining, buckets, limited and reserved
// per configured limit.
const seriesPerLimit = 6

// readLimits returns the first limit configured rate limits by target
// with their levels, and how many more there are. ok is false when there
// is nothing to export: a schema before 0.4.0 (SQLSTATE 42883), quietly,
// or a failed read, logged; pglease_up says the database was read.
func (e *Exporter) readLimits(ctx context.Context, limit int) (levels []pgleaseadmin.LimitLevel, dropped int64, ok bool) {
	// With limit 0 (totals only) one row is read all the same, to count
	// the limits left out.
	levels, total, err := pgleaseadmin.Limits(ctx, e.db, max(limit, 1))
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42883" { // undefined_function: a schema before limits
			e.opts.Log.Warn("pglease exporter: read the rate limits", "err", err)
		}
		return nil, 0, false
	}
	if limit == 0 {
		levels = nil
	}
	return levels, max(total-int64(len(levels)), 0), true
}

// writeLimits writes the configured limits' series, one set per limit
// (target), never per key: keys are as many as a service's users, limits
// as many as the operators and services set. --max-series bounds them.
func writeLimits(w *textWriter, levels []pgleaseadmin.LimitLevel) {
	w.family("pglease_limit_burst", "gauge",
		"The most tokens a key under the limit holds at once: its burst, or a budget's size (pglease.limit_set).")
	for _, l := range levels {
		w.sampleInt("pglease_limit_burst", int64(l.Burst), label{"target", l.Target})
	}
	w.family("pglease_limit_period_seconds", "gauge",
		"The time a key's empty bucket takes to refill to its burst (burst / rate per period): a budget's window.")
	for _, l := range levels {
		w.sample("pglease_limit_period_seconds", float64(l.Burst)*l.Per.Seconds()/float64(l.Rate), label{"target", l.Target})
	}
	w.family("pglease_limit_remaining_min", "gauge",
		"The fewest whole tokens left in any key's bucket under the limit now (the burst when no key is spending): burst minus this is the most any key used.")
	for _, l := range levels {
		w.sampleInt("pglease_limit_remaining_min", int64(l.MinRemaining), label{"target", l.Target})
	}
	w.family("pglease_limit_buckets", "gauge", "Keys under the limit whose bucket is not full: the keys spending.")
	for _, l := range levels {
		w.sampleInt("pglease_limit_buckets", l.Buckets, label{"target", l.Target})
	}
	w.family("pglease_limit_limited_buckets", "gauge", "Keys under the limit with less than one token now: a take of theirs is refused.")
	for _, l := range levels {
		w.sampleInt("pglease_limit_limited_buckets", l.Limited, label{"target", l.Target})
	}
	w.family("pglease_limit_reserved_tokens", "gauge",
		"Tokens of the limit's keys held by reservations neither settled nor expired (pglease.reserve).")
	for _, l := range levels {
		w.sampleInt("pglease_limit_reserved_tokens", l.Reserved, label{"target", l.Target})
	}
}
