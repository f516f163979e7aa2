package shardgroup_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/shardgroup"
)

// Example runs one worker of a partitioned outbox dispatcher: 4 partitions,
// each dispatched under its shard's fence. Alone, the worker owns them
// all; more workers running this would share them.
func Example() {
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	var (
		mu      sync.Mutex
		running []string
		all     = make(chan struct{})
	)
	w, err := shardgroup.New(pool, shardgroup.Config{Group: "outbox-example", Shards: 4, Member: "worker-1", TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	dispatch := func(ctx context.Context, s shardgroup.Shard) error {
		// A fenced write: it commits only while this tenure is current.
		if err := pglease.WithFence(ctx, pool, s.LeaseName(), s.Fence, func(tx pgx.Tx) error { return nil }); err != nil {
			return err
		}
		mu.Lock()
		running = append(running, s.Name)
		if len(running) == 4 {
			close(all)
		}
		mu.Unlock()
		<-ctx.Done() // dispatch partition s.Name until the shard moves
		return nil
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), dispatch) }()
	<-all
	mu.Lock()
	slices.Sort(running)
	fmt.Println("dispatching partitions", running)
	mu.Unlock()
	if err := w.Leave(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", <-done)
	// Output:
	// dispatching partitions [0 1 2 3]
	// left: shardgroup: left the group
}
