//go:build sharded

package shardtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// TestPartitionOfListenAndFence finds a name's partition through the
// proxy with pglease.PartitionOf, connects to it as the same role, and
// there gets the release NOTIFY that the proxy cannot carry, and a fenced
// transaction whose row lock holds.
func TestPartitionOfListenAndFence(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	role := newRole(t, fleet, "listen")
	proxy := pool(t, s.ProxyURL, role)
	ctx := testContext(t)
	const name = "listened"

	part, err := pglease.PartitionOf(ctx, proxy, name)
	if err != nil {
		t.Fatal(err)
	}
	if want := partitionOf(t, proxy, name); part.Index != want || part.ConnString != s.Partitions[want].ConnInfo() {
		t.Fatalf("PartitionOf: got %+v, want partition %d %q", part, want, s.Partitions[want].ConnInfo())
	}
	cfg, err := part.Config(proxy.Config().ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	listener, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect to partition %d: %v", part.Index, err)
	}
	defer func() { _ = listener.Close(context.Background()) }()
	var db, user string
	if err := listener.QueryRow(ctx, `SELECT current_database(), session_user`).Scan(&db, &user); err != nil || db != s.Partitions[part.Index].Name || user != role {
		t.Fatalf("partition connection: database %q as %q (%v), want %q as %q", db, user, err, s.Partitions[part.Index].Name, role)
	}
	if _, err := listener.Exec(ctx, `LISTEN `+pglease.NotifyChannel); err != nil {
		t.Fatal(err)
	}

	mustAcquire(t, proxy, name, "a", time.Minute, 1)
	if r := acquire(t, proxy, name, "b", time.Minute); r.Acquired {
		t.Fatal("second holder acquired") // registers b as a waiter on the partition
	}
	released := time.Now()
	if !release(t, proxy, name, "a", 1) {
		t.Fatal("release refused")
	}
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no release notification on partition %d within 10s: %v", part.Index, err)
	}
	if !strings.Contains(n.Payload, name) {
		t.Fatalf("notification payload %q does not name %q", n.Payload, name)
	}
	t.Logf("release notification on the partition %v after the release through the proxy", time.Since(released).Round(time.Microsecond))

	// A fenced transaction on the partition holds the row lock: a takeover
	// through the proxy waits for its commit.
	mustAcquire(t, proxy, name, "b", 100*time.Millisecond, 2)
	partPool, err := pgxpool.NewWithConfig(ctx, mustPoolConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer partPool.Close()
	admin := pool(t, s.Partitions[part.Index].URL, "")
	type result struct {
		r   acquireResult
		err error
	}
	done := make(chan result, 1)
	err = pglease.WithFence(ctx, partPool, name, 2, func(tx pgx.Tx) error {
		var pid int32
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		waitFor(t, "the 100ms tenure to expire", func() bool {
			var state string
			return proxy.QueryRow(ctx, `SELECT state FROM pglease.lease_status WHERE name = $1`, name).Scan(&state) == nil && state == "expired"
		})
		go func() {
			r, err := tryAcquire(ctx, proxy, name, "c", time.Minute)
			done <- result{r, err}
		}()
		waitFor(t, "the takeover through the proxy to wait for the fenced transaction", func() bool {
			var blocked bool
			err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
				WHERE wait_event_type = 'Lock' AND $1::integer = ANY (pg_catalog.pg_blocking_pids(pid)))`, pid).Scan(&blocked)
			return err == nil && blocked
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := <-done; got.err != nil || !got.r.Acquired || got.r.Fence != 3 {
		t.Fatalf("takeover after the fenced transaction committed: got %+v, %v, want fence 3", got.r, got.err)
	}
}

func mustPoolConfig(t *testing.T, cfg *pgx.ConnConfig) *pgxpool.Config {
	t.Helper()
	pc, err := pgxpool.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig = cfg
	return pc
}
