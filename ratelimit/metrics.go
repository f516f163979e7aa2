package ratelimit

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/tenure"
)

// waitBuckets spans a wait of nothing (the first take allowed) to one of
// minutes, in seconds.
var waitBuckets = []float64{0, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// meters are a limiter's instruments.
type meters struct {
	allowed metric.Int64Counter
	limited metric.Int64Counter
	wait    metric.Float64Histogram

	byName bool
	all    tenure.Opts
	names  sync.Map // key -> tenure.Opts, with Config.MetricsByName
}

func newMeters(mp metric.MeterProvider, byName bool) *meters {
	b := tenure.NewInstruments(mp)
	m := &meters{
		allowed: b.Counter("pglease.ratelimit.allowed", "{token}",
			"Tokens taken: spent by allowed takes of rate-limited keys."),
		limited: b.Counter("pglease.ratelimit.limited", "{take}",
			"Takes of rate-limited keys refused because the tokens were not there; a Wait counts each refused try."),
		wait: b.Seconds("pglease.ratelimit.wait.duration",
			"Time a Wait took from its call to the allowed take.", waitBuckets),
		byName: byName,
		all:    tenure.NewOpts(),
	}
	b.Done()
	return m
}

// opts returns the options of key's measurements.
func (m *meters) opts(key string) tenure.Opts {
	if !m.byName {
		return m.all
	}
	if o, ok := m.names.Load(key); ok {
		return o.(tenure.Opts)
	}
	o, _ := m.names.LoadOrStore(key, tenure.NewOpts(attribute.String(string(tenure.AttrName), key)))
	return o.(tenure.Opts)
}

// decided counts a take of n tokens of key.
func (m *meters) decided(ctx context.Context, key string, allowed bool, n int) {
	if allowed {
		m.allowed.Add(ctx, int64(n), m.opts(key).Add...)
		return
	}
	m.limited.Add(ctx, 1, m.opts(key).Add...)
}

// waited records a Wait of key that took d.
func (m *meters) waited(ctx context.Context, key string, d time.Duration) {
	m.wait.Record(ctx, d.Seconds(), m.opts(key).Record...)
}
