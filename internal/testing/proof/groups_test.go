//go:build proof

package proof

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/history"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/shardgroup"
)

const (
	envGroupHelperURL    = "PGLEASE_PROOF_GROUP_HELPER_URL"
	envGroupHelperMember = "PGLEASE_PROOF_GROUP_HELPER_MEMBER"
	groupChaosShards     = 64
	groupChaosWorkers    = 8
	groupChaosTTL        = 2 * time.Second
	groupChaosInterval   = 500 * time.Millisecond
)

// TestGroupChaos runs up to 8 shard-group workers as separate processes on
// one group of 64 shards for PGLEASE_GROUPS_DURATION (20s; make
// chaos-groups: 2m): workers join, leave gracefully (SIGTERM), are killed
// (SIGKILL) and have their backends terminated at random, while each shard's
// function makes fenced writes. The server's own history (an audit of every
// lease row version and the fenced writes) must show no two tenures of a
// shard overlapping on the server's clock, fences only growing, and every
// fenced write inside its tenure.
func TestGroupChaos(t *testing.T) {
	if dbURL := os.Getenv(envGroupHelperURL); dbURL != "" {
		groupHelper(t, dbURL, os.Getenv(envGroupHelperMember))
		return
	}
	duration := envDuration(t, "PGLEASE_GROUPS_DURATION", 20*time.Second)
	dbURL := pgtest.NewMigrated(t)
	installAudit(t, dbURL)
	pool := openPool(t, dbURL, 2, "pglease-proof-groups")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `SELECT pglease.group_create('chaos', $1::integer, NULL)`, groupChaosShards); err != nil {
		t.Fatal(err)
	}

	type proc struct {
		cmd    *exec.Cmd
		member string
		exited chan error
	}
	slots := make([]*proc, groupChaosWorkers)
	next := 0
	start := func(i int) {
		next++
		member := fmt.Sprintf("w%d-%d", i, next)
		cmd := exec.Command(os.Args[0], "-test.run=^TestGroupChaos$", "-test.count=1")
		cmd.Env = append(os.Environ(), envGroupHelperURL+"="+dbURL, envGroupHelperMember+"="+member)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p := &proc{cmd: cmd, member: member, exited: make(chan error, 1)}
		go func() { p.exited <- cmd.Wait() }()
		slots[i] = p
	}
	t.Cleanup(func() {
		for _, p := range slots {
			if p != nil {
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
	})
	var joins, leaves, kills, backendKills int
	for i := range slots {
		start(i)
		joins++
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 28))
	end := time.Now().Add(duration)
	for time.Now().Before(end) {
		tick := time.NewTimer(time.Duration(200+rng.IntN(800)) * time.Millisecond)
		<-tick.C
		i := rng.IntN(len(slots))
		p := slots[i]
		if p == nil {
			start(i)
			joins++
			continue
		}
		switch rng.IntN(4) {
		case 0: // graceful leave
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				t.Fatalf("worker %s did not leave within 30s of SIGTERM", p.member)
			}
			slots[i] = nil
			leaves++
		case 1: // kill -9
			_ = p.cmd.Process.Kill()
			<-p.exited
			slots[i] = nil
			kills++
		default: // its backends terminated; it reconnects
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE application_name = $1`, "grp-"+p.member).Scan(&n); err != nil {
				t.Fatal(err)
			}
			backendKills += n
		}
	}
	for i, p := range slots {
		if p != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			<-p.exited
			slots[i] = nil
			leaves++
		}
	}
	evs := readAudit(t, pool)
	rep := history.CheckServer(evs, nil)
	failViolations(t, "server history", rep.Violations)
	var writes int
	grants := map[string]int{}
	for _, e := range evs {
		switch {
		case e.Row == history.WriteRow:
			writes++
		case e.Row == history.LeaseRow && e.Holder != "" && (e.Inserted || e.Fence != e.OldFence):
			grants[e.Name]++
		}
	}
	moves := 0
	for _, g := range grants {
		moves += g
	}
	t.Logf("group chaos %s, M=%d, %d worker processes: %d joins, %d graceful leaves, %d kill -9, %d backends terminated; "+
		"%d tenures granted (moves), %d fenced writes; %s",
		duration, groupChaosShards, groupChaosWorkers, joins, leaves, kills, backendKills, moves, writes, rep.Summary())
}

// groupHelper is one worker process of TestGroupChaos: it runs until
// SIGTERM (then leaves gracefully) or SIGKILL, each shard's function
// writing under the shard's fence every 250 ms.
func groupHelper(t *testing.T, dbURL, member string) {
	pool := openPool(t, dbURL, 8, "grp-"+member)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	w, err := shardgroup.New(pool, shardgroup.Config{
		Group: "chaos", Shards: groupChaosShards, Member: member,
		TTL: groupChaosTTL, Interval: groupChaosInterval,
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Run(ctx, func(ctx context.Context, s shardgroup.Shard) error {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			_ = pglease.WithFence(ctx, pool, s.LeaseName(), s.Fence, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, writeSQL, s.LeaseName(), s.Fence, member)
				return err
			})
		}
	})
}
