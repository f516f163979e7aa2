package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pglease"
)

// TTLs of the leases the throughput workloads take: long enough never to
// expire during a run.
const (
	heldTTL  = time.Hour        // leases that are renewed or asserted
	cycleTTL = 30 * time.Second // leases acquired and released in a loop
)

// SQL the "any client" path sends: the pglease functions called directly.
const (
	// limitTableSQL creates the baseline's table: the shape of
	// pglease.leases (columns, keys, indexes, fillfactor), no functions.
	limitTableSQL = `CREATE TABLE bench_limit (LIKE pglease.leases INCLUDING ALL) WITH (fillfactor = 50)`
	limitRowSQL   = `INSERT INTO bench_limit (name, holder, fence, acquired_at, expires_at)
		VALUES ($1, 'bench', 1, now(), now() + interval '30 s') ON CONFLICT (name) DO NOTHING`
	limitUpdateSQL = `UPDATE bench_limit SET expires_at = now() + interval '30 s' WHERE name = $1`
	// limitUpdateAsyncSQL is the limit UPDATE in a transaction whose commit
	// does not wait for its WAL flush, in one statement, the way
	// releaseAsyncSQL (sql/queries/leases.sql's LeaseReleaseAsync) does it.
	limitUpdateAsyncSQL = `WITH u AS (
		UPDATE bench_limit SET expires_at = now() + interval '30 s' WHERE name = $1 RETURNING name)
		SELECT u.name FROM u CROSS JOIN LATERAL pg_catalog.set_config('synchronous_commit', 'off', true) AS s`

	acquireSQL = `SELECT acquired, fence FROM pglease.acquire($1, $2, $3)`
	renewSQL   = `SELECT renewed FROM pglease.renew($1, $2, $3, $4)`
	releaseSQL = `SELECT released FROM pglease.release($1, $2, $3)`
	// releaseAsyncSQL is the release in its own transaction with
	// synchronous_commit off, in one statement: the form docs/reliability.md
	// documents for SQL callers (and the Go package sends).
	releaseAsyncSQL = `SELECT r.released FROM pglease.release($1, $2, $3) AS r
		CROSS JOIN LATERAL pg_catalog.set_config('synchronous_commit', 'off', true)`
	assertHeldSQL  = `SELECT pglease.assert_held($1, $2)`
	claimSlotSQL   = `SELECT claimed, slot, fence FROM pglease.claim_slot($1, $2, $3, $4)`
	releaseSlotSQL = `SELECT released FROM pglease.release_slot($1, $2, $3, $4)`

	advisoryLockSQL   = `SELECT pg_try_advisory_lock($1)`
	advisoryUnlockSQL = `SELECT pg_advisory_unlock($1)`
)

// claimCapacity is the capacity of the throughput table's slot claims.
const claimCapacity = 64

// id returns client i's lease name or slot scope for workload key; the
// holder is "bench/" + id.
func id(key string, i int) string { return fmt.Sprintf("%s/%d", key, i) }

// errRefused reports a call that pglease answered "no" to where the
// benchmark expects "yes": the measurement would be of the wrong path.
func errRefused(what string) error { return fmt.Errorf("%s refused", what) }

// sqlAcquire takes lease name for holder with ttl on conn and returns its fence.
func sqlAcquire(ctx context.Context, conn *pgx.Conn, name, holder string, ttl time.Duration) (int64, error) {
	var acquired bool
	var fence int64
	if err := conn.QueryRow(ctx, acquireSQL, name, holder, ttl).Scan(&acquired, &fence); err != nil {
		return 0, err
	}
	if !acquired {
		return 0, errRefused("acquire " + name)
	}
	return fence, nil
}

// leaseWorkloads returns the throughput table's rows, the limit first.
func (e *env) leaseWorkloads() []workload {
	return []workload{
		e.limitWorkload(),
		e.renewFloor(),
		e.renewSQL("renew/sql"),
		e.renewPkg(renewPkgKey),
		e.renewPkg(renewPkgMetricsKey),
		e.limitCycle(),
		e.acquireReleaseSQL("acquire-release/sql", "SQL via pgx", releaseSQL),
		e.acquireReleaseSQL("acquire-release/sql-async", "SQL via pgx, asynchronous release", releaseAsyncSQL),
		e.acquireReleasePkg(),
		{
			// Acquire subscribes to release notifications before it tries
			// (a LISTEN connection of the package's own).
			key: "acquire-release/pkg-acquire", name: "pglease.acquire + release", path: "Go package: Acquire + Release",
			steps: []string{"acquire", "release"},
			start: func(ctx context.Context, n int) (*instance, error) {
				return e.perPoolClient(ctx, "acquire-release/pkg-acquire", n, func(_ context.Context, c *pglease.Client, name string) ([]step, error) {
					return pkgCycle(func(ctx context.Context) (*pglease.Lease, error) {
						return c.Acquire(ctx, name, cycleTTL)
					}), nil
				})
			},
		},
		e.claimReleaseSQL("claim-release/sql"),
		{
			key: "assert-held/sql", name: "BEGIN; pglease.assert_held; COMMIT", path: "SQL via pgx",
			steps: []string{"transaction"},
			start: func(ctx context.Context, n int) (*instance, error) {
				return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
					name := id("assert-held/sql", i)
					fence, err := sqlAcquire(ctx, conn, name, "bench/"+name, heldTTL)
					return []step{func(ctx context.Context) error {
						return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
							_, err := tx.Exec(ctx, assertHeldSQL, name, fence)
							return err
						})
					}}, err
				})
			},
		},
		{
			key: "advisory", name: "pg_try_advisory_lock + pg_advisory_unlock", path: "SQL via pgx",
			steps: []string{"lock", "unlock"},
			start: func(ctx context.Context, n int) (*instance, error) {
				return e.perConn(ctx, n, func(_ context.Context, i int, conn *pgx.Conn) ([]step, error) {
					key := int64(1_000_000 + i)
					call := func(sql string) step {
						return func(ctx context.Context) error {
							var ok bool
							if err := conn.QueryRow(ctx, sql, key).Scan(&ok); err != nil {
								return err
							}
							if !ok {
								return errRefused(sql)
							}
							return nil
						}
					}
					return []step{call(advisoryLockSQL), call(advisoryUnlockSQL)}, nil
				})
			},
		},
	}
}

// limitWorkload is the physical limit: one single-row UPDATE per
// transaction, each client on a row of its own.
func (e *env) limitWorkload() workload {
	return e.singleStatement("update-limit", "UPDATE one row (the limit)", limitUpdateSQL, 1)
}

// renewFloor is the floor of any pglease.renew (floorUpdateSQL: an empty
// SECURITY DEFINER PL/pgSQL function with renew's signature and a pinned
// search_path, around the limit UPDATE) on client i's row of the limit's
// table. floorFunctionsSQL must have run.
func (e *env) renewFloor() workload {
	const key = "renew-floor"
	return workload{
		key: key, name: "renew's floor: SECURITY DEFINER PL/pgSQL around the UPDATE", path: "SQL",
		steps: []string{"renew"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				row := id(key, i)
				_, err := conn.Exec(ctx, limitRowSQL, row)
				return []step{func(ctx context.Context) error {
					var renewed bool
					if err := conn.QueryRow(ctx, floorUpdateSQL, row).Scan(&renewed); err != nil {
						return err
					}
					if !renewed {
						return errRefused("floor renew " + row)
					}
					return nil
				}}, err
			})
		},
	}
}

// limitCycle is the ceiling of any acquire + release whose grant is durable
// and whose release is asynchronous, each at least a one-row UPDATE: the
// limit UPDATE, then the same UPDATE with synchronous_commit off for its
// transaction, on client i's row of the limit's table.
func (e *env) limitCycle() workload {
	const key = "limit-cycle"
	return workload{
		key: key, name: "limit cycle: UPDATE (durable) + UPDATE (asynchronous commit)", path: "SQL",
		steps: []string{"update", "update-async"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				row := id(key, i)
				_, err := conn.Exec(ctx, limitRowSQL, row)
				exec := func(sql string) step {
					return func(ctx context.Context) error {
						tag, err := conn.Exec(ctx, sql, row)
						if err == nil && tag.RowsAffected() != 1 {
							err = fmt.Errorf("%s: %d rows, want 1", tag, tag.RowsAffected())
						}
						return err
					}
				}
				return []step{exec(limitUpdateSQL), exec(limitUpdateAsyncSQL)}, err
			})
		},
	}
}

// singleStatement is a workload whose op is sql, run with the name of
// client i's row of the limit's table; the statement must report rows rows.
func (e *env) singleStatement(key, name, sql string, rows int64) workload {
	return workload{
		key: key, name: name, path: "SQL",
		steps: []string{"statement"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				row := id(key, i)
				_, err := conn.Exec(ctx, limitRowSQL, row)
				return []step{func(ctx context.Context) error {
					tag, err := conn.Exec(ctx, sql, row)
					if err == nil && tag.RowsAffected() != rows {
						err = fmt.Errorf("%s: %d rows, want %d", tag, tag.RowsAffected(), rows)
					}
					return err
				}}, err
			})
		},
	}
}

// renewSQL is pglease.renew of a lease of each client's own, called
// directly.
func (e *env) renewSQL(key string) workload {
	return workload{
		key: key, name: "pglease.renew", path: "SQL via pgx",
		steps: []string{"renew"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				name := id(key, i)
				holder := "bench/" + name
				fence, err := sqlAcquire(ctx, conn, name, holder, heldTTL)
				return []step{func(ctx context.Context) error {
					var renewed bool
					if err := conn.QueryRow(ctx, renewSQL, name, holder, fence, heldTTL).Scan(&renewed); err != nil {
						return err
					}
					if !renewed {
						return errRefused("renew " + name)
					}
					return nil
				}}, err
			})
		},
	}
}

// acquireReleaseSQL is pglease.acquire and pglease.release of a lease of
// each client's own, called directly; the release with release (releaseSQL
// or releaseAsyncSQL).
func (e *env) acquireReleaseSQL(key, path, release string) workload {
	return workload{
		key: key, name: "pglease.acquire + release", path: path,
		steps: []string{"acquire", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				name := id(key, i)
				holder := "bench/" + name
				var fence int64
				return []step{
					func(ctx context.Context) (err error) {
						fence, err = sqlAcquire(ctx, conn, name, holder, cycleTTL)
						return err
					},
					func(ctx context.Context) error {
						var released bool
						if err := conn.QueryRow(ctx, release, name, holder, fence).Scan(&released); err != nil {
							return err
						}
						if !released {
							return errRefused("release " + name)
						}
						return nil
					},
				}, nil
			})
		},
	}
}

// claimReleaseSQL is pglease.claim_slot and pglease.release_slot in a scope
// of each client's own, called directly.
func (e *env) claimReleaseSQL(key string) workload {
	return workload{
		key: key, name: fmt.Sprintf("pglease.claim_slot + release_slot (capacity %d)", claimCapacity), path: "SQL via pgx",
		steps: []string{"claim", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(_ context.Context, i int, conn *pgx.Conn) ([]step, error) {
				scope := id(key, i)
				return slotCycle(conn, scope, ownHolder(scope), claimCapacity), nil
			})
		},
	}
}

// perPoolClient sets up an instance whose n clients share the env's pool,
// each with a pglease.Client of its own (holder "bench/" + its lease name).
func (e *env) perPoolClient(ctx context.Context, key string, n int, mk func(ctx context.Context, c *pglease.Client, name string) ([]step, error)) (*instance, error) {
	return e.perPoolClientWith(ctx, key, n, pglease.Config{}, mk)
}

// perPoolClientWith is perPoolClient with the clients' Config (its Holder
// is set per client).
func (e *env) perPoolClientWith(ctx context.Context, key string, n int, cfg pglease.Config, mk func(ctx context.Context, c *pglease.Client, name string) ([]step, error)) (*instance, error) {
	inst := &instance{cycles: make([][]step, n), close: func() {}}
	err := parallel(n, func(i int) error {
		name := id(key, i)
		cfg := cfg
		cfg.Holder = "bench/" + name
		c, err := pglease.New(e.pool, cfg)
		if err == nil {
			inst.cycles[i], err = mk(ctx, c, name)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return inst, nil
}

// pkgCycle is an acquire with the Go package and the release of the lease it
// returned.
func pkgCycle(acquire func(ctx context.Context) (*pglease.Lease, error)) []step {
	var l *pglease.Lease
	return []step{
		func(ctx context.Context) (err error) {
			l, err = acquire(ctx)
			return err
		},
		func(ctx context.Context) error { return l.Release(ctx) },
	}
}

// slotCycle is a claim of one slot of scope at capacity and its release,
// as holder.
func slotCycle(conn *pgx.Conn, scope, holder string, capacity int) []step {
	return claimCycle(conn, scope, holder, claimSlotSQL, releaseSlotSQL, capacity, cycleTTL)
}

// ownHolder is the holder of the client that has scope to itself.
func ownHolder(scope string) string { return "bench/" + scope }

// claimCycle is a claim in scope and the release of what it took, as
// holder: claimSQL takes the scope, the holder and args and returns
// claimed, slot and fence (claimed NULL or false: refused); releaseSQL
// takes the scope, slot, holder and fence and returns released.
func claimCycle(conn *pgx.Conn, scope, holder, claimSQL, releaseSQL string, args ...any) []step {
	claimArgs := append([]any{scope, holder}, args...)
	var slot int32
	var fence int64
	return []step{
		func(ctx context.Context) error {
			var claimed *bool
			var s *int32
			var f *int64
			if err := conn.QueryRow(ctx, claimSQL, claimArgs...).Scan(&claimed, &s, &f); err != nil {
				return err
			}
			if claimed == nil || !*claimed {
				return errRefused(fmt.Sprintf("%s in %s", claimSQL, scope))
			}
			slot, fence = *s, *f
			return nil
		},
		func(ctx context.Context) error {
			var released bool
			if err := conn.QueryRow(ctx, releaseSQL, scope, slot, holder, fence).Scan(&released); err != nil {
				return err
			}
			if !released {
				return errRefused(fmt.Sprintf("%s in %s", releaseSQL, scope))
			}
			return nil
		},
	}
}

// acquireReleasePkg is the Go package's TryAcquire and Release on a lease
// of the client's own: the cycle compared with pglock, etcd and Redis.
func (e *env) acquireReleasePkg() workload {
	return workload{
		key: "acquire-release/pkg-try", name: "pglease.acquire + release", path: "Go package: TryAcquire + Release",
		steps: []string{"acquire", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perPoolClient(ctx, "acquire-release/pkg-try", n, func(_ context.Context, c *pglease.Client, name string) ([]step, error) {
				return pkgCycle(func(ctx context.Context) (*pglease.Lease, error) {
					return c.TryAcquire(ctx, name, cycleTTL)
				}), nil
			})
		},
	}
}
