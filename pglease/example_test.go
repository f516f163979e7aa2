package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pglease"
)

// Example is the README's quick start: take a lease, write under its fence,
// release it.
func Example() {
	ctx := context.Background()
	databaseURL := pgtest.ExampleURL() // in a service: os.Getenv("DATABASE_URL")

	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.Config{})
	if err != nil {
		log.Fatal(err)
	}
	lease, err := client.TryAcquire(ctx, "nightly-report", 30*time.Second)
	if held, ok := errors.AsType[*pglease.HeldError](err); ok {
		fmt.Println("already running on", held.Holder)
		return
	} else if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	err = lease.WithFence(ctx, func(tx pgx.Tx) error {
		// Writes here commit only while this tenure is current.
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	fmt.Println("fence", lease.Fence(), "write committed:", err == nil)
	// Output: fence 1 write committed: true
}

// ExampleClient_Acquire waits for a lease that another holder has, and
// gets it as soon as that holder releases.
func ExampleClient_Acquire() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.ExampleURL())
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	first, _ := pglease.New(pool, pglease.Config{Holder: "first"})
	second, _ := pglease.New(pool, pglease.Config{Holder: "second"})

	held, err := first.TryAcquire(ctx, "migrations", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond) // some work
		_ = held.Release(ctx)
	}()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lease, err := second.Acquire(waitCtx, "migrations", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(lease.Holder(), "holds it with fence", lease.Fence())
	_ = lease.Release(ctx)
	// Output: second holds it with fence 2
}
