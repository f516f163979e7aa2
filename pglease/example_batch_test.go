package pglease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// Example_batched locks per entity from many goroutines sharing one
// Client: their concurrent TryAcquire and Release calls are coalesced into
// batched calls (acquire_batch, release_batch), each name still decided on
// its own, each Lease with its own fence and Deadline.
func Example_batched() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for order := range 5 {
				lease, err := client.TryAcquire(ctx, fmt.Sprintf("example-order:%d-%d", i, order), 30*time.Second)
				if err != nil {
					log.Fatal(err)
				}
				// ... work on the order under lease.Fence() ...
				if err := lease.Release(ctx); err != nil {
					log.Fatal(err)
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println(done.Load(), "orders locked and released")
	// Output: 40 orders locked and released
}
