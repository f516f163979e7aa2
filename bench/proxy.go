package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/shardtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// proxyTarget is one way of reaching pglease in the proxy benchmark.
type proxyTarget struct {
	name string
	url  string
}

// runProxyBench is `bench proxy`: acquire + release throughput through a
// PL/Proxy proxy (migrations/proxy) against a direct connection to one
// partition, and over one, two and four partitions, on two throwaway
// clusters of this machine (internal/testing/shardtest). It prints a markdown
// table.
func runProxyBench(ctx context.Context, args []string, out io.Writer) (err error) {
	fs := flag.NewFlagSet("bench proxy", flag.ContinueOnError)
	d := fs.Duration("duration", 6*time.Second, "measured time per target and concurrency")
	rounds := fs.Int("rounds", 3, "turns each target's time is split into, interleaved with the other targets")
	clientsFlag := fs.String("clients", "1,8,32", "concurrencies")
	handovers := fs.Int("handovers", 10, "release handovers of each kind (0: none)")
	handoverTTL := fs.Duration("handover-ttl", time.Second, "TTL of the leases handed over")
	if err := fs.Parse(args); err != nil {
		return err
	}
	clients, err := parseInts(*clientsFlag)
	if err != nil {
		return fmt.Errorf("-clients: %w", err)
	}
	if *rounds < 1 || *d/time.Duration(*rounds) < 10*time.Millisecond {
		return errors.New("-duration / -rounds must be at least 10ms")
	}

	log.Printf("starting two throwaway clusters")
	fleet, err := shardtest.StartFleet(ctx, 2)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
		defer cancel()
		err = errors.Join(err, fleet.Stop(sctx))
	}()
	var targets []proxyTarget
	var four *shardtest.Sharded
	for _, n := range []int{1, 2, 4} {
		s, err := fleet.NewSharded(ctx, n)
		if err != nil {
			return err
		}
		four = s
		if n == 1 {
			targets = append(targets, proxyTarget{"direct to one partition (no proxy)", s.Partitions[0].URL})
		}
		targets = append(targets, proxyTarget{fmt.Sprintf("proxy, %d partition%s", n, map[bool]string{true: "s"}[n > 1]), s.ProxyURL})
	}

	fmt.Fprintf(out, "\n## Through PL/Proxy (`bench proxy`)\n\n")
	fmt.Fprintf(out, "acquire + release cycles of names of its own per client, ops/s (an acquire and a release are two ops); "+
		"partitions round-robin on two throwaway clusters of this machine, the proxy on the first; %s per cell in %d interleaved rounds.\n\n",
		*d, *rounds)
	fmt.Fprintf(out, "| Target |")
	for _, c := range clients {
		fmt.Fprintf(out, " C=%d |", c)
	}
	fmt.Fprintf(out, "\n|---|%s\n", strings.Repeat("---:|", len(clients)))
	results := make([][]float64, len(targets))
	for _, c := range clients {
		ops := make([]int64, len(targets))
		for r := range *rounds {
			for i, t := range targets {
				log.Printf("C=%d round %d/%d: %s", c, r+1, *rounds, t.name)
				n, err := acquireReleaseLoop(ctx, t.url, c, *d/time.Duration(*rounds))
				if err != nil {
					return fmt.Errorf("%s at C=%d: %w", t.name, c, err)
				}
				ops[i] += n
			}
		}
		for i := range targets {
			results[i] = append(results[i], float64(ops[i])/d.Seconds())
		}
	}
	for i, t := range targets {
		fmt.Fprintf(out, "| %s |", t.name)
		for j := range clients {
			fmt.Fprintf(out, " %.0f (%.2f×) |", results[i][j], results[i][j]/results[0][j])
		}
		fmt.Fprintln(out)
	}
	fmt.Fprintf(out, "\nRatios are to the direct connection in the same column. CPUs: %d, shared by the clients, the proxy and every partition.\n",
		runtime.NumCPU())
	if *handovers == 0 {
		return nil
	}
	log.Printf("%d handovers of each kind through the proxy over 4 partitions, TTL %s", *handovers, *handoverTTL)
	acquire, listen, err := proxyHandover(ctx, four, *handovers, *handoverTTL)
	if err != nil {
		return fmt.Errorf("handover: %w", err)
	}
	fmt.Fprintf(out, "\nRelease handover through the proxy (4 partitions, TTL %s, released a quarter TTL after the waiter was refused; from the holder's release call to the waiter holding the lease; %d each):\n\n", *handoverTTL, *handovers)
	fmt.Fprintf(out, "| Waiter | p50 | max |\n|---|---:|---:|\n")
	for _, h := range []struct {
		name string
		ds   []time.Duration
	}{{"Go client `Acquire` on the proxy (no NOTIFY: retries at the expiry it saw)", acquire}, {"LISTEN on the name's partition (`PartitionOf`), acquire through the proxy", listen}} {
		sorted := slices.Sorted(slices.Values(h.ds))
		fmt.Fprintf(out, "| %s | %.1f ms | %.1f ms |\n", h.name, ms(median(h.ds)), ms(sorted[len(sorted)-1]))
	}
	return nil
}

// acquireReleaseLoop runs c clients, each acquiring and releasing its own
// lease in a loop on url for d after one unmeasured cycle, and returns the
// ops done.
func acquireReleaseLoop(ctx context.Context, url string, c int, d time.Duration) (int64, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns, cfg.MinConns = int32(c), int32(c)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	cycle := func(name string) error {
		var fence int64
		if err := pool.QueryRow(ctx, `SELECT fence FROM pglease.acquire($1, 'bench', interval '1 minute') WHERE acquired`, name).Scan(&fence); err != nil {
			return fmt.Errorf("acquire %s: %w", name, err)
		}
		var released bool
		if err := pool.QueryRow(ctx, `SELECT released FROM pglease.release($1, 'bench', $2)`, name, fence).Scan(&released); err != nil || !released {
			return fmt.Errorf("release %s: %v, %w", name, released, err)
		}
		return nil
	}
	var ops atomic.Int64
	var start sync.WaitGroup
	var wg sync.WaitGroup
	errs := make([]error, c)
	begin := make(chan struct{})
	var deadline atomic.Value
	for i := range c {
		start.Add(1)
		wg.Go(func() {
			name := fmt.Sprintf("bench-proxy-%d-%d", c, i)
			errs[i] = cycle(name) // warm-up: connection, prepared statements, PL/Proxy's connection
			start.Done()
			<-begin
			end := deadline.Load().(time.Time)
			for errs[i] == nil && time.Now().Before(end) {
				if errs[i] = cycle(name); errs[i] == nil {
					ops.Add(2)
				}
			}
		})
	}
	start.Wait()
	deadline.Store(time.Now().Add(d))
	close(begin)
	wg.Wait()
	return ops.Load(), errors.Join(errs...)
}

// proxyCommand runs `bench proxy [flags]` when args start with it, and
// reports whether they did.
func proxyCommand(args []string) (bool, error) {
	if len(args) == 0 || args[0] != "proxy" {
		return false, nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return true, runProxyBench(ctx, args[1:], os.Stdout)
}

// proxyHandover measures, trials times each, how long after a release made
// through the proxy a waiter gets the lease: the Go client's Acquire on the
// proxy (it listens on the proxy, where no NOTIFY arrives, so it retries
// at the expiry it saw), and a waiter that LISTENs on the name's partition
// (pgleaseadmin.PartitionOf and Partition.Config). Each trial releases a
// quarter of the TTL after the waiter registered.
func proxyHandover(ctx context.Context, s *shardtest.Sharded, trials int, ttl time.Duration) (acquire, listen []time.Duration, err error) {
	pool, err := pgxpool.New(ctx, s.ProxyURL)
	if err != nil {
		return nil, nil, err
	}
	defer pool.Close()
	holder, err := pglease.New(pool, pglease.Config{Holder: "bench-holder"})
	if err != nil {
		return nil, nil, err
	}
	waiter, err := pglease.New(pool, pglease.Config{Holder: "bench-waiter"})
	if err != nil {
		return nil, nil, err
	}
	for i := range 2 * trials {
		viaPartition := i%2 == 1
		name := fmt.Sprintf("bench-handover-%d", i)
		part, err := pgleaseadmin.PartitionOf(ctx, pool, name)
		if err != nil {
			return nil, nil, err
		}
		partCfg, err := part.Config(pool.Config().ConnConfig)
		if err != nil {
			return nil, nil, err
		}
		partConn, err := pgx.ConnectConfig(ctx, partCfg)
		if err != nil {
			return nil, nil, err
		}
		lease, err := holder.TryAcquire(ctx, name, ttl)
		if err != nil {
			_ = partConn.Close(ctx)
			return nil, nil, err
		}
		got := make(chan error, 1)
		var gotAt atomic.Int64
		if viaPartition {
			go func() {
				at, err := waitOnPartition(ctx, pool, partCfg, name, ttl)
				gotAt.Store(at.UnixNano())
				got <- err
			}()
		} else {
			go func() {
				l, err := waiter.Acquire(ctx, name, ttl)
				gotAt.Store(time.Now().UnixNano())
				if err == nil {
					err = l.Release(ctx)
				}
				got <- err
			}()
		}
		// The waiter registered (refused once), then a quarter TTL.
		deadline := time.Now().Add(10 * time.Second)
		for {
			var n int
			if err := partConn.QueryRow(ctx, `SELECT count(*) FROM pglease.waiters WHERE kind = 'lease' AND name = $1`, name).Scan(&n); err != nil {
				return nil, nil, err
			}
			if n > 0 {
				break
			}
			select {
			case err := <-got:
				return nil, nil, fmt.Errorf("waiter on %s returned before the release: %v", name, err)
			case <-time.After(time.Millisecond):
			}
			if time.Now().After(deadline) {
				return nil, nil, fmt.Errorf("no waiter registered for %s on partition %d after 10s", name, part.Index)
			}
		}
		time.Sleep(ttl / 4)
		released := time.Now()
		if err := lease.Release(ctx); err != nil {
			return nil, nil, err
		}
		if err := <-got; err != nil {
			return nil, nil, err
		}
		d := time.Duration(gotAt.Load() - released.UnixNano())
		if viaPartition {
			listen = append(listen, d)
		} else {
			acquire = append(acquire, d)
		}
		if err := partConn.Close(ctx); err != nil {
			return nil, nil, err
		}
	}
	return acquire, listen, nil
}

// waitOnPartition acquires name through the proxy pool, waiting on a
// connection of its own to the name's partition (cfg): LISTEN there, and
// retry at each notification or at the expiry the refusal reported. It
// returns when it acquired the lease (then released it).
func waitOnPartition(ctx context.Context, pool *pgxpool.Pool, cfg *pgx.ConnConfig, name string, ttl time.Duration) (time.Time, error) {
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return time.Time{}, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if _, err := conn.Exec(ctx, `LISTEN `+pglease.NotifyChannel); err != nil {
		return time.Time{}, err
	}
	for {
		var acquired bool
		var fence int64
		var expiresIn time.Duration
		err := pool.QueryRow(ctx, `SELECT acquired, fence, expires_in FROM pglease.acquire($1, 'bench-listener', $2)`, name, ttl).
			Scan(&acquired, &fence, &expiresIn)
		if err != nil {
			return time.Time{}, err
		}
		if acquired {
			at := time.Now()
			_, err := pool.Exec(ctx, `SELECT pglease.release($1, 'bench-listener', $2)`, name, fence)
			return at, err
		}
		wctx, cancel := context.WithTimeout(ctx, expiresIn)
		_, err = conn.WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return time.Time{}, ctx.Err()
		}
	}
}
