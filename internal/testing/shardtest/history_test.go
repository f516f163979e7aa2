//go:build sharded

package shardtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/history"
)

// TestHistoryWithBackendKills races holders over leases and slots on every
// partition through the proxy while PL/Proxy's backends on partition 1 are
// killed again and again, and checks the history with the history checker:
// no two live holders, no capacity exceeded, fences in order, no stale
// renewal or release. Calls cut by a kill are Unknown.
func TestHistoryWithBackendKills(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	role := newRole(t, fleet, "hist")
	proxy := pool(t, s.ProxyURL, role)
	const (
		holders  = 8
		duration = 6 * time.Second
		ttl      = 200 * time.Millisecond
		capacity = 2
	)
	var names, scopes []string
	for p := range 4 {
		names = append(names, namesOn(t, proxy, "hist-lease", p, 1)...)
		scopes = append(scopes, namesOn(t, proxy, "hist-scope", p, 1)...)
	}
	rec := history.NewRecorder()
	ctx, stop := context.WithTimeout(testContext(t), duration)
	defer stop()

	var wg sync.WaitGroup
	var kills int
	wg.Go(func() { kills = killBackends(ctx, t, s.Partitions[1], role) })
	for h := range holders {
		holder := fmt.Sprintf("h%d", h)
		wg.Go(func() { runHolder(ctx, proxy, rec, holder, names, scopes, ttl, capacity) })
	}
	wg.Wait()

	ops := rec.Ops()
	report := history.Check(ops, history.Config{})
	counts := map[history.Outcome]int{}
	for _, op := range ops {
		counts[op.Outcome]++
	}
	t.Logf("%d ops through the proxy (%d ok, %d refused, %d unknown), %d kills of PL/Proxy's backends on partition 1: %s",
		len(ops), counts[history.OK], counts[history.Refused], counts[history.Unknown], kills, report.Summary())
	if !report.OK() {
		t.Fatalf("history violations:\n%s", report.Summary())
	}
	if counts[history.Unknown] == 0 || kills == 0 {
		t.Fatalf("%d kills, %d unknown outcomes: the kills did not reach any call", kills, counts[history.Unknown])
	}
}

// killBackends terminates the backends of role on partition p (the
// connections PL/Proxy opened) every 50ms until ctx ends, and returns how
// many it terminated.
func killBackends(ctx context.Context, t *testing.T, p *Partition, role string) int {
	admin, err := pgx.Connect(context.WithoutCancel(ctx), p.URL)
	if err != nil {
		t.Errorf("connect to partition %d: %v", p.Index, err)
		return 0
	}
	defer func() { _ = admin.Close(context.WithoutCancel(ctx)) }()
	kills := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return kills
		case <-tick.C:
		}
		var n int
		err := admin.QueryRow(context.WithoutCancel(ctx), `SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(pid))
			FROM pg_catalog.pg_stat_activity WHERE datname = current_database() AND usename = $1`, role).Scan(&n)
		if err != nil {
			t.Errorf("kill backends on partition %d: %v", p.Index, err)
			return kills
		}
		kills += n
	}
}

// runHolder makes random calls as holder until ctx ends, one at a time,
// recording each.
func runHolder(ctx context.Context, proxy *pgxpool.Pool, rec *history.Recorder, holder string, names, scopes []string,
	ttl time.Duration, capacity int) {
	type tenure struct {
		slot  int
		fence int64
	}
	leases := map[string]int64{}
	slots := map[string]tenure{}
	call := context.WithoutCancel(ctx)
	for ctx.Err() == nil {
		op := history.Op{Holder: holder, TTL: ttl}
		op.Call = rec.Now()
		var err error
		var ok bool
		if rand.IntN(2) == 0 {
			op.Name = names[rand.IntN(len(names))]
			fence, held := leases[op.Name]
			switch {
			case !held:
				op.Kind = history.Acquire
				var got int64
				var other string
				var left time.Duration
				err = proxy.QueryRow(call, `SELECT acquired, fence, holder, expires_in FROM pglease.acquire($1, $2, $3)`, op.Name, holder, ttl).
					Scan(&ok, &got, &other, &left)
				op.Fence = got
				if err == nil && ok {
					leases[op.Name] = got
				} else if err == nil {
					op.Other, op.ExpiresIn = other, left
				}
			case rand.IntN(3) == 0:
				op.Kind, op.Fence, op.TTL = history.Release, fence, 0
				err = proxy.QueryRow(call, `SELECT released FROM pglease.release($1, $2, $3)`, op.Name, holder, fence).Scan(&ok)
				delete(leases, op.Name)
			default:
				op.Kind, op.Fence = history.Renew, fence
				err = proxy.QueryRow(call, `SELECT renewed FROM pglease.renew($1, $2, $3, $4)`, op.Name, holder, fence, ttl).Scan(&ok)
				if err != nil || !ok {
					delete(leases, op.Name)
				}
			}
		} else {
			op.Name = scopes[rand.IntN(len(scopes))]
			cur, held := slots[op.Name]
			switch {
			case !held:
				op.Kind, op.Capacity = history.Claim, capacity
				var slot *int32
				var fence *int64
				var inUse int32
				err = proxy.QueryRow(call, `SELECT claimed, slot, fence, in_use FROM pglease.claim_slot($1, $2, $3, $4)`,
					op.Name, holder, capacity, ttl).Scan(&ok, &slot, &fence, &inUse)
				if err == nil && ok {
					op.Slot, op.Fence = int(*slot), *fence
					slots[op.Name] = tenure{op.Slot, op.Fence}
				} else if err == nil {
					op.InUse = int(inUse)
				}
			case rand.IntN(3) == 0:
				op.Kind, op.Slot, op.Fence, op.TTL = history.ReleaseSlot, cur.slot, cur.fence, 0
				err = proxy.QueryRow(call, `SELECT released FROM pglease.release_slot($1, $2, $3, $4)`, op.Name, cur.slot, holder, cur.fence).Scan(&ok)
				delete(slots, op.Name)
			default:
				op.Kind, op.Slot, op.Fence = history.RenewSlot, cur.slot, cur.fence
				err = proxy.QueryRow(call, `SELECT renewed FROM pglease.renew_slot($1, $2, $3, $4, $5)`,
					op.Name, cur.slot, holder, cur.fence, ttl).Scan(&ok)
				if err != nil || !ok {
					delete(slots, op.Name)
				}
			}
		}
		op.Return = rec.Now()
		switch {
		case err != nil:
			op.Outcome = history.Unknown
		case ok:
			op.Outcome = history.OK
		default:
			op.Outcome = history.Refused
		}
		rec.Add(op)
	}
}
