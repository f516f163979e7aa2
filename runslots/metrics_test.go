package runslots_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pglease/pglease/internal/testing/metrictest"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/runslots"
)

// TestMetrics: slots are measured as the kind "slot": claims granted,
// refused (a full scope, whether one scope or several were asked for),
// held and released; the scope is an attribute only with MetricsByName.
func TestMetrics(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	r := metrictest.New(t)
	newMetered := func(byName bool) *runslots.Client {
		c, err := runslots.New(pool, runslots.Config{MeterProvider: r.Provider, MetricsByName: byName})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b := newMetered(false), newMetered(true)
	slot := attribute.String("pglease.kind", "slot")
	scoped := attribute.String("pglease.name", "tenant:1")
	want := func(want int64, name string, kvs ...attribute.KeyValue) {
		t.Helper()
		if got, _ := r.Sum(t, name, kvs...); got != want {
			t.Errorf("%s%v = %d, want %d; recorded:\n%s", name, kvs, got, want, r.Dump(t))
		}
	}

	s := mustClaim(t, a, "tenant:1", 1, 10*time.Second)
	want(1, "pglease.tenure.acquisitions", slot)
	want(1, "pglease.tenure.held", slot)
	mustBeFull(t, b, "tenant:1", 1, 1)
	if _, err := b.TryClaimAll(context.Background(), []runslots.Want{{Scope: "tenant:2", Capacity: 1}, {Scope: "tenant:1", Capacity: 1}}, 10*time.Second); err == nil {
		t.Fatal("TryClaimAll of a full scope succeeded")
	}
	want(2, "pglease.tenure.refusals", slot, scoped)
	mustRelease(t, s)
	want(1, "pglease.tenure.releases", slot)
	want(0, "pglease.tenure.held", slot)
}
