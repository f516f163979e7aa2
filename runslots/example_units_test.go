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

// ExampleWant_units shares a pool of 8 GPUs: a training job takes 4 of
// them, an inference job 1; a second training job does not fit beside
// the first and three inference jobs (4 + 3 + 4 > 8), all or nothing.
func ExampleWant_units() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	claim := func(holder string, units int) *runslots.Slot {
		client, err := runslots.New(pool, runslots.Config{Holder: holder})
		if err != nil {
			log.Fatal(err)
		}
		slot, err := client.TryClaim(ctx, runslots.Want{Scope: "gpus", Capacity: 8, Units: units}, time.Minute)
		if full, ok := errors.AsType[*runslots.FullError](err); ok {
			fmt.Printf("%s (%d GPUs): refused, %d of 8 in use\n", holder, units, full.InUse)
			return nil
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (%d GPUs): slot %d\n", holder, slot.Units(), slot.Number())
		return slot
	}
	train := claim("train-1", 4)
	var infer []*runslots.Slot
	for _, h := range []string{"infer-1", "infer-2", "infer-3"} {
		infer = append(infer, claim(h, 1))
	}
	claim("train-2", 4)
	for _, s := range append(infer, train) {
		if err := s.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// train-1 (4 GPUs): slot 1
	// infer-1 (1 GPUs): slot 2
	// infer-2 (1 GPUs): slot 3
	// infer-3 (1 GPUs): slot 4
	// train-2 (4 GPUs): refused, 7 of 8 in use
}
