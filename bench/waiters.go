package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The waiters run (-waiters N): N standbys wait for one lease, each a
// holder of its own as N processes would be, and each doing what a Go
// client's Acquire does: acquire; when refused, wait for a release NOTIFY
// (then retry after a random delay of up to waiterJitter) or for the
// reported expiry. The server allows some 100 connections, so the standbys
// are grouped into waiterClients processes, each with a pool of
// waiterConns connections and one LISTEN connection shared by its
// standbys (a Go client shares its LISTEN connection among its waiters
// alike). First all wait while a holder keeps the lease, and the server's
// CPU is read; then the holder releases, and each standby granted the
// lease holds it for waiterHold and releases, waiterHandovers times.
const (
	waiterClients   = 10
	waiterConns     = 4 // pool size of each process
	waiterTTL       = time.Minute
	waiterIdle      = 10 * time.Second // the wait whose server CPU is read
	waiterHandovers = 30
	waiterHold      = 300 * time.Millisecond // each winner's tenure before it releases
	waiterJitter    = 20 * time.Millisecond  // as the Go client's
	waiterLease     = "bench/waiters"
	waiterAcquire   = `SELECT acquired, fence, expires_in FROM pglease.acquire($1, $2, $3, NULL)`
	waiterRelease   = `SELECT released FROM pglease.release($1, $2, $3)`
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
	fmt.Printf("## Standbys on one lease (%d holders waiting, in %d processes)\n\n", res.Waiters, res.Clients)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs. Each standby is a holder of its own and waits as the Go client's Acquire does (the four-argument acquire; refused, it waits for a release NOTIFY and retries after a random delay of up to %s, or for the reported expiry). Each process has a pool of %d connections and one LISTEN connection its standbys share. Each standby granted the lease holds it %s, then releases. Server CPU: utime+stime of the database's backends (/proc/<pid>/stat).\n\n",
		load, loadavg(), runtime.NumCPU(), waiterJitter, waiterConns, waiterHold)
	fmt.Println("| What | Measured |")
	fmt.Println("|---|---|")
	fmt.Printf("| server CPU while %d standbys wait (%s, lease held) | %.3f cores, %d acquire calls |\n", res.Waiters, waiterIdle, res.IdleServerCPU, res.IdleAcquires)
	fmt.Printf("| handover, release sent to the next standby's grant (n=%d) | p50 %.1f ms, p90 %.1f ms, max %.1f ms |\n", len(hs), q(50), q(90), hs[len(hs)-1])
	fmt.Printf("| acquire calls per handover (the NOTIFY's fan-out) | %.0f |\n", res.AcquiresPerHand)
	fmt.Printf("| server CPU per handover | %.0f ms |\n", res.ServerCPUPerHand)
	return nil
}

// waiterProcess is one process's pool, and the broadcast of the release
// NOTIFYs its LISTEN connection receives.
type waiterProcess struct {
	pool  *pgxpool.Pool
	calls atomic.Int64 // acquire calls
	mu    sync.Mutex
	gen   chan struct{} // closed at the next NOTIFY of the lease
}

// next returns a channel closed at the next NOTIFY of the lease.
func (p *waiterProcess) next() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.gen
}

// listen LISTENs on conn until ctx ends, waking the standbys at each
// NOTIFY of the lease.
func (p *waiterProcess) listen(ctx context.Context, conn *pgx.Conn) {
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return
		}
		var payload struct{ Name string }
		if json.Unmarshal([]byte(n.Payload), &payload) != nil || payload.Name != waiterLease {
			continue
		}
		p.mu.Lock()
		close(p.gen)
		p.gen = make(chan struct{})
		p.mu.Unlock()
	}
}

// acquire makes one acquire for holder and counts it.
func (p *waiterProcess) acquire(ctx context.Context, holder string) (ok bool, fence int64, expiresIn time.Duration, err error) {
	p.calls.Add(1)
	err = p.pool.QueryRow(ctx, waiterAcquire, waiterLease, holder, waiterTTL).Scan(&ok, &fence, &expiresIn)
	return ok, fence, expiresIn, err
}

// benchWaiters runs n standbys against one holder; see the constants.
func benchWaiters(ctx context.Context, url string, n int) (WaitersResult, error) {
	res := WaitersResult{Waiters: n, Clients: waiterClients}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	procs := make([]*waiterProcess, waiterClients)
	var listeners sync.WaitGroup
	defer listeners.Wait()
	defer cancel()
	for i := range procs {
		pcfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			return res, err
		}
		pcfg.MaxConns = waiterConns
		pool, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return res, err
		}
		defer pool.Close()
		conn, err := pgx.ConnectConfig(ctx, pcfg.ConnConfig.Copy())
		if err != nil {
			return res, err
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(ctx, "LISTEN pglease"); err != nil {
			return res, err
		}
		procs[i] = &waiterProcess{pool: pool, gen: make(chan struct{})}
		listeners.Go(func() { procs[i].listen(ctx, conn) })
	}
	ok, fence, _, err := procs[0].acquire(ctx, "holder")
	if err != nil || !ok {
		return res, fmt.Errorf("the holder's acquire: granted %v, %w", ok, err)
	}

	var (
		refusals   atomic.Int64
		allWaiting = make(chan struct{})
		mu         sync.Mutex
		released   = make(chan time.Time, 1) // the last release's send time
		grants     []time.Duration
		granted    atomic.Int64
		done       = make(chan struct{})
		standbys   sync.WaitGroup
		errs       = make(chan error, n)
	)
	for i := range n {
		p, holder := procs[i%waiterClients], fmt.Sprintf("standby-%d", i)
		standbys.Go(func() {
			for first := true; ; first = false {
				wake := p.next() // before the call: a NOTIFY during it is not lost
				ok, fence, expiresIn, err := p.acquire(ctx, holder)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if ok {
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
					select {
					case <-time.After(waiterHold):
					case <-ctx.Done():
						return
					}
					released <- time.Now()
					if _, err := p.pool.Exec(ctx, waiterRelease, waiterLease, holder, fence); err != nil && ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if first && refusals.Add(1) == int64(n) {
					close(allWaiting)
				}
				select {
				case <-wake:
					select {
					case <-time.After(rand.N(waiterJitter)):
					case <-ctx.Done():
						return
					}
				case <-time.After(expiresIn):
				case <-ctx.Done():
					return
				}
			}
		})
	}
	defer standbys.Wait()
	defer cancel()
	select {
	case <-allWaiting:
	case err := <-errs:
		return res, err
	case <-time.After(2 * time.Minute):
		return res, fmt.Errorf("%d of %d standbys waiting after 2 minutes", refusals.Load(), n)
	}
	log.Printf("waiters: %d standbys waiting", n)

	all := procs[0].pool
	ticks0, err := backendTicks(ctx, all)
	if err != nil {
		return res, err
	}
	calls0 := sumCalls(procs)
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
	res.IdleAcquires = sumCalls(procs) - calls0

	calls0 = sumCalls(procs)
	released <- time.Now()
	if _, err := all.Exec(ctx, waiterRelease, waiterLease, "holder", fence); err != nil {
		return res, fmt.Errorf("the holder's release: %w", err)
	}
	select {
	case <-done:
	case err := <-errs:
		return res, err
	case <-time.After(5 * time.Minute):
		return res, fmt.Errorf("%d of %d handovers within 5 minutes", granted.Load(), waiterHandovers)
	}
	ticks2, err := backendTicks(ctx, all)
	if err != nil {
		return res, err
	}
	res.AcquiresPerHand = float64(sumCalls(procs)-calls0) / waiterHandovers
	res.ServerCPUPerHand = tickSeconds(ticks1, ticks2) * 1000 / waiterHandovers
	mu.Lock()
	for _, d := range grants {
		res.HandoverMs = append(res.HandoverMs, ms(d))
	}
	mu.Unlock()
	return res, nil
}

// sumCalls returns the calls counted on every pool.
func sumCalls(procs []*waiterProcess) int64 {
	var n int64
	for _, p := range procs {
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
