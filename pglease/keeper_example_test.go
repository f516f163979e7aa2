package pglease_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
)

// ExampleKeeper keeps a process's shard leases and a tenant slot with one
// renew_holder call per interval, however many it holds.
func ExampleKeeper() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	keeper, err := pglease.NewKeeper(pool, pglease.KeeperConfig{}) // TTL 15s, a round every 5s
	if err != nil {
		log.Fatal(err)
	}
	kctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = keeper.Serve(kctx) })
	defer wg.Wait()
	defer stop()

	leases, err := pglease.New(pool, pglease.Config{Keeper: keeper})
	if err != nil {
		log.Fatal(err)
	}
	slots, err := runslots.New(pool, runslots.Config{Keeper: keeper})
	if err != nil {
		log.Fatal(err)
	}
	for i := range 100 {
		shard, err := leases.TryAcquire(ctx, fmt.Sprintf("shard/%d", i), keeper.TTL())
		if err != nil {
			log.Fatal(err)
		}
		defer shard.Release(ctx)
	}
	slot, err := slots.TryClaim(ctx, runslots.Want{Scope: "tenant/42", Capacity: 4}, keeper.TTL())
	if err != nil {
		log.Fatal(err)
	}
	defer slot.Release(ctx)
	fmt.Println("kept by one call per interval:", keeper.Len())
	// Output: kept by one call per interval: 101
}
