package main

import (
	"context"
	"database/sql"
	"errors"

	"cirello.io/pglock"
	"github.com/jackc/pgx/v5/stdlib"
)

// pglock is set up as its README does, on database/sql, here with the pgx
// driver (its connections drawn from the run's pgx pool, like pglease's):
// its default table, its own CreateTable, a lease as long as pglease's
// cycleTTL. Heartbeats are off in the acquire+release row (pglease
// does not renew in the background either); the heartbeat row calls
// SendHeartbeat, which is what its background heartbeat runs.

// pglockClient returns a pglock client on db that acquires as owner and
// never heartbeats on its own.
func pglockClient(db *sql.DB, owner string) (*pglock.Client, error) {
	// UnsafeNew: New accepts lib/pq only; pglock supports pgx through
	// database/sql (it reads SQLSTATEs through the SQLState method).
	return pglock.UnsafeNew(db,
		pglock.WithOwner(owner),
		pglock.WithLeaseDuration(cycleTTL),
		pglock.WithHeartbeatFrequency(0))
}

// createPglockTable creates pglock's table in the scratch database.
func (e *env) createPglockTable() error {
	db, err := sql.Open("pgx", e.url)
	if err != nil {
		return err
	}
	defer db.Close()
	c, err := pglockClient(db, "bench")
	if err != nil {
		return err
	}
	return c.CreateTable()
}

// perPglockClient sets up an instance whose n clients share a database/sql
// pool of n connections taken from the env's pool, each client with a
// pglock client of its own.
func (e *env) perPglockClient(key string, mk func(ctx context.Context, c *pglock.Client, name string) ([]step, func() error, error)) func(ctx context.Context, n int) (*instance, error) {
	return func(ctx context.Context, n int) (*instance, error) {
		db := stdlib.OpenDBFromPool(e.pool)
		db.SetMaxOpenConns(n)
		db.SetMaxIdleConns(n) // keep them between calls, as sql.Open would
		cleanups := make([]func() error, n)
		inst := &instance{cycles: make([][]step, n), close: func() {
			for _, c := range cleanups {
				if c != nil {
					_ = c()
				}
			}
			_ = db.Close()
		}}
		err := parallel(n, func(i int) error {
			name := id(key, i)
			c, err := pglockClient(db, "bench/"+name)
			if err == nil {
				inst.cycles[i], cleanups[i], err = mk(ctx, c, name)
			}
			return err
		})
		if err != nil {
			inst.close()
			return nil, err
		}
		return inst, nil
	}
}

// pglockWorkloads returns pglock's rows of the throughput table.
func (e *env) pglockWorkloads() []workload {
	return []workload{e.pglockAcquireRelease(), e.pglockHeartbeat()}
}

// pglockAcquireRelease is pglock's Acquire (failing if locked) and Release
// of a lock of each client's own.
func (e *env) pglockAcquireRelease() workload {
	return workload{
		key: "acquire-release/pglock", name: "pglock Acquire + Release", path: "cirello.io/pglock " + pglockVersion,
		steps: []string{"acquire", "release"},
		start: e.perPglockClient("acquire-release/pglock", func(_ context.Context, c *pglock.Client, name string) ([]step, func() error, error) {
			var l *pglock.Lock
			return []step{
				func(ctx context.Context) (err error) {
					l, err = c.AcquireContext(ctx, name, pglock.FailIfLocked())
					return err
				},
				func(ctx context.Context) error { return c.ReleaseContext(ctx, l) },
			}, nil, nil
		}),
	}
}

// pglockHeartbeat is pglock's SendHeartbeat on a lock each client holds.
func (e *env) pglockHeartbeat() workload {
	return workload{
		key: "heartbeat/pglock", name: "pglock SendHeartbeat", path: "cirello.io/pglock " + pglockVersion,
		steps: []string{"heartbeat"},
		start: e.perPglockClient("heartbeat/pglock", func(ctx context.Context, c *pglock.Client, name string) ([]step, func() error, error) {
			l, err := c.AcquireContext(ctx, name, pglock.FailIfLocked())
			if err != nil {
				return nil, nil, err
			}
			hb := func(ctx context.Context) error { return c.SendHeartbeat(ctx, l) }
			release := func() error {
				err := c.ReleaseContext(context.WithoutCancel(ctx), l)
				if errors.Is(err, pglock.ErrLockAlreadyReleased) {
					return nil
				}
				return err
			}
			return []step{hb}, release, nil
		}),
	}
}
