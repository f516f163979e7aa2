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

// ExampleLimiter_ReserveAll reserves a model call's tokens at the user's,
// the tenant's and the pool's budgets at once, then settles at what the
// call used: the rest goes back to all three.
func ExampleLimiter_ReserveAll() {
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
	for target, lim := range map[string]ratelimit.Limit{
		"example/pool":       {Rate: 100_000, Per: 24 * time.Hour, Burst: 100_000},
		"example/pool/acme":  {Rate: 8_000, Per: 24 * time.Hour, Burst: 8_000},
		"example/pool/acme/": {Rate: 5_000, Per: 24 * time.Hour, Burst: 5_000},
	} {
		if _, err := limiter.Set(ctx, target, lim); err != nil {
			log.Fatal(err)
		}
	}
	levels := []string{"example/pool/acme/user/42", "example/pool/acme", "example/pool"}
	r, err := limiter.ReserveAll(ctx, levels, 4000, 10*time.Minute)
	if err != nil || !r.Allowed {
		log.Fatal("not reserved: ", r.RefusedBy, err)
	}
	fmt.Printf("reserved 4000 at every level, %d left at the tightest\n", r.Remaining)

	// A second user of the same tenant asks for more than the tenant has left.
	r2, err := limiter.ReserveAll(ctx, []string{"example/pool/acme/user/7", "example/pool/acme", "example/pool"}, 5000, 10*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("second user: reserved %v, refused by %s\n", r2.Allowed, r2.RefusedBy)

	// The call used 1234: 2766 go back to the user, the tenant and the pool.
	if ok, err := limiter.Settle(ctx, "example/pool/acme", r.ID, 1234); err != nil || !ok {
		log.Fatal("not settled: ", err)
	}
	d, err := limiter.Peek(ctx, "example/pool/acme")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("the tenant has %d left\n", d.Remaining)
	// Output:
	// reserved 4000 at every level, 1000 left at the tightest
	// second user: reserved false, refused by example/pool/acme
	// the tenant has 6766 left
}
