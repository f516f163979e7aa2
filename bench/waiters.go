package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// The waiters run (-waiters N): N standbys block in Acquire on one lease,
// spread over waiterClients clients (processes, as far as the server can
// tell: each has its own pool and its own LISTEN connection). First they
// wait while a holder keeps the lease, and the server's CPU is read; then
// the holder releases and every winner releases at once, so that each
// release hands over to one of the remaining standbys, waiterHandovers
// times.
const (
	waiterClients   = 10
	waiterConns     = 4 // pool size of each client
	waiterTTL       = time.Minute
	waiterIdle      = 10 * time.Second // the wait whose server CPU is read
	waiterHandovers = 50
	waiterLease     = "bench/waiters"
)

// WaitersResult is the waiters run.
type WaitersResult struct {
	Waiters          int       `json:"waiters"`
	Clients          int       `json:"clients"`
	IdleServerCPU    float64   `json:"idle_server_cpu_cores"` // backends' CPU while all wait
	IdleAcquires     int64     `json:"idle_acquires"`         // acquire calls while all wait
	HandoverMs       []float64 `json:"handover_ms"`           // release sent to the next grant
	AcquiresPerHand  float64   `json:"acquires_per_handover"` // acquire calls per handover
	ServerCPUPerHand float64   `json:"server_cpu_ms_per_handover"`
}

func runWaitersBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_waiters"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	load := loadavg()
	res, err := benchWaiters(ctx, sc.url, cfg.waiters)
	if err != nil {
		return err
	}
	hs := slices.Clone(res.HandoverMs)
	slices.Sort(hs)
	q := func(p int) float64 { return hs[min(len(hs)-1, len(hs)*p/100)] }
	fmt.Printf("## Standbys on one lease (%d waiting in Acquire, over %d clients)\n\n", res.Waiters, res.Clients)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs. Each client has a pool of %d connections and a LISTEN connection of its own. Server CPU: utime+stime of the database's backends (/proc/<pid>/stat).\n\n",
		load, loadavg(), runtime.NumCPU(), waiterConns)
	fmt.Println("| What | Measured |")
	fmt.Println("|---|---|")
	fmt.Printf("| server CPU while %d standbys wait (%s, lease held) | %.3f cores, %d acquire calls |\n", res.Waiters, waiterIdle, res.IdleServerCPU, res.IdleAcquires)
	fmt.Printf("| handover, release sent to the next standby's grant (n=%d) | p50 %.1f ms, p90 %.1f ms, max %.1f ms |\n", len(hs), q(50), q(90), hs[len(hs)-1])
	fmt.Printf("| acquire calls per handover (the NOTIFY's fan-out) | %.0f |\n", res.AcquiresPerHand)
	fmt.Printf("| server CPU per handover | %.0f ms |\n", res.ServerCPUPerHand)
	return nil
}

// benchWaiters runs n standbys against one holder; see the constants.
func benchWaiters(ctx context.Context, url string, n int) (WaitersResult, error) {
	res := WaitersResult{Waiters: n, Clients: waiterClients}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var pools []*acquireCounter
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	newClient := func(onWait func(error)) (*pglease.Client, error) {
		pcfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return nil, err
		}
		pcfg.MaxConns = waiterConns
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return nil, err
		}
		cp := &acquireCounter{Pool: pool}
		pools = append(pools, cp)
		return pglease.New(cp, pglease.Config{PurgeEvery: -1, OnWait: onWait})
	}
	holderClient, err := newClient(nil)
	if err != nil {
		return res, err
	}
	held, err := holderClient.TryAcquire(ctx, waiterLease, waiterTTL)
	if err != nil {
		return res, fmt.Errorf("the holder's acquire: %w", err)
	}

	// Before the release, a standby is refused once and then waits for the
	// NOTIFY (the holder's expiry is far off): n refusals in all mean that
	// every standby waits.
	var refusals atomic.Int64
	allWaiting := make(chan struct{})
	onWait := func(error) {
		if refusals.Add(1) == int64(n) {
			close(allWaiting)
		}
	}
	var (
		mu       sync.Mutex
		released = make(chan time.Time, 1) // the last release's send time
		grants   []time.Duration
		granted  atomic.Int64
	)
	done := make(chan struct{})
	var standbys sync.WaitGroup
	clients := make([]*pglease.Client, waiterClients)
	for c := range clients {
		if clients[c], err = newClient(onWait); err != nil {
			return res, err
		}
	}
	for i := range n {
		client := clients[i%waiterClients]
		standbys.Go(func() {
			l, err := client.Acquire(ctx, waiterLease, waiterTTL)
			if err != nil {
				return // cancelled at the end
			}
			now := time.Now()
			mu.Lock()
			select {
			case sent := <-released:
				grants = append(grants, now.Sub(sent))
			default:
			}
			mu.Unlock()
			if granted.Add(1) == waiterHandovers {
				close(done)
				return // keep the lease: the run is over
			}
			released <- time.Now()
			_ = l.Release(ctx)
		})
	}
	select {
	case <-allWaiting:
	case <-time.After(2 * time.Minute):
		return res, fmt.Errorf("%d of %d standbys waiting after 2 minutes", refusals.Load(), n)
	}
	log.Printf("waiters: %d standbys waiting", n)

	all := pools[0].Pool
	ticks0, err := backendTicks(ctx, all)
	if err != nil {
		return res, err
	}
	calls0 := sumCalls(pools)
	select {
	case <-time.After(waiterIdle):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	ticks1, err := backendTicks(ctx, all)
	if err != nil {
		return res, err
	}
	res.IdleServerCPU = tickSeconds(ticks0, ticks1) / waiterIdle.Seconds()
	res.IdleAcquires = sumCalls(pools) - calls0

	calls0 = sumCalls(pools)
	released <- time.Now()
	if err := held.Release(ctx); err != nil {
		return res, fmt.Errorf("the holder's release: %w", err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		return res, fmt.Errorf("%d of %d handovers within 5 minutes", granted.Load(), waiterHandovers)
	}
	ticks2, err := backendTicks(ctx, all)
	if err != nil {
		return res, err
	}
	res.AcquiresPerHand = float64(sumCalls(pools)-calls0) / waiterHandovers
	res.ServerCPUPerHand = tickSeconds(ticks1, ticks2) * 1000 / waiterHandovers
	mu.Lock()
	for _, d := range grants {
		res.HandoverMs = append(res.HandoverMs, ms(d))
	}
	mu.Unlock()
	cancel()
	standbys.Wait()
	return res, nil
}

// sumCalls returns the calls counted on every pool.
func sumCalls(pools []*acquireCounter) int64 {
	var n int64
	for _, p := range pools {
		n += p.calls.Load()
	}
	return n
}

// tickSeconds returns the CPU seconds the backends spent between two
// readings of backendTicks (backends that ended in between are not counted).
func tickSeconds(before, after map[int]int64) float64 {
	var ticks int64
	for pid, t := range after {
		ticks += t - before[pid]
	}
	return float64(ticks) / clockTicks
}

// acquireCounter is a pool that counts the acquire calls made on it, and
// opens LISTEN connections as the pool opens its own.
type acquireCounter struct {
	*pgxpool.Pool
	calls atomic.Int64
}

func (p *acquireCounter) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "name: LeaseAcquire") {
		p.calls.Add(1)
	}
	return p.Pool.QueryRow(ctx, sql, args...)
}

// ListenConn implements pglease.Listener.
func (p *acquireCounter) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	return pgx.ConnectConfig(ctx, p.Config().ConnConfig.Copy())
}
