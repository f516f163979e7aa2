package ratelimit_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/ratelimit"
)

// Example limits searches per tenant: the schema owner sets the tiers
// once, and every process that shares the database shares each tenant's
// budget.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	limiter, err := ratelimit.New(pool, ratelimit.Config{})
	if err != nil {
		log.Fatal(err)
	}
	// The tiers (the schema owner's call, or the role owning the prefix).
	for target, lim := range map[string]ratelimit.Limit{
		"example/tenant/":      {Rate: 10, Per: time.Minute, Burst: 3},
		"example/tenant/gold/": {Rate: 1000, Per: time.Minute, Burst: 50},
	} {
		if _, err := limiter.Set(ctx, target, lim); err != nil {
			log.Fatal(err)
		}
	}

	for i := range 4 {
		d, err := limiter.Take(ctx, "example/tenant/acme/search", 1)
		if err != nil {
			log.Fatal(err)
		}
		if d.Allowed {
			fmt.Printf("search %d: allowed, %d left\n", i+1, d.Remaining)
		} else if d.RetryIn > 0 && d.RetryIn <= 6*time.Second { // a token every 6 s
			fmt.Printf("search %d: limited, a token within 6s\n", i+1)
		}
	}
	// Output:
	// search 1: allowed, 2 left
	// search 2: allowed, 1 left
	// search 3: allowed, 0 left
	// search 4: limited, a token within 6s
}
