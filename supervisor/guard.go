package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/keep"
	"github.com/pglease/pglease/internal/notify"
	"github.com/pglease/pglease/pglease"
)

// tenure is a held lease or slot.
type tenure interface {
	keep.Tenure
	Release(ctx context.Context) error
	Fence() int64
}

// refusal describes why a try did not take the lease or slot.
type refusal struct {
	holder string        // current holder; empty for a full slot scope
	fence  int64         // current holder's fence
	wait   time.Duration // until a takeover may be possible
}

// guard takes the lease or slot that guards a workload.
type guard interface {
	// try takes it, or returns a refusal, or an error.
	try(ctx context.Context) (tenure, *refusal, error)
	// listen subscribes to its release notifications.
	listen(ctx context.Context) *notify.Waiter
	// slot is the slot number of t (0 for a lease).
	slot(t tenure) int
}

// leaseGuard guards with a lease.
type leaseGuard struct {
	c    *pglease.Client
	pool *pgxpool.Pool
	name string
	ttl  time.Duration
}

func (g *leaseGuard) try(ctx context.Context) (tenure, *refusal, error) {
	l, err := g.c.TryAcquire(ctx, g.name, g.ttl)
	if held, ok := errors.AsType[*pglease.HeldError](err); ok {
		return nil, &refusal{holder: held.Holder, fence: held.Fence, wait: held.ExpiresIn}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return l, nil, nil
}

func (g *leaseGuard) listen(ctx context.Context) *notify.Waiter {
	return notify.Listen(ctx, g.pool, "lease", g.name)
}

func (g *leaseGuard) slot(tenure) int { return 0 }
