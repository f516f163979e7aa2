package supervisor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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

	sup, err := supervisor.New(pool, supervisor.Config{Name: "outbox-dispatcher", TTL: 10 * time.Second})
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
