package pglease_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
)

// TestLateReleaseCannotEndANewTenure: a release whose caller gave up (its
// context ended while the network held the request back) reaches the
// server only after the same holder acquired the lease again. The
// acquire first confirms the release, so it gets a new tenure (a larger
// fence), which the late release cannot end: another holder is still
// refused, and the new tenure renews. Without the confirmation the
// acquire re-pinned the old tenure (same fence) and the late release
// freed it under the holder (model/lease.pml, REORDER).
func TestLateReleaseCannotEndANewTenure(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewMigrated(t)
	direct := pgtest.Pool(t, dbURL)
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(faultproxy.PostgresTarget(cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	// The first connection goes through the proxy, every later one direct.
	var viaProxy atomic.Bool
	viaProxy.Store(true)
	var proxiedPID atomic.Uint32
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if viaProxy.Load() {
			return (&net.Dialer{}).DialContext(ctx, "tcp", proxy.Addr())
		}
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	cfg.AfterConnect = func(_ context.Context, conn *pgx.Conn) error {
		if viaProxy.Load() {
			proxiedPID.Store(conn.PgConn().PID())
		}
		return nil
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	const name = "late-release"
	a := newClient(t, pool, "a")
	old := mustAcquire(t, a, name, time.Minute)
	viaProxy.Store(false)

	proxy.Blackhole()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err = old.Release(ctx)
	cancel()
	if err == nil {
		t.Fatal("Release through a blackholed network returned nil, want an error")
	}

	again, err := a.TryAcquire(context.Background(), name, time.Minute)
	if err != nil {
		t.Fatalf("TryAcquire after the failed release: %v", err)
	}
	if again.Fence() <= old.Fence() {
		t.Errorf("the acquire after a release of unknown outcome got fence %d, want more than the old tenure's %d",
			again.Fence(), old.Fence())
	}

	// Let the held-back release through, and wait until the server has
	// read it: the backend of the proxied connection exits only after it
	// has processed what came before its client's end.
	proxy.Resume()
	pid := proxiedPID.Load()
	for {
		var alive bool
		if err := direct.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity WHERE pid = $1)`, int32(pid)).Scan(&alive); err != nil {
			t.Fatal(err)
		}
		if !alive {
			break
		}
		time.Sleep(10 * time.Millisecond) // polls the server for the backend's exit
	}

	b := newClient(t, direct, "b")
	if l, err := b.TryAcquire(context.Background(), name, time.Minute); !errors.Is(err, pglease.ErrLeaseHeld) {
		if l != nil {
			t.Errorf("another holder acquired %q with fence %d while a's tenure %d is live: two holders", name, l.Fence(), again.Fence())
		}
		t.Fatalf("TryAcquire as b: got %v, want ErrLeaseHeld", err)
	}
	if err := again.Renew(context.Background()); err != nil {
		t.Fatalf("Renew of the new tenure after the late release: %v", err)
	}
}
