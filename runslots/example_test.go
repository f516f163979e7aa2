package runslots_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/runslots"
)

// Example runs a workload in one of four slots of a tenant's scope: at most
// four such workloads run at once across every process that shares the
// database.
func Example() {
	ctx := context.Background()
	databaseURL := os.Getenv("DATABASE_URL")

	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := runslots.New(pool, runslots.Config{})
	if err != nil {
		log.Fatal(err)
	}
	slot, err := client.Claim(ctx, runslots.Want{Scope: "tenant:42", Capacity: 4}, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	err = slot.Run(ctx, func(ctx context.Context) error {
		fmt.Printf("working in slot %d of %s, fence %d\n", slot.Number(), slot.Scope(), slot.Fence())
		return nil // return early once ctx is cancelled: the slot may be lost
	})
	if errors.Is(err, runslots.ErrSlotLost) {
		fmt.Println("the slot was lost while working: the work may have overlapped another holder's")
		return
	}
	fmt.Println("Run returned:", err)
	// Output:
	// working in slot 1 of tenant:42, fence 1
	// Run returned: <nil>
}

// ExampleClient_TryClaim shows three workers competing for two slots.
func ExampleClient_TryClaim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	var slots []*runslots.Slot
	for _, holder := range []string{"worker-a", "worker-b", "worker-c"} {
		client, err := runslots.New(pool, runslots.Config{Holder: holder})
		if err != nil {
			log.Fatal(err)
		}
		slot, err := client.TryClaim(ctx, runslots.Want{Scope: "gpu-pool", Capacity: 2}, time.Minute)
		if full, ok := errors.AsType[*runslots.FullError](err); ok {
			fmt.Printf("%s: %s is full, %d of %d in use\n", holder, full.Scope, full.InUse, full.Capacity)
			continue
		} else if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: slot %d\n", holder, slot.Number())
		slots = append(slots, slot)
	}
	for _, slot := range slots {
		if err := slot.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// worker-a: slot 1
	// worker-b: slot 2
	// worker-c: gpu-pool is full, 2 of 2 in use
}

// ExampleClient_Claim waits for a slot that another holder has, and gets it
// as soon as that holder releases.
func ExampleClient_Claim() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	first, _ := runslots.New(pool, runslots.Config{Holder: "first"})
	second, _ := runslots.New(pool, runslots.Config{Holder: "second"})

	held, err := first.TryClaim(ctx, runslots.Want{Scope: "nightly-export", Capacity: 1}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		// Released long before the minute is up: the waiter is woken by
		// the release, not by the expiry.
		time.Sleep(100 * time.Millisecond)
		released <- held.Release(ctx)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	slot, err := second.Claim(waitCtx, runslots.Want{Scope: "nightly-export", Capacity: 1}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if err := <-released; err != nil {
		log.Fatal(err)
	}
	defer slot.Release(ctx)
	fmt.Printf("%s has slot %d, fence %d\n", slot.Holder(), slot.Number(), slot.Fence())
	// Output: second has slot 1, fence 2
}

// ExampleClient_TryClaimAll takes a slot of a tenant's quota and a GPU
// together, or neither.
func ExampleClient_TryClaimAll() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := runslots.New(pool, runslots.Config{Holder: "job-17"})
	if err != nil {
		log.Fatal(err)
	}
	slots, err := client.TryClaimAll(ctx, []runslots.Want{
		{Scope: "tenant:7", Capacity: 3},
		{Scope: "gpu:a100", Capacity: 8},
	}, time.Minute)
	if errors.Is(err, runslots.ErrFull) {
		fmt.Println("not now:", err)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	for _, s := range slots {
		fmt.Printf("%s: slot %d\n", s.Scope(), s.Number())
		defer s.Release(ctx)
	}
	// Output:
	// tenant:7: slot 1
	// gpu:a100: slot 1
}
