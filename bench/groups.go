package main

import (
	"context"
	"fmt"
	"log"
	"runtime"
	"time"

	"github.com/jackc/pgx/v5"
)

// The shard-group section (-groups-only, docs/groups.md): N members of a
// group of M shards, simulated on one connection: an interval is one
// group_sync per live member, in turn, each followed by a group_release of
// every shard it was asked to hand over (a workload that returns at once).
// Intervals are paced groupInterval apart, so that a killed member's TTL
// passes in real time.
const (
	groupTTL      = 2 * time.Second
	groupInterval = 500 * time.Millisecond
	// bigTTL is the TTL of the M=10000 group, whose interval of 16 syncs
	// takes longer than groupTTL: only its first convergence and steady
	// state are measured.
	bigTTL = time.Minute
)

// groupSim is one simulated group.
type groupSim struct {
	conn    *pgx.Conn
	ttl     time.Duration
	name    string
	m       int
	members []string
	// syncTime is the time spent in group_sync and group_release calls
	// (round trips on a local connection: mostly server time).
	syncTime time.Duration
	syncs    int
}

// interval runs one interval and reports whether the group is balanced
// afterwards (every shard owned, none being handed over, every member at
// floor or ceil of M/N).
func (g *groupSim) interval(ctx context.Context) (bool, error) {
	counts := map[string]int{}
	asked := 0
	for _, mem := range g.members {
		start := time.Now()
		var shards, release []string
		var fences []int64
		if err := g.conn.QueryRow(ctx, `SELECT shards, fences, release FROM pglease.group_sync($1, $2, $3, NULL)`,
			g.name, mem, g.ttl).Scan(&shards, &fences, &release); err != nil {
			return false, err
		}
		fenceOf := map[string]int64{}
		for i, s := range shards {
			fenceOf[s] = fences[i]
		}
		for _, s := range release {
			if _, err := g.conn.Exec(ctx, `SELECT pglease.group_release($1, $2, $3, $4)`, g.name, s, mem, fenceOf[s]); err != nil {
				return false, err
			}
		}
		g.syncTime += time.Since(start)
		g.syncs++
		counts[mem] = len(shards) - len(release)
		asked += len(release)
	}
	n := len(g.members)
	lo, hi := g.m/n, (g.m+n-1)/n
	total := 0
	for _, mem := range g.members {
		c := counts[mem]
		total += c
		if c < lo || c > hi {
			return false, nil
		}
	}
	return total == g.m && asked == 0, nil
}

// grants returns the number of tenures ever granted on the group's shards.
func (g *groupSim) grants(ctx context.Context) (int64, error) {
	var n int64
	err := g.conn.QueryRow(ctx, `SELECT coalesce(sum(l.fence), 0) FROM pglease.leases AS l
		WHERE starts_with(l.name, '{' || $1 || '}/')`, g.name).Scan(&n)
	return n, err
}

// converge runs paced intervals until balanced; returns the intervals, the
// time and the moves (new tenures).
func (g *groupSim) converge(ctx context.Context) (intervals int, took time.Duration, moves int64, err error) {
	before, err := g.grants(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	start := time.Now()
	tick := time.NewTicker(groupInterval)
	defer tick.Stop()
	for intervals = 1; intervals <= 100; intervals++ {
		ok, err := g.interval(ctx)
		if err != nil {
			return 0, 0, 0, err
		}
		if ok {
			after, err := g.grants(ctx)
			return intervals, time.Since(start), after - before, err
		}
		<-tick.C
	}
	return 0, 0, 0, fmt.Errorf("group %s did not converge within 100 intervals", g.name)
}

// runGroupsBench measures the shard-group protocol and prints its section.
func runGroupsBench(ctx context.Context, cfg config) error {
	load := loadavg()
	type row struct {
		m, n                 int
		event                string
		intervals            int
		took                 time.Duration
		moves, minimum       int64
		perInterval, perSync time.Duration
	}
	var rows []row
	err := withScratchConn(ctx, cfg.url, "_groups", func(conn *pgx.Conn) error {
		for _, c := range []struct{ m, n int }{{1024, 1}, {1024, 4}, {1024, 16}, {10000, 16}} {
			g := &groupSim{conn: conn, ttl: groupTTL, name: fmt.Sprintf("bench-%d-%d", c.m, c.n), m: c.m}
			if c.m > 1024 {
				g.ttl = bigTTL
			}
			if _, err := conn.Exec(ctx, `SELECT pglease.group_create($1, $2::integer, NULL)`, g.name, c.m); err != nil {
				return err
			}
			for i := range c.n {
				g.members = append(g.members, fmt.Sprintf("m%02d", i))
			}
			log.Printf("groups: M=%d N=%d: first convergence", c.m, c.n)
			iv0, took0, moves0, err := g.converge(ctx)
			if err != nil {
				return err
			}
			// Steady state: the cost of an interval with nothing to move.
			g.syncTime, g.syncs = 0, 0
			for range 5 {
				if _, err := g.interval(ctx); err != nil {
					return err
				}
			}
			steadyInterval, steadySync := g.syncTime/5, g.syncTime/time.Duration(g.syncs)
			rows = append(rows, row{c.m, c.n, fmt.Sprintf("start (0→%d)", c.n), iv0, took0, moves0,
				int64(c.m), steadyInterval, steadySync})
			if c.m > 1024 {
				continue
			}
			// A join.
			g.members = append(g.members, "joiner")
			log.Printf("groups: M=%d N=%d: a join", c.m, c.n)
			iv, took, moves, err := g.converge(ctx)
			if err != nil {
				return err
			}
			rows = append(rows, row{c.m, c.n, fmt.Sprintf("join (%d→%d)", c.n, c.n+1), iv, took, moves,
				int64(c.m / (c.n + 1)), steadyInterval, steadySync})
			// A kill: the first member stops syncing; its shards lapse after the TTL.
			g.members = g.members[1:]
			log.Printf("groups: M=%d N=%d: a kill", c.m, c.n)
			iv, took, moves, err = g.converge(ctx)
			if err != nil {
				return err
			}
			rows = append(rows, row{c.m, c.n, fmt.Sprintf("kill (%d→%d)", c.n+1, c.n), iv, took, moves,
				int64((c.m + c.n) / (c.n + 1)), steadyInterval, steadySync})
		}
		return nil
	})
	if err != nil {
		return err
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	fmt.Printf("## Shard groups: convergence, moves and server time (TTL %s, interval %s)\n\n", groupTTL, groupInterval)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs. One connection simulates the members: an interval is one group_sync per member, in turn, and a group_release of each shard it was asked to hand over (a workload that returns at once). \"Intervals\" counts intervals until every member owns floor or ceil of M/N; a kill's time includes the TTL the dead member's shards must lapse. Moves are new tenures (fence increments) against the minimum (the joiner's share; the dead member's shards). Server time is the sum of the calls' durations on a local connection, in the steady state before the join. M=10000 runs with a TTL of %s (an interval of its 16 syncs takes longer than %s): its start and steady state only.\n\n",
		load, loadavg(), runtime.NumCPU(), bigTTL, groupTTL)
	fmt.Println("| M | N | Event | Intervals | Time (s) | Moves | Minimum | Server time per interval (ms) | per group_sync (ms) |")
	fmt.Println("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %d | %s | %d | %.2f | %d | %d | %.2f | %.3f |\n", r.m, r.n, r.event, r.intervals, r.took.Seconds(),
			r.moves, r.minimum, ms(r.perInterval), ms(r.perSync))
	}
	fmt.Println()
	return nil
}
