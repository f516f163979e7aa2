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
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/shardtest"
)

// proxyTarget is one way of reaching pglease in the proxy benchmark.
type proxyTarget struct {
	name string
	url  string
}

// runProxyBench is `bench proxy`: acquire + release throughput through a
// PL/Proxy proxy (migrations/proxy) against a direct connection to one
// partition, and over one, two and four partitions, on two throwaway
// clusters of this machine (internal/shardtest). It prints a markdown
// table.
func runProxyBench(ctx context.Context, args []string, out io.Writer) (err error) {
	fs := flag.NewFlagSet("bench proxy", flag.ContinueOnError)
	d := fs.Duration("duration", 6*time.Second, "measured time per target and concurrency")
	rounds := fs.Int("rounds", 3, "turns each target's time is split into, interleaved with the other targets")
	clientsFlag := fs.String("clients", "1,8,32", "concurrencies")
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
	for _, n := range []int{1, 2, 4} {
		s, err := fleet.NewSharded(ctx, n)
		if err != nil {
			return err
		}
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
