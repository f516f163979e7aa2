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

// ExampleJobHistory records two runs of a job in the run ledger, as
// `pglease run --once-per 1h` does from any language (run_begin and
// run_end under the lease's tenure), and lists them as `pglease history`
// does: the failed run left the window open, the second run closed it.
func ExampleJobHistory() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.Config{Holder: "host-a"})
	if err != nil {
		log.Fatal(err)
	}
	for _, exitStatus := range []int{1, 0} {
		lease, err := client.TryAcquire(ctx, "hourly-export", time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		var run bool
		if err := pool.QueryRow(ctx, `SELECT run FROM pglease.run_begin('hourly-export', 'host-a', $1, '1 hour')`,
			lease.Fence()).Scan(&run); err != nil || !run {
			log.Fatal(run, err)
		}
		if _, err := pool.Exec(ctx, `SELECT pglease.run_end('hourly-export', 'host-a', $1, $2)`, lease.Fence(), exitStatus); err != nil {
			log.Fatal(err)
		}
		if err := lease.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	runs, err := pgleaseadmin.JobHistory(ctx, pool, "hourly-export", 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range runs {
		fmt.Println("fence", r.Fence, r.Outcome, "exit", r.ExitStatus)
	}
	// Output:
	// fence 2 succeeded exit 0
	// fence 1 failed exit 1
}
