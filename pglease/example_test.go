package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
)

// Example is the README's quick start: take a lease, write under its fence,
// release it.
func Example() {
	ctx := context.Background()
	databaseURL := os.Getenv("DATABASE_URL")

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
	err = pglease.WithFence(ctx, pool, lease.Name(), lease.Fence(), func(tx pgx.Tx) error {
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
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
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

// ExampleLease_Run runs a job while holding a lease: the job's context ends
// the moment the lease is no longer certain, and the lease is released once
// the job returns.
func ExampleLease_Run() {
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
	lease, err := client.Acquire(ctx, "compaction", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	err = lease.Run(ctx, func(ctx context.Context) error {
		fmt.Println("compacting under fence", lease.Fence())
		return nil // a real job returns when done, or when ctx ends
	})
	if lost, ok := errors.AsType[*pglease.LostError](err); ok {
		log.Fatalf("lease %s lost (fence %d): %v", lost.Name, lost.Fence, lost.Cause)
	} else if err != nil {
		log.Fatal(err)
	}
	<-lease.Done() // closed by the release
	fmt.Println("released")
	// Output:
	// compacting under fence 1
	// released
}

// ExampleSendFenced makes a fenced write in one round trip: the
// check that the tenure is current and the writes go out as one batch,
// which the server runs as one transaction.
func ExampleSendFenced() {
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
	// The application's table, made here for the example.
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS outbox (id int PRIMARY KEY, sent_fence bigint)`); err != nil {
		log.Fatal(err)
	}
	lease, err := client.TryAcquire(ctx, "outbox-dispatch", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	var batch pgx.Batch
	batch.Queue(`INSERT INTO outbox VALUES (1, $1)`, lease.Fence())
	batch.Queue(`SELECT count(*) FROM outbox WHERE sent_fence = $1`, lease.Fence()).QueryRow(func(row pgx.Row) error {
		var n int
		if err := row.Scan(&n); err != nil {
			return err
		}
		fmt.Printf("%d row written under fence %d\n", n, lease.Fence())
		return nil
	})
	if err := pglease.SendFenced(ctx, pool, lease.Name(), lease.Fence(), &batch); errors.Is(err, pglease.ErrLeaseLost) {
		fmt.Println("the tenure ended: nothing was written")
	} else if err != nil {
		log.Fatal(err)
	}
	// Output: 1 row written under fence 1
}
