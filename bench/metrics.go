package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/pglease/pglease/pglease"
)

// minRenewWithMetrics is the goal of issue 26: renew throughput with an
// OpenTelemetry SDK installed and a reader attached, over the same without
// metrics (a no-op MeterProvider), in the same run.
const minRenewWithMetrics = 0.98

// Keys of the two rows of the metrics comparison.
const (
	renewPkgKey        = "renew/pkg"
	renewPkgMetricsKey = "renew/pkg-metrics"
)

// renewPkg is Lease.Renew through the Go package, each client on a lease
// of its own: without metrics (a no-op MeterProvider), or with an SDK
// MeterProvider and a ManualReader attached, collected once per turn so
// that the reader is known to receive the renewals.
func (e *env) renewPkg(metrics bool) workload {
	w := workload{
		key: renewPkgKey, name: "pglease.renew", path: "Go package: Lease.Renew",
		steps: []string{"renew"},
	}
	if metrics {
		w.key, w.path = renewPkgMetricsKey, "Go package: Lease.Renew, OpenTelemetry SDK with a reader"
	}
	w.start = func(ctx context.Context, n int) (*instance, error) {
		var mp metric.MeterProvider = noop.NewMeterProvider()
		var reader *sdkmetric.ManualReader
		if metrics {
			reader = sdkmetric.NewManualReader()
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		}
		// Both rows renew the same leases (as the same holders), so that
		// only the MeterProvider differs between them.
		inst, err := e.perPoolClientWith(ctx, renewPkgKey, n, pglease.Config{MeterProvider: mp},
			func(ctx context.Context, c *pglease.Client, name string) ([]step, error) {
				l, err := c.TryAcquire(ctx, name, heldTTL)
				if err != nil {
					return nil, err
				}
				return []step{l.Renew}, nil
			})
		if err != nil || reader == nil {
			return inst, err
		}
		inst.close = func() {
			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil || !renewsRecorded(rm) {
				log.Printf("%s: the reader collected no renewals (%v)", w.key, err)
			}
		}
		return inst, nil
	}
	return w
}

// renewsRecorded reports whether rm has renewal round trips.
func renewsRecorded(rm metricdata.ResourceMetrics) bool {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "pglease.renew.duration" && len(h.DataPoints) > 0 {
				return h.DataPoints[0].Count > 0
			}
		}
	}
	return false
}

// checkMetricsTarget adds the metrics overhead target at c clients.
func (r *Report) checkMetricsTarget(c int) {
	name := fmt.Sprintf("renew with an OpenTelemetry SDK and a reader ≥ %.2f× without metrics at C=%d", minRenewWithMetrics, c)
	on, off := r.row(renewPkgMetricsKey, c), r.row(renewPkgKey, c)
	if on == nil || off == nil {
		r.unmeasured(name)
		return
	}
	ratio := on.OpsPerSec / off.OpsPerSec
	r.add(name, ratio >= minRenewWithMetrics, "%.3f× (%s ops/s vs %s ops/s)", ratio, count(on.OpsPerSec), count(off.OpsPerSec))
}

// runMetricsBench runs only the two renew rows, with and without metrics,
// interleaved at each concurrency of cfg.clients, on a scratch database,
// and prints their section.
func runMetricsBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_metrics"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	load := loadavg()
	ws := []workload{e.renewPkg(false), e.renewPkg(true)}
	var r Report
	for _, n := range cfg.clients {
		log.Printf("metrics overhead at C=%d: %d rows × %s in %d turns", n, len(ws), cfg.cell, cfg.rounds)
		ts, err := runGroupOn(ctx, e, ws, n, cfg)
		if err != nil {
			return err
		}
		for i, w := range ws {
			r.Throughput = append(r.Throughput, newRow(w, n, ts[i]))
		}
	}
	fmt.Printf("## Metrics overhead (%s per cell, %d turns)\n\n", cfg.cell, cfg.rounds)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	fmt.Println("| C | Without metrics (ops/s) | With SDK + reader (ops/s) | Ratio | p50 without / with (ms) |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	for _, n := range cfg.clients {
		off, on := r.row(renewPkgKey, n), r.row(renewPkgMetricsKey, n)
		fmt.Printf("| %d | %s | %s | %.3f× | %.3f / %.3f |\n", n, count(off.OpsPerSec), count(on.OpsPerSec),
			on.OpsPerSec/off.OpsPerSec, off.Latency.P50, on.Latency.P50)
	}
	return nil
}
