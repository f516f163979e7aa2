package pglease_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/metrictest"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// quiet discards the warnings of the failures the tests cause.
var quiet = slog.New(slog.DiscardHandler)

var (
	leaseKind = attribute.String("pglease.kind", "lease")
	renewed   = attribute.String("pglease.renew.outcome", "renewed")
	refused   = attribute.String("pglease.renew.outcome", "refused")
)

// lossBy is the loss reason attribute.
func lossBy(reason string) attribute.KeyValue { return attribute.String("pglease.loss.reason", reason) }

// wantSum fails t unless the sum name at exactly kvs is want.
func wantSum(t *testing.T, r *metrictest.Reader, want int64, name string, kvs ...attribute.KeyValue) {
	t.Helper()
	if got, _ := r.Sum(t, name, kvs...); got != want {
		t.Errorf("%s%v = %d, want %d; recorded:\n%s", name, kvs, got, want, r.Dump(t))
	}
}

// meteredClient returns a client on db measuring into r.
func meteredClient(t *testing.T, db pglease.DB, r *metrictest.Reader, byName bool) *pglease.Client {
	t.Helper()
	c, err := pglease.New(db, pglease.Config{MeterProvider: r.Provider, MetricsByName: byName, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMetricsAgainstServer: against a real server, a client counts what
// it was granted, refused and released and what it lost; measures each
// renewal's round trip and margin; and names leases only when asked.
func TestMetricsAgainstServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	r := metrictest.New(t)
	a := meteredClient(t, pool, r, false)
	b := meteredClient(t, pool, r, true)

	const ttl = 10 * time.Second
	l := mustAcquire(t, a, "order:1", ttl)
	wantSum(t, r, 1, "pglease.tenure.acquisitions", leaseKind)
	wantSum(t, r, 1, "pglease.tenure.held", leaseKind)
	if _, err := b.TryAcquire(ctx, "order:1", ttl); !errors.Is(err, pglease.ErrLeaseHeld) {
		t.Fatalf("TryAcquire of a held lease = %v, want ErrLeaseHeld", err)
	}
	wantSum(t, r, 1, "pglease.tenure.refusals", leaseKind, attribute.String("pglease.name", "order:1"))

	if err := l.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	if h, ok := r.Histogram(t, "pglease.renew.duration", leaseKind, renewed); !ok || h.Count != 1 || h.Sum <= 0 {
		t.Errorf("pglease.renew.duration{renewed}: count %d sum %g, want one positive round trip", h.Count, h.Sum)
	}
	left := time.Until(l.Deadline()).Seconds()
	if h, ok := r.Histogram(t, "pglease.renew.margin", leaseKind); !ok || h.Count != 1 || h.Sum < left || h.Sum > (ttl-ttl/10).Seconds() {
		t.Errorf("pglease.renew.margin: count %d sum %g, want one margin from %g (the deadline's distance now) to 9 s", h.Count, h.Sum, left)
	}

	if _, _, err := pgleaseadmin.ForceRelease(ctx, pool, "order:1"); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Renew after a forced release = %v, want ErrLeaseLost", err)
	}
	wantSum(t, r, 1, "pglease.tenure.losses", leaseKind, lossBy("refused"))
	if h, ok := r.Histogram(t, "pglease.renew.duration", leaseKind, refused); !ok || h.Count != 1 {
		t.Errorf("pglease.renew.duration{refused}: count %d, want 1", h.Count)
	}

	l = mustAcquire(t, b, "order:2", ttl)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	named := attribute.String("pglease.name", "order:2")
	wantSum(t, r, 1, "pglease.tenure.releases", leaseKind, named)
	wantSum(t, r, 0, "pglease.tenure.held", leaseKind, named)
	wantSum(t, r, 0, "pglease.tenure.held", leaseKind)
}

// TestMetricsLossReasons: a lease nobody renews is lost to its deadline;
// one whose renewals hang on a blackholed connection, to the connection.
func TestMetricsLossReasons(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewMigrated(t)
	r := metrictest.New(t)

	c := meteredClient(t, pgtest.Pool(t, dbURL), r, false)
	l := mustAcquire(t, c, "unrenewed", 300*time.Millisecond)
	<-l.Done()
	wantSum(t, r, 1, "pglease.tenure.losses", leaseKind, lossBy("deadline"))

	proxied, proxy := proxiedPool(t, dbURL)
	c = meteredClient(t, proxied, r, false)
	l = mustAcquire(t, c, "blackholed", time.Second)
	err := l.Run(context.Background(), func(ctx context.Context) error {
		proxy.Blackhole()
		<-ctx.Done()
		return nil
	})
	proxy.Resume()
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("Run with its connection blackholed = %v, want ErrLeaseLost", err)
	}
	wantSum(t, r, 1, "pglease.tenure.losses", leaseKind, lossBy("connection"))
	if n := r.Total(t, "pglease.tenure.losses"); n != 2 {
		t.Errorf("%d losses counted, want 2:\n%s", n, r.Dump(t))
	}
	wantSum(t, r, 0, "pglease.tenure.held", leaseKind)
}

// TestMetricsKeeper: a Keeper measures its rounds with its own
// MeterProvider; its clients measure their tenures.
func TestMetricsKeeper(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	r := metrictest.New(t)
	k, err := pglease.NewKeeper(pool, pglease.KeeperConfig{TTL: 3 * time.Second, MeterProvider: r.Provider})
	if err != nil {
		t.Fatal(err)
	}
	c, err := pglease.New(pool, pglease.Config{Keeper: k, MeterProvider: r.Provider})
	if err != nil {
		t.Fatal(err)
	}
	var leases []*pglease.Lease
	for _, name := range []string{"a", "b", "c"} {
		leases = append(leases, mustAcquire(t, c, name, 3*time.Second))
	}
	l := leases[2]
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	// A kept Renew returns once a round has renewed the lease.
	if err := l.Renew(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if h, ok := r.Histogram(t, "pglease.keeper.round.duration", renewed); !ok || h.Count < 1 {
		t.Errorf("pglease.keeper.round.duration{renewed}: count %d, want at least 1:\n%s", h.Count, r.Dump(t))
	}
	h, ok := r.IntHistogram(t, "pglease.keeper.round.tenures")
	if most, _ := h.Max.Value(); !ok || h.Count < 1 || most != 3 {
		t.Errorf("pglease.keeper.round.tenures: count %d max %d, want rounds of 3", h.Count, most)
	}
	if h, ok := r.Histogram(t, "pglease.renew.margin", leaseKind); !ok || h.Count < 3 {
		t.Errorf("pglease.renew.margin: count %d, want one per kept lease and round", h.Count)
	}
	wantSum(t, r, 3, "pglease.tenure.held", leaseKind)
	for _, l := range leases {
		if err := l.Release(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	wantSum(t, r, 0, "pglease.tenure.held", leaseKind)
	wantSum(t, r, 3, "pglease.tenure.releases", leaseKind)
}

// proxiedPool returns a pool to dbURL through a fault proxy.
func proxiedPool(t *testing.T, dbURL string) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(faultproxy.PostgresTarget(cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	p.Route(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Close()
		pool.Close()
	})
	return pool, p
}
