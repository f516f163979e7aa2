// Command shards is a partitioned outbox dispatcher on a pglease shard
// group (docs/groups.md), with a timeline of one join and one kill: worker
// w1 starts alone and owns all 8 partitions; w2 joins and takes half, each
// handed over gracefully (w1's dispatcher returns before the release, w2
// starts on the release's NOTIFY); then w1 is cut off from the database as
// a kill -9 would, and w2 owns everything again within TTL + one interval,
// every partition with a larger fence.
//
//	PGLEASE_DATABASE_URL=postgres://... go run ./examples/shards
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/shardgroup"
)

const (
	partitions = 8
	ttl        = 3 * time.Second
	interval   = time.Second
)

var (
	start = time.Now()
	mu    sync.Mutex
	owned = map[string]int{} // worker -> partitions dispatching
	moved = make(chan struct{}, 1)
)

func say(format string, args ...any) {
	fmt.Printf("%6.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// dispatcher dispatches one outbox partition until the shard moves: each
// batch is a fenced transaction, committed only while the tenure is
// current.
func dispatcher(worker string, pool *pgxpool.Pool) shardgroup.Func {
	return func(ctx context.Context, s shardgroup.Shard) error {
		say("%s starts partition %s (fence %d)", worker, s.Name, s.Fence)
		mu.Lock()
		owned[worker]++
		mu.Unlock()
		signal()
		defer func() {
			mu.Lock()
			owned[worker]--
			mu.Unlock()
			say("%s stopped partition %s", worker, s.Name)
			signal()
		}()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			// SELECT ... FROM outbox WHERE partition = s.Name FOR UPDATE SKIP LOCKED; publish; DELETE ...
			_ = pglease.WithFence(ctx, pool, s.LeaseName(), s.Fence, func(tx pgx.Tx) error { return nil })
		}
	}
}

func signal() {
	select {
	case moved <- struct{}{}:
	default:
	}
}

// await waits until w1 and w2 run the given numbers of partitions.
func await(w1, w2 int) {
	for {
		mu.Lock()
		ok := owned["w1"] == w1 && owned["w2"] == w2
		mu.Unlock()
		if ok {
			return
		}
		<-moved
	}
}

func main() {
	url := cmp.Or(os.Getenv("PGLEASE_DATABASE_URL"), os.Getenv("DATABASE_URL"))
	if url == "" {
		log.Fatal("shards: set PGLEASE_DATABASE_URL to a database with pglease 0.3.0 migrated")
	}
	ctx := context.Background()
	group := fmt.Sprintf("outbox-demo-%d", time.Now().Unix())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // w1's failing syncs after the cut
	run := func(name string) (*pgxpool.Pool, *shardgroup.Worker) {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			log.Fatal(err)
		}
		w, err := shardgroup.New(pool, shardgroup.Config{Group: group, Shards: partitions, Member: name,
			TTL: ttl, Interval: interval, Logger: quiet})
		if err != nil {
			log.Fatal(err)
		}
		go func() { _ = w.Run(ctx, dispatcher(name, pool)) }()
		return pool, w
	}

	say("w1 joins group %s (%d partitions, TTL %s, interval %s)", group, partitions, ttl, interval)
	pool1, _ := run("w1")
	await(partitions, 0)
	say("w1 owns all %d partitions", partitions)

	say("w2 joins")
	joined := time.Now()
	_, w2 := run("w2")
	await(partitions/2, partitions/2)
	say("balanced 4/4 after %s: each moved partition stopped on w1 before w2 started it", time.Since(joined).Round(time.Millisecond))

	say("w1 is cut off from the database (as a kill -9 would leave its tenures)")
	killed := time.Now()
	go pool1.Close() // its syncs fail from now on; its LISTEN connection is its own
	await(0, partitions)
	say("w2 owns all %d partitions %s after the cut (bound: TTL + interval = %s); w1's dispatchers had stopped at their deadline",
		partitions, time.Since(killed).Round(time.Millisecond), ttl+interval)

	if err := w2.Leave(ctx); err != nil {
		log.Fatal(err)
	}
	say("w2 left; every partition released")
}
