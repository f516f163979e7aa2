package supervisor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pglease/pglease/internal/testing/metrictest"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/supervisor"
)

// TestMetrics: a supervisor measures whether it leads and its
// transitions, and its lease's tenures, all named after it: acquired,
// lost to a forced release (refused), acquired again, released on
// shutdown.
func TestMetrics(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	r := metrictest.New(t)
	s := newSupervisor(t, pool, "dispatcher", supervisor.Config{TTL: 3 * time.Second, MeterProvider: r.Provider})
	name := []attribute.KeyValue{attribute.String("pglease.kind", "lease"), attribute.String("pglease.name", "dispatcher")}
	want := func(want int64, metric string, kvs ...attribute.KeyValue) {
		t.Helper()
		if got, _ := r.Sum(t, metric, append(name[:2:2], kvs...)...); got != want {
			t.Errorf("%s%v = %d, want %d; recorded:\n%s", metric, kvs, got, want, r.Dump(t))
		}
	}
	transition := func(tr string) attribute.KeyValue { return attribute.String("pglease.transition", tr) }

	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			return nil
		})
	}()
	<-started
	want(1, "pglease.supervisor.leading")
	want(1, "pglease.supervisor.transitions", transition("acquired"))
	want(1, "pglease.tenure.held")

	if _, _, err := pgleaseadmin.ForceRelease(context.Background(), pool, "dispatcher"); err != nil {
		t.Fatal(err)
	}
	<-started // lost at the next renewal, then acquired again
	want(1, "pglease.supervisor.leading")
	want(2, "pglease.supervisor.transitions", transition("acquired"))
	want(1, "pglease.supervisor.transitions", transition("lost"))
	want(1, "pglease.tenure.losses", attribute.String("pglease.loss.reason", "refused"))

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
	want(0, "pglease.supervisor.leading")
	want(1, "pglease.supervisor.transitions", transition("released"))
	want(1, "pglease.tenure.releases")
	want(0, "pglease.tenure.held")
}
