package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// The keeper comparison (-keeper-leases): one process holds n leases at
// keeperTTL under Lease.Run, kept either by one pglease.Keeper (one
// renew_holder call per interval) or by n keep loops (one renew per lease
// per interval), for keeperWindow each.
const (
	keeperTTL      = 15 * time.Second
	keeperInterval = keeperTTL / 3 // the default of both the keeper and Run
	keeperWindow   = 3 * keeperTTL
	keeperConns    = 8      // pool size of the holding process
	keeperAcquirer = 16     // concurrent acquires while setting up
	clockTicks     = 100    // USER_HZ: /proc/<pid>/stat counts CPU time in 1/100 s on Linux
	maxSeparate    = 10_000 // the largest size run with a keep loop per lease too
)

// KeeperRow is one size and mode of the keeper comparison.
type KeeperRow struct {
	Leases         int     `json:"leases"`
	Mode           string  `json:"mode"` // "keeper" or "separate"
	CallsPerInt    float64 `json:"calls_per_interval"`
	ServerCPUPerS  float64 `json:"server_cpu_s_per_s"` // backends' CPU seconds per second
	ServerCPUPerIn float64 `json:"server_cpu_ms_per_interval"`
	ClientCPUPerS  float64 `json:"client_cpu_s_per_s"`
	RoundMs        float64 `json:"round_ms"` // mean duration of one renewal call
	HeldLocal      int     `json:"held_local"`
	HeldServer     int     `json:"held_server"`
	Lost           int     `json:"lost"`
}

// countingPool is a pool that counts and times the renewal calls made on it.
type countingPool struct {
	*pgxpool.Pool
	calls, nanos atomic.Int64
}

func (p *countingPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !strings.Contains(sql, "name: LeaseRenew") && !strings.Contains(sql, "name: HolderRenew") {
		return p.Pool.QueryRow(ctx, sql, args...)
	}
	start := time.Now()
	row := p.Pool.QueryRow(ctx, sql, args...)
	return timedRow{row, p, start}
}

// timedRow counts its call once scanned (pgx runs the query on Scan).
type timedRow struct {
	pgx.Row
	p     *countingPool
	start time.Time
}

func (r timedRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	r.p.calls.Add(1)
	r.p.nanos.Add(int64(time.Since(r.start)))
	return err
}

// runKeeperBench runs the keeper comparison for each size on a scratch
// database and prints its markdown section.
func runKeeperBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_keeper"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	load := loadavg()
	var rows []KeeperRow
	for _, n := range cfg.keeperLeases {
		for _, mode := range []string{"keeper", "separate"} {
			if mode == "separate" && n > maxSeparate {
				log.Printf("keeper comparison: %d leases, separate: skipped (more than %d keep loops queue past their deadlines on %d connections)", n, maxSeparate, keeperConns)
				continue
			}
			log.Printf("keeper comparison: %d leases, %s, %s", n, mode, keeperWindow)
			row, err := benchKeeper(ctx, sc.url, n, mode)
			if err != nil {
				return fmt.Errorf("%d leases, %s: %w", n, mode, err)
			}
			rows = append(rows, row)
		}
	}
	fmt.Printf("## One round trip per process (TTL %s, interval %s, window %s)\n\n", keeperTTL, keeperInterval, keeperWindow)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs. Server CPU: utime+stime of the holding process's backends (/proc/<pid>/stat).\n\n",
		load, loadavg(), runtime.NumCPU())
	fmt.Println("| Leases | Kept by | Renewal calls per interval | Mean call | Server CPU per interval | Server CPU (cores) | Client CPU (cores) | Held (local / server) | Lost |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %s | %.0f | %.1f ms | %.0f ms | %.3f | %.3f | %d / %d | %d |\n",
			r.Leases, r.Mode, r.CallsPerInt, r.RoundMs, r.ServerCPUPerIn, r.ServerCPUPerS, r.ClientCPUPerS, r.HeldLocal, r.HeldServer, r.Lost)
	}
	return nil
}

// benchKeeper holds n leases under Lease.Run for keeperWindow, kept as mode
// says, and measures the renewals.
func benchKeeper(ctx context.Context, url string, n int, mode string) (KeeperRow, error) {
	row := KeeperRow{Leases: n, Mode: mode}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return row, err
	}
	pcfg.MaxConns = keeperConns
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return row, err
	}
	defer pool.Close()
	db := &countingPool{Pool: pool}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ccfg := pglease.Config{}
	var keeperDone chan error
	if mode == "keeper" {
		k, err := pglease.NewKeeper(db, pglease.KeeperConfig{TTL: keeperTTL})
		if err != nil {
			return row, err
		}
		ccfg.Keeper = k
		keeperDone = make(chan error, 1)
		go func() { keeperDone <- k.Serve(ctx) }()
	}
	client, err := pglease.New(db, ccfg)
	if err != nil {
		return row, err
	}

	leases := make([]*pglease.Lease, n)
	prefix := fmt.Sprintf("keeper/%s/%d/", mode, n)
	var next atomic.Int64
	if err := parallel(keeperAcquirer, func(int) error {
		for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
			l, err := client.TryAcquire(ctx, prefix+strconv.Itoa(i), keeperTTL)
			if err != nil {
				return err
			}
			leases[i] = l
		}
		return nil
	}); err != nil {
		return row, fmt.Errorf("acquire: %w", err)
	}

	var lost atomic.Int64
	var runs sync.WaitGroup
	runCtx, stopRuns := context.WithCancel(ctx)
	for _, l := range leases {
		runs.Go(func() {
			err := l.Run(runCtx, func(ctx context.Context) error { <-ctx.Done(); return nil })
			if errors.Is(err, pglease.ErrLeaseLost) {
				lost.Add(1)
			}
		})
	}

	server0, err := backendTicks(ctx, pool)
	if err != nil {
		stopRuns()
		runs.Wait()
		return row, err
	}
	client0 := rusageSeconds()
	calls0, nanos0 := db.calls.Load(), db.nanos.Load()
	start := time.Now()
	select {
	case <-time.After(keeperWindow):
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	calls, nanos := db.calls.Load()-calls0, db.nanos.Load()-nanos0
	client1 := rusageSeconds()
	server1, err := backendTicks(ctx, pool)
	if err == nil {
		err = pool.QueryRow(ctx, "SELECT count(*) FROM pglease.leases WHERE holder = $1 AND expires_at > now()",
			client.Holder()).Scan(&row.HeldServer)
	}
	for _, l := range leases {
		select {
		case <-l.Done():
		default:
			row.HeldLocal++
		}
	}
	stopRuns()
	runs.Wait()
	cancel()
	if keeperDone != nil {
		<-keeperDone
	}
	if err != nil {
		return row, err
	}
	var ticks int64
	for pid, t := range server1 {
		ticks += t - server0[pid]
	}
	intervals := elapsed.Seconds() / keeperInterval.Seconds()
	row.CallsPerInt = float64(calls) / intervals
	if calls > 0 {
		row.RoundMs = float64(nanos) / float64(calls) / 1e6
	}
	serverS := float64(ticks) / clockTicks
	row.ServerCPUPerS = serverS / elapsed.Seconds()
	row.ServerCPUPerIn = serverS * 1000 / intervals
	row.ClientCPUPerS = (client1 - client0) / elapsed.Seconds()
	row.Lost = int(lost.Load())
	return row, nil
}

// backendTicks returns the CPU time (utime + stime, in clock ticks) of each
// backend connected to the pool's database, read from /proc: the server
// must run on this machine.
func backendTicks(ctx context.Context, pool *pgxpool.Pool) (map[int]int64, error) {
	rows, _ := pool.Query(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'")
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("list the backends: %w", err)
	}
	ticks := make(map[int]int64, len(pids))
	for _, pid := range pids {
		t, err := processTicks(pid)
		if err != nil {
			return nil, fmt.Errorf("read a backend's CPU time (the server must run on this machine): %w", err)
		}
		ticks[pid] = t
	}
	return ticks, nil
}

// rusageSeconds returns this process's user + system CPU time in seconds.
func rusageSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
