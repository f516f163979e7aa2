package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// ExampleWithHoldAtLeast runs a cron job on one host per tick: the job
// takes 10 ms, but the lease stays held for a minute after its grant, so
// the same tick fired late on another host finds it held and skips.
func ExampleWithHoldAtLeast() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	hostA, _ := pglease.New(pool, pglease.Config{Holder: "host-a"})
	hostB, _ := pglease.New(pool, pglease.Config{Holder: "host-b"})

	tick := func(host *pglease.Client) {
		lease, err := host.TryAcquire(ctx, "report-cron", 30*time.Second, pglease.WithHoldAtLeast(time.Minute))
		if held, ok := errors.AsType[*pglease.HeldError](err); ok {
			fmt.Println(host.Holder(), "skips: held by", held.Holder)
			return
		} else if err != nil {
			log.Fatal(err)
		}
		_ = lease.Run(ctx, func(context.Context) error {
			time.Sleep(10 * time.Millisecond) // the job
			fmt.Println(host.Holder(), "ran the job")
			return nil
		})
	}
	tick(hostA)
	tick(hostB) // the same tick, a little later on another host
	// Output:
	// host-a ran the job
	// host-b skips: held by host-a
}
