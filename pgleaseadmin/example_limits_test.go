package pgleaseadmin_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/ratelimit"
)

// ExampleLimits shows each configured limit's level as `pglease status`
// does: how many keys are spending, how many are refused now, and the
// fewest tokens any of them has left.
func ExampleLimits() {
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
	if _, err := limiter.Set(ctx, "example-levels/", ratelimit.Limit{Rate: 10, Per: time.Hour, Burst: 5}); err != nil {
		log.Fatal(err)
	}
	if _, err := limiter.Take(ctx, "example-levels/acme", 5); err != nil {
		log.Fatal(err)
	}
	if _, err := limiter.Take(ctx, "example-levels/initech", 2); err != nil {
		log.Fatal(err)
	}

	levels, _, err := pgleaseadmin.Limits(ctx, pool, 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range levels {
		if l.Target == "example-levels/" {
			fmt.Printf("%s: %d keys spending, %d refused now, fewest left %d of %d\n",
				l.Target, l.Buckets, l.Limited, l.MinRemaining, l.Burst)
		}
	}
	// Output: example-levels/: 2 keys spending, 1 refused now, fewest left 0 of 5
}
