package pgleaseadmin_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// ExampleTenures turns the tenure history on for a prefix and reads a
// lease's tenures back, as `pglease tenures` does: the released one, and
// the one still open.
func ExampleTenures() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgleaseadmin.EnableHistory(ctx, pool, "audited/", 30*24*time.Hour); err != nil {
		log.Fatal(err)
	}
	client, err := pglease.New(pool, pglease.Config{Holder: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	first, err := client.TryAcquire(ctx, "audited/report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second, err := client.TryAcquire(ctx, "audited/report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)

	tenures, err := pgleaseadmin.Tenures(ctx, pool, "audited/report", time.Time{})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tenures {
		fmt.Println("fence", t.Fence, t.Holder, "ended:", t.Ended != "", t.Ended)
	}
	// Output:
	// fence 1 worker-1 ended: true released
	// fence 2 worker-1 ended: false
}
