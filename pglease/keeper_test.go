package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

// countingDB is a pool that counts the renewal calls made on it.
type countingDB struct {
	*pgxpool.Pool
	single, holder atomic.Int64 // renew and renew_slot; renew_holder
}

func (d *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	switch {
	case strings.Contains(sql, "name: LeaseRenew"), strings.Contains(sql, "name: SlotRenew"):
		d.single.Add(1)
	case strings.Contains(sql, "name: HolderRenew"):
		d.holder.Add(1)
	}
	return d.Pool.QueryRow(ctx, sql, args...)
}

// startKeeper returns a keeper on database with ttl, run until the test
// ends, and a lease and a slot client that use it.
func startKeeper(t *testing.T, database pglease.DB, ttl time.Duration) (*pglease.Keeper, *pglease.Client, *runslots.Client) {
	t.Helper()
	k, err := pglease.NewKeeper(database, pglease.KeeperConfig{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := pglease.New(database, pglease.Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	slots, err := runslots.New(database, runslots.Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Keeper.Serve = %v, want context.Canceled", err)
		}
	})
	return k, leases, slots
}

// TestKeeperKeepsMany: one keeper keeps 1,000 leases and 1,000 slots past
// three TTLs, with renew_holder calls only, also under Lease.Run.
func TestKeeperKeepsMany(t *testing.T) {
	t.Parallel()
	// A round renews 2,000 tenures; a TTL of 6 s leaves a round 4 s
	// of slack beside make test-repeat's CPU hogs (at 2 s, ten tenures were
	// lost once at a load average of 11).
	const n, ttl = 1000, 6 * time.Second
	database := &countingDB{Pool: pgtest.NewPool(t)}
	k, leases, slots := startKeeper(t, database, ttl)
	ctx := context.Background()

	held := make([]interface{ Done() <-chan struct{} }, 2*n)
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() (err error) {
			held[i], err = leases.TryAcquire(ctx, fmt.Sprintf("many/%d", i), ttl)
			return err
		})
		g.Go(func() (err error) {
			held[n+i], err = slots.TryClaim(ctx, runslots.Want{Scope: fmt.Sprintf("many/%d", i), Capacity: 1}, ttl)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := k.Len(); got != 2*n {
		t.Fatalf("Keeper.Len = %d, want %d", got, 2*n)
	}

	// Ten of the leases run a workload meanwhile.
	rctx, stop := context.WithCancel(ctx)
	var runs sync.WaitGroup
	defer runs.Wait() // also when the test fails
	defer stop()
	for _, h := range held[:10] {
		runs.Go(func() {
			err := h.(*pglease.Lease).Run(rctx, func(ctx context.Context) error { <-ctx.Done(); return nil })
			if err != nil {
				t.Errorf("Run = %v, want nil after the cancel", err)
			}
		})
	}

	// A kept Renew returns after the keeper's next round, or at once for
	// one it has not reported yet: 7 calls span 6 rounds, over two TTLs
	// (Interval TTL/3).
	probe := held[n-1].(*pglease.Lease)
	for range 7 {
		if err := probe.Renew(ctx); err != nil {
			t.Fatalf("Renew = %v", err)
		}
	}
	for i, h := range held {
		select {
		case <-h.Done():
			t.Fatalf("tenure %d ended while kept", i)
		default:
		}
	}
	var live int
	if err := database.QueryRow(ctx, `SELECT (SELECT count(*) FROM pglease.leases WHERE holder = $1 AND expires_at > now())
		+ (SELECT count(*) FROM pglease.slots WHERE holder = $1 AND expires_at > now())`, k.Holder()).Scan(&live); err != nil {
		t.Fatal(err)
	}
	if live != 2*n {
		t.Fatalf("%d live tenures on the server, want %d", live, 2*n)
	}
	stop()
	runs.Wait()
	if got := k.Len(); got != 2*n-10 {
		t.Fatalf("Keeper.Len after 10 Runs released = %d, want %d", got, 2*n-10)
	}
	if s, h := database.single.Load(), database.holder.Load(); s != 0 || h < 6 {
		t.Fatalf("%d single renewals and %d renew_holder calls, want 0 and at least 6", s, h)
	}
}

// TestKeeperForceRelease: ForceRelease of one kept lease, and the release
// of one kept slot by someone else, end exactly those tenures, with errors
// naming them; Run on a force-released lease returns a *LostError.
func TestKeeperForceRelease(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	_, leases, slots := startKeeper(t, pool, 3*time.Second)
	ctx := context.Background()
	var all []*pglease.Lease
	for _, name := range []string{"a", "b", "c"} {
		l, err := leases.TryAcquire(ctx, name, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, l)
	}
	a, b, c := all[0], all[1], all[2]
	s, err := slots.TryClaim(ctx, runslots.Want{Scope: "s", Capacity: 2}, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}

	ran := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		ran <- c.Run(ctx, func(ctx context.Context) error { close(started); <-ctx.Done(); return nil })
	}()
	<-started
	for _, name := range []string{"a", "c"} {
		if _, released, err := pgleaseadmin.ForceRelease(ctx, pool, name); err != nil || !released {
			t.Fatalf("ForceRelease(%s): released %t, %v", name, released, err)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT pglease.release_slot($1, $2, $3, $4)", "s", s.Number(), s.Holder(), s.Fence()); err != nil {
		t.Fatal(err)
	}

	err = renewUntilVerdict(ctx, a)
	if !errors.Is(err, pglease.ErrLeaseLost) || !strings.Contains(err.Error(), fmt.Sprintf(`lease "a" fence %d`, a.Fence())) {
		t.Fatalf("Renew of the force-released lease = %v, want ErrLeaseLost naming it and its fence", err)
	}
	<-a.Done()
	err = renewUntilVerdict(ctx, s)
	if !errors.Is(err, runslots.ErrSlotLost) || !strings.Contains(err.Error(), fmt.Sprintf(`slot %d of scope "s" fence %d`, s.Number(), s.Fence())) {
		t.Fatalf("Renew of the released slot = %v, want ErrSlotLost naming it and its fence", err)
	}
	lost, ok := errors.AsType[*pglease.LostError](<-ran)
	if !ok || lost.Name != "c" || lost.Fence != c.Fence() {
		t.Fatalf("Run of the force-released lease = %v, want a *LostError for c", lost)
	}
	if err := b.Renew(ctx); err != nil {
		t.Fatalf("Renew of the untouched lease = %v, want nil", err)
	}
	select {
	case <-b.Done():
		t.Fatal("the untouched lease ended")
	default:
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// renewUntilVerdict renews t until it fails: a kept Renew returns nil at
// once for a round that renewed t before the loss, then the next round's
// verdict.
func renewUntilVerdict(ctx context.Context, t interface{ Renew(context.Context) error }) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if err := t.Renew(ctx); err != nil {
			return err
		}
	}
}

// TestKeeperClientRefused: a client with another holder than its keeper's,
// or whose settings leave the keeper's TTL no room, is refused.
func TestKeeperClientRefused(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewPool(t)
	k, err := pglease.NewKeeper(pool, pglease.KeeperConfig{Holder: "k", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cfg  pglease.Config
		want string
	}{
		{pglease.Config{Holder: "other"}, `Holder "other" differs from the Keeper's holder "k"`},
		{pglease.Config{RenewInterval: 200 * time.Millisecond}, "RenewInterval and RetryDelay must be zero with a Keeper"},
		{pglease.Config{SafetyMargin: 2 * time.Second}, "the Keeper's TTL does not suit this client"},
	} {
		tc.cfg.Keeper = k
		if _, err := pglease.New(pool, tc.cfg); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("pglease.New = %v, want ErrInvalidArgument saying %q", err, tc.want)
		}
		scfg := runslots.Config{Holder: tc.cfg.Holder, RenewInterval: tc.cfg.RenewInterval, SafetyMargin: tc.cfg.SafetyMargin, Keeper: k}
		if _, err := runslots.New(pool, scfg); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runslots.New = %v, want ErrInvalidArgument saying %q", err, tc.want)
		}
	}
	// A grant longer than the keeper's TTL is refused before any query: the
	// rounds would shorten it on the server.
	c, err := pglease.New(pool, pglease.Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	const longer = "is longer than the Keeper's TTL 1s"
	if _, err := c.TryAcquire(context.Background(), "kept/longer", 2*time.Second); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), longer) {
		t.Errorf("TryAcquire for 2s on a client kept at 1s = %v, want ErrInvalidArgument saying %q", err, longer)
	}
	s, err := runslots.New(pool, runslots.Config{Keeper: k})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryClaim(context.Background(), runslots.Want{Scope: "kept/longer", Capacity: 1}, 2*time.Second); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), longer) {
		t.Errorf("TryClaim for 2s on a client kept at 1s = %v, want ErrInvalidArgument saying %q", err, longer)
	}
	if _, err := pglease.NewKeeper(pool, pglease.KeeperConfig{TTL: -time.Second}); !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "TTL must be") {
		t.Errorf("NewKeeper with TTL -1s = %v, want ErrInvalidArgument naming TTL", err)
	}
}
