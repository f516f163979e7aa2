package supervisor

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/notify"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
)

// slotGuard guards with one slot of a scope.
type slotGuard struct {
	c        *runslots.Client
	pool     *pgxpool.Pool
	scope    string
	capacity int
	ttl      time.Duration
}

func newSlotGuard(database pglease.DB, pool *pgxpool.Pool, cfg Config) (guard, error) {
	c, err := runslots.New(database, runslots.Config{Holder: cfg.Holder, SafetyMargin: cfg.SafetyMargin, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	return &slotGuard{c: c, pool: pool, scope: cfg.Scope, capacity: cfg.Capacity, ttl: cfg.TTL}, nil
}

func (g *slotGuard) try(ctx context.Context) (tenure, *refusal, error) {
	s, err := g.c.TryClaim(ctx, g.scope, g.capacity, g.ttl)
	if full, ok := errors.AsType[*runslots.FullError](err); ok {
		return nil, &refusal{wait: full.RetryIn}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return s, nil, nil
}

func (g *slotGuard) listen(ctx context.Context) *notify.Waiter {
	return notify.Listen(ctx, g.pool, "slot", g.scope)
}

func (g *slotGuard) slot(t tenure) int {
	if s, ok := t.(*runslots.Slot); ok {
		return s.Number()
	}
	return 0
}
