//go:build sharded

package shardtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// TestPartitionOfListenAndFence finds a name's partition through the
// proxy with pgleaseadmin.PartitionOf, connects to it as the same role, and
// there gets the release NOTIFY that the proxy cannot carry, and runs a
// fenced transaction whose row lock holds a write through the proxy until
// it commits. No deadline of the test is near a TTL: it waits on the
// notification and on the server's lock wait.
func TestPartitionOfListenAndFence(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	role := newRole(t, fleet, "listen")
	proxy := pool(t, s.ProxyURL, role)
	ctx := testContext(t)
	const name = "listened"

	part, err := pgleaseadmin.PartitionOf(ctx, proxy, name)
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
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := listener.WaitForNotification(waitCtx)
	if err != nil {
		t.Fatalf("no release notification on partition %d within 30s: %v", part.Index, err)
	}
	if !strings.Contains(n.Payload, name) {
		t.Fatalf("notification payload %q does not name %q", n.Payload, name)
	}
	t.Logf("release notification on the partition %v after the release through the proxy", time.Since(released).Round(time.Microsecond))

	// A fenced transaction on the partition holds the row lock: a release
	// through the proxy, which updates the row as a takeover would, waits
	// for its commit. The tenure lasts far longer than the test (a
	// takeover needs it expired, and assert_held ends a transaction left
	// idle 100 ms after the tenure, too short a window to observe the
	// wait under load), so only the lock orders the release.
	mustAcquire(t, proxy, name, "b", time.Hour, 2)
	partPool, err := pgxpool.NewWithConfig(ctx, mustPoolConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer partPool.Close()
	admin := pool(t, s.Partitions[part.Index].URL, "")
	type result struct {
		released bool
		err      error
	}
	done := make(chan result, 1)
	var fencedPID int32
	started := false
	err = pglease.WithFence(ctx, partPool, name, 2, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&fencedPID); err != nil {
			return err
		}
		started = true
		go func() {
			var r result
			r.err = proxy.QueryRow(ctx, `SELECT released FROM pglease.release($1, 'b', 2)`, name).Scan(&r.released)
			done <- r
		}()
		return waitUntil(ctx, time.Minute, "the release through the proxy to wait for the fenced transaction", func(ctx context.Context) (bool, error) {
			select {
			case r := <-done:
				done <- r
				return false, fmt.Errorf("the release returned while the fenced transaction was open: released=%v, %v", r.released, r.err)
			default:
			}
			var blocked bool
			err := admin.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity
				WHERE wait_event_type = 'Lock' AND $1::integer = ANY (pg_catalog.pg_blocking_pids(pid)))`, fencedPID).Scan(&blocked)
			return blocked, err
		})
	})
	var got result
	if started {
		got = <-done // the transaction has ended, so the release cannot wait for it
	}
	if err != nil {
		t.Fatalf("fenced transaction on partition %d (pid %d): %v", part.Index, fencedPID, err)
	}
	if got.err != nil || !got.released {
		t.Fatalf("release through the proxy after the fenced transaction committed: got released=%v, %v, want released", got.released, got.err)
	}
	mustAcquire(t, proxy, name, "c", time.Hour, 3)
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
