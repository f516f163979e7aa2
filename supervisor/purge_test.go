package supervisor_test

import (
	"context"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/supervisor"
)

// TestRunPurges checks that Run purges in the background: a lease free for
// two days is gone, the supervisor's own is not.
func TestRunPurges(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, `INSERT INTO pglease.leases (name, holder, fence, acquired_at, expires_at)
		VALUES ('old', NULL, 7, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	logger, removed := pgtest.LogSignal("removed")
	acquired := make(chan struct{})
	s, err := supervisor.NewLease(pool, "purger", supervisor.Config{TTL: 5 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.Run(runCtx, func(ctx context.Context) error { close(acquired); <-ctx.Done(); return nil })
	}()
	select {
	case n := <-removed:
		if n != 1 {
			t.Fatalf("the background purge removed %d rows, want 1", n)
		}
	case <-ctx.Done():
		t.Fatal("Run did not purge")
	}
	select {
	case <-acquired:
	case <-ctx.Done():
		t.Fatal("Run did not acquire")
	}
	stop()
	<-done
	var names []string
	rows, err := pool.Query(ctx, `SELECT name FROM pglease.lease_status ORDER BY name`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		_ = rows.Scan(&n)
		names = append(names, n)
	}
	if rows.Err() != nil || len(names) != 1 || names[0] != "purger" {
		t.Fatalf("leases after the purge: %q (%v), want only the supervisor's own, purger", names, rows.Err())
	}
	var floor int64
	if err := pool.QueryRow(ctx, `SELECT last_value FROM pglease.lease_fence_floor`).Scan(&floor); err != nil || floor != 7 {
		t.Fatalf("fence floor after the purge: %d (%v), want 7", floor, err)
	}
}
