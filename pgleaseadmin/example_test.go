package pgleaseadmin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

// ExampleLeases lists the leases of a database as `pglease status` does:
// every lease with its holder, fence and state, whoever holds it.
func ExampleLeases() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.Config{Holder: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	lease, err := client.TryAcquire(ctx, "status/report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	leases, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range leases {
		if l.Name == "status/report" {
			fmt.Println(l.Name, l.State, "by", l.Holder, "fence", l.Fence)
		}
	}
	// Output: status/report held by worker-1 fence 1
}

// ExampleForceRelease ends the tenure of a holder that is gone, as
// `pglease release --force` does: the next holder need not wait for the
// TTL, and gets a larger fence.
func ExampleForceRelease() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	gone, err := pglease.New(pool, pglease.Config{Holder: "crashed"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := gone.TryAcquire(ctx, "force/nightly", time.Hour); err != nil {
		log.Fatal(err)
	}

	ended, released, err := pgleaseadmin.ForceRelease(ctx, pool, "force/nightly")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", released, "holder", ended.Holder, "fence", ended.Fence)

	next, err := pglease.New(pool, pglease.Config{Holder: "replacement"})
	if err != nil {
		log.Fatal(err)
	}
	lease, err := next.TryAcquire(ctx, "force/nightly", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("taken over with fence", lease.Fence())
	// Output:
	// released: true holder crashed fence 1
	// taken over with fence 2
}

// ExampleScopes shows the occupancy of a slot scope, whoever holds its
// slots.
func ExampleScopes() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	for _, holder := range []string{"gpu-worker-1", "gpu-worker-2"} {
		c, err := runslots.New(pool, runslots.Config{Holder: holder})
		if err != nil {
			log.Fatal(err)
		}
		slot, err := c.TryClaim(ctx, runslots.Want{Scope: "scopes/gpu", Capacity: 4}, time.Minute)
		if err != nil {
			log.Fatal(err)
		}
		defer slot.Release(ctx)
	}

	scopes, err := pgleaseadmin.Scopes(ctx, pool)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range scopes {
		if s.Scope == "scopes/gpu" {
			fmt.Println(s.Scope, "in use:", s.InUse, "of", s.Slots, "slots")
		}
	}
	// Output: scopes/gpu in use: 2 of 2 slots
}

// ExamplePurge deletes what has been free for at least an hour, on a
// schedule of one's own (the clients already purge what has been free for
// a day, once per hour across the fleet).
func ExamplePurge() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	n, err := pgleaseadmin.Purge(ctx, pool, time.Hour)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("purged", n, "rows")
	// Output: purged 0 rows
}

// ExampleReadMetrics reads what `pglease exporter` serves: each lease with
// its state and fence, and totals over every row.
func ExampleReadMetrics() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	client, err := pglease.New(pool, pglease.Config{Holder: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	lease, err := client.TryAcquire(ctx, "metrics/report", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	m, err := pgleaseadmin.ReadMetrics(ctx, pool, pgleaseadmin.Filter{Names: "^metrics/"})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range m.Leases {
		fmt.Println(l.Name, "held:", l.Held, "fence", l.Fence, "left:", l.Expiry > 50*time.Second)
	}
	// Output: metrics/report held: true fence 1 left: true
}

// ExampleRequestRelease asks a leader to hand over to a standby: the
// leader learns it at its next renewal, stops its work and releases, and
// the next grant is the standby's alone for a while. It needs role
// pglease_operator (the example runs as the schema's owner).
func ExampleRequestRelease() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	leader, _ := pglease.New(pool, pglease.Config{Holder: "node-1"})
	standby, _ := pglease.New(pool, pglease.Config{Holder: "node-2"})
	other, _ := pglease.New(pool, pglease.Config{Holder: "node-3"})

	lease, err := leader.TryAcquire(ctx, "example/handover", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	// The standby waits for the lease: it is a candidate now.
	if _, err := standby.TryAcquire(ctx, "example/handover", time.Minute); !errors.Is(err, pglease.ErrLeaseHeld) {
		log.Fatal(err)
	}

	asked, _, err := pgleaseadmin.RequestRelease(ctx, pool, "example/handover", pgleaseadmin.ReleaseRequest{To: "node-2"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("asked", asked.Holder, "to hand over")

	// The leader's next renewal tells it; it stops its work and releases.
	if err := lease.Renew(ctx); err != nil {
		log.Fatal(err)
	}
	<-lease.ReleaseRequested()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "example/handover", time.Minute); errors.Is(err, pglease.ErrLeaseHeld) {
		fmt.Println("node-3 refused: reserved for node-2")
	}
	next, err := standby.TryAcquire(ctx, "example/handover", time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("node-2 leads with fence", next.Fence())
	// Output:
	// asked node-1 to hand over
	// node-3 refused: reserved for node-2
	// node-2 leads with fence 2
}
