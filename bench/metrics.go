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

// Keys of the rows of the metrics comparison.
const (
	renewPkgKey        = "renew/pkg"
	renewPkgMetricsKey = "renew/pkg-metrics"
	// renewPkgControlKey is renewPkgKey measured again as a row of its own
	// (an A/A control): the ratio of two identical rows is what the bench
	// cannot resolve, the yardstick for the ratio with metrics.
	renewPkgControlKey = "renew/pkg-control"
)

// renewPkg is Lease.Renew through the Go package, each client on a lease
// of its own, under key: without metrics (a no-op MeterProvider; keys
// renewPkgKey and renewPkgControlKey), or with an SDK MeterProvider and a
// ManualReader attached (renewPkgMetricsKey), collected once per turn so
// that the reader is known to receive the renewals.
func (e *env) renewPkg(key string) workload {
	metrics := key == renewPkgMetricsKey
	w := workload{
		key: key, name: "pglease.renew", path: "Go package: Lease.Renew",
		steps: []string{"renew"},
	}
	switch key {
	case renewPkgMetricsKey:
		w.path = "Go package: Lease.Renew, OpenTelemetry SDK with a reader"
	case renewPkgControlKey:
		w.path = "Go package: Lease.Renew, again (control)"
	}
	w.start = func(ctx context.Context, n int) (*instance, error) {
		var mp metric.MeterProvider = noop.NewMeterProvider()
		var reader *sdkmetric.ManualReader
		if metrics {
			reader = sdkmetric.NewManualReader()
			mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		}
		// Every row renews the same leases (as the same holders), so that
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

// checkMetricsTarget adds the metrics overhead target at c clients. It is
// judged on the median of the turn-by-turn ratios (pairedRatio), which a
// drift of the machine during the cell moves less than the ratio of the
// totals; both are reported, with the A/A control where it was measured.
func (r *Report) checkMetricsTarget(c int) {
	name := fmt.Sprintf("renew with an OpenTelemetry SDK and a reader ≥ %.2f× without metrics at C=%d", minRenewWithMetrics, c)
	on, off := r.row(renewPkgMetricsKey, c), r.row(renewPkgKey, c)
	p := pairedRatio(on, off)
	if p.N == 0 {
		r.unmeasured(name)
		return
	}
	var control string
	if a := pairedRatio(r.row(renewPkgControlKey, c), off); a.N > 0 {
		control = fmt.Sprintf("; A/A control %.3f× (quartiles %.3f–%.3f)", a.Median, a.Q1, a.Q3)
	}
	r.add(name, p.Median >= minRenewWithMetrics, "%.3f× median of %d turns (quartiles %.3f–%.3f), %.3f× of the totals (%s ops/s vs %s ops/s)%s",
		p.Median, p.N, p.Q1, p.Q3, on.OpsPerSec/off.OpsPerSec, count(on.OpsPerSec), count(off.OpsPerSec), control)
}

// runMetricsBench runs only the renew rows, without metrics, with
// metrics, and without again (the A/A control), interleaved at each
// concurrency of cfg.clients, on a scratch database, and prints their
// section.
func runMetricsBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_metrics"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	load := loadavg()
	ws := []workload{e.renewPkg(renewPkgKey), e.renewPkg(renewPkgMetricsKey), e.renewPkg(renewPkgControlKey)}
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
	fmt.Println("Ratios are the median of the turn-by-turn ratios, first and third quartile in brackets; the control is the row without metrics measured twice.")
	fmt.Println()
	fmt.Println("| C | Without metrics (ops/s) | With SDK + reader (ops/s) | With / without | Control (A/A) | Totals' ratio | p50 without / with (ms) |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|")
	for _, n := range cfg.clients {
		off, on := r.row(renewPkgKey, n), r.row(renewPkgMetricsKey, n)
		p, a := pairedRatio(on, off), pairedRatio(r.row(renewPkgControlKey, n), off)
		fmt.Printf("| %d | %s | %s | %.3f× (%.3f–%.3f) | %.3f× (%.3f–%.3f) | %.3f× | %.3f / %.3f |\n", n,
			count(off.OpsPerSec), count(on.OpsPerSec), p.Median, p.Q1, p.Q3, a.Median, a.Q1, a.Q3,
			on.OpsPerSec/off.OpsPerSec, off.Latency.P50, on.Latency.P50)
	}
	return nil
}
