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

// ExampleWithValue publishes the leader's address with its tenure; a
// follower refused the lease learns where the leader is.
func ExampleWithValue() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	leader, _ := pglease.New(pool, pglease.Config{Holder: "node-1"})
	follower, _ := pglease.New(pool, pglease.Config{Holder: "node-2"})

	lease, err := leader.TryAcquire(ctx, "example/orders-leader", time.Minute, pglease.WithValue("10.0.0.1:8080"))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	_, err = follower.TryAcquire(ctx, "example/orders-leader", time.Minute, pglease.WithValue("10.0.0.2:8080"))
	if held, ok := errors.AsType[*pglease.HeldError](err); ok {
		fmt.Println("forward to", held.Holder, "at", held.Value)
	}
	// Output: forward to node-1 at 10.0.0.1:8080
}

// ExampleClient_Observe watches who leads: the current state first, then
// every change, a vacancy included.
func ExampleClient_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	watcher, _ := pglease.New(pool, pglease.Config{Holder: "watcher", ObserveInterval: 100 * time.Millisecond})
	leader, _ := pglease.New(pool, pglease.Config{Holder: "node-1"})

	states, err := watcher.Observe(ctx, "example/observed-leader")
	if err != nil {
		log.Fatal(err)
	}
	show := func() {
		st := <-states
		if st.Vacant() {
			fmt.Println("nobody leads")
			return
		}
		fmt.Println(st.Holder, "leads at", st.Value, "with fence", st.Fence)
	}
	show()
	lease, err := leader.TryAcquire(ctx, "example/observed-leader", time.Minute, pglease.WithValue("10.0.0.1:8080"))
	if err != nil {
		log.Fatal(err)
	}
	show()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	show()
	// Output:
	// nobody leads
	// node-1 leads at 10.0.0.1:8080 with fence 1
	// nobody leads
}
