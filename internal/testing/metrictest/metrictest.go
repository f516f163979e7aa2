// Package metrictest gives tests a real OpenTelemetry SDK MeterProvider
// with a ManualReader attached, and reads back what the instruments
// recorded. Tests only: the library links the OpenTelemetry API, never
// the SDK (internal/testing/layout checks).
package metrictest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Reader is an SDK MeterProvider and the ManualReader that collects it.
type Reader struct {
	// Provider is the MeterProvider to pass in a Config.
	Provider *sdkmetric.MeterProvider
	reader   *sdkmetric.ManualReader
}

// New returns a Reader; its provider shuts down when the test ends.
func New(t testing.TB) *Reader {
	r := sdkmetric.NewManualReader()
	p := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return &Reader{Provider: p, reader: r}
}

// Metrics collects and returns every metric of the pglease meter, by name.
func (r *Reader) Metrics(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/pglease/pglease" {
			t.Errorf("instruments of scope %q, want github.com/pglease/pglease", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// Sum returns the value of the counter or up-down counter name at exactly
// the attributes kvs (0 when it has no such point), and whether it has it.
func (r *Reader) Sum(t testing.TB, name string, kvs ...attribute.KeyValue) (int64, bool) {
	t.Helper()
	m, ok := r.Metrics(t)[name]
	if !ok {
		return 0, false
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, m.Data)
	}
	want := attribute.NewSet(kvs...)
	for _, dp := range sum.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp.Value, true
		}
	}
	return 0, false
}

// Total returns the sum of every point of the counter or up-down counter
// name, whatever their attributes.
func (r *Reader) Total(t testing.TB, name string) int64 {
	t.Helper()
	m, ok := r.Metrics(t)[name]
	if !ok {
		return 0
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is a %T, want an int64 sum", name, m.Data)
	}
	var n int64
	for _, dp := range sum.DataPoints {
		n += dp.Value
	}
	return n
}

// Histogram returns the point of the float64 histogram name at exactly the
// attributes kvs, and whether it has it.
func (r *Reader) Histogram(t testing.TB, name string, kvs ...attribute.KeyValue) (metricdata.HistogramDataPoint[float64], bool) {
	t.Helper()
	return histogram[float64](t, r.Metrics(t), name, kvs)
}

// IntHistogram is Histogram for an int64 histogram.
func (r *Reader) IntHistogram(t testing.TB, name string, kvs ...attribute.KeyValue) (metricdata.HistogramDataPoint[int64], bool) {
	t.Helper()
	return histogram[int64](t, r.Metrics(t), name, kvs)
}

func histogram[N int64 | float64](t testing.TB, ms map[string]metricdata.Metrics, name string, kvs []attribute.KeyValue) (metricdata.HistogramDataPoint[N], bool) {
	t.Helper()
	m, ok := ms[name]
	if !ok {
		return metricdata.HistogramDataPoint[N]{}, false
	}
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s is a %T, want a %T", name, m.Data, h)
	}
	want := attribute.NewSet(kvs...)
	for _, dp := range h.DataPoints {
		if dp.Attributes.Equals(&want) {
			return dp, true
		}
	}
	return metricdata.HistogramDataPoint[N]{}, false
}

// Dump returns every point's attributes and value, one line each, to say
// what there was when a check fails.
func (r *Reader) Dump(t testing.TB) string {
	t.Helper()
	var b strings.Builder
	for name, m := range r.Metrics(t) {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				fmt.Fprintf(&b, "%s{%s} = %d\n", name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Value)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				fmt.Fprintf(&b, "%s{%s} count %d sum %g\n", name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count, dp.Sum)
			}
		case metricdata.Histogram[int64]:
			for _, dp := range d.DataPoints {
				fmt.Fprintf(&b, "%s{%s} count %d sum %d\n", name, dp.Attributes.Encoded(attribute.DefaultEncoder()), dp.Count, dp.Sum)
			}
		}
	}
	return b.String()
}
