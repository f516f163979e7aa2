package supervisor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// Example embeds a supervisor in a service: of all instances running this,
// one runs the dispatcher at a time; the others take over when it stops or
// dies.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	sup, err := supervisor.NewLease(pool, "outbox-dispatcher", supervisor.Config{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	err = sup.Run(ctx, func(ctx context.Context) error {
		fmt.Println("dispatching with fence", sup.Fence())
		stop() // a real dispatcher loops until ctx is cancelled
		<-ctx.Done()
		return nil
	})
	fmt.Println("stopped:", err)
	// Output:
	// dispatching with fence 1
	// stopped: context canceled
}

// Example_keeper supervises one workload per shard in one process, all
// kept by one Keeper: one renew_holder call per interval, and one LISTEN
// connection, for every shard the process leads or stands by on.
func Example_keeper() {
	ctx, stop := context.WithCancel(context.Background())
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	keeper, err := pglease.NewKeeper(pool, pglease.KeeperConfig{}) // TTL 15s, a round every 5s
	if err != nil {
		log.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { _ = keeper.Serve(ctx) })

	var leading sync.WaitGroup
	for i := range 8 {
		sup, err := supervisor.NewLease(pool, fmt.Sprintf("shard/%d", i), supervisor.Config{Keeper: keeper})
		if err != nil {
			log.Fatal(err)
		}
		leading.Add(1)
		wg.Go(func() {
			_ = sup.Run(ctx, func(ctx context.Context) error {
				leading.Done()
				<-ctx.Done() // a real consumer processes its shard until then
				return nil
			})
		})
	}
	leading.Wait()
	fmt.Println("shards led, kept by one keeper:", keeper.Len())
	stop()
	// Output: shards led, kept by one keeper: 8
}
