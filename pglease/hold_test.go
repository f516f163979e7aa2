package pglease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
)

// TestHoldAtLeast: the release of a tenure acquired WithHoldAtLeast(d)
// leaves the lease held, same holder and fence, until grant + d on the
// server's clock; then the next tenure gets fence + 1.
func TestHoldAtLeast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	a, err := pglease.New(pool, pglease.Config{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := pglease.New(pool, pglease.Config{Holder: "b"})
	l, err := a.TryAcquire(ctx, "cron", 10*time.Second, pglease.WithHoldAtLeast(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx, func(context.Context) error { return nil }); err != nil {
		t.Fatalf("Run = %v", err)
	}
	_, err = b.TryAcquire(ctx, "cron", 10*time.Second)
	held, ok := errors.AsType[*pglease.HeldError](err)
	if !ok || held.Holder != "a" || held.Fence != 1 || held.ExpiresIn < 50*time.Minute {
		t.Fatalf("acquire after a held release = %v, want held by a, fence 1, for about an hour", err)
	}
	var until, granted time.Time
	if err := pool.QueryRow(ctx, `SELECT acquired_at, expires_at FROM pglease.leases WHERE name = 'cron'`).Scan(&granted, &until); err != nil {
		t.Fatal(err)
	}
	if got := until.Sub(granted); got != time.Hour {
		t.Fatalf("held until grant + %s, want grant + 1h", got)
	}

	// A hold shorter than the tenure so far: the release frees at once.
	c, _ := pglease.New(pool, pglease.Config{Holder: "c"})
	l2, err := c.TryAcquire(ctx, "quick", 10*time.Second, pglease.WithHoldAtLeast(time.Microsecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := b.TryAcquire(ctx, "quick", 10*time.Second)
	if err != nil || l3.Fence() != 2 {
		t.Fatalf("acquire after an expired hold = %v, want fence 2", err)
	}
}

func TestHoldAtLeastInvalid(t *testing.T) {
	t.Parallel()
	c, err := pglease.New(pgtest.NewPool(t), pglease.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []time.Duration{-time.Second, pglease.MaxTTL + time.Second} {
		_, err := c.TryAcquire(context.Background(), "cron", time.Minute, pglease.WithHoldAtLeast(d))
		if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "WithHoldAtLeast") {
			t.Errorf("TryAcquire WithHoldAtLeast(%s) = %v, want ErrInvalidArgument naming WithHoldAtLeast", d, err)
		}
	}
}
