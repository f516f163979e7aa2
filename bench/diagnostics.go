package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// updateNotifySQL is the limit UPDATE with a NOTIFY in its transaction:
// what a write costs when it must wake someone.
const updateNotifySQL = `WITH u AS (
	UPDATE bench_limit SET expires_at = now() + interval '30 s' WHERE name = $1 RETURNING name)
	SELECT pg_notify('bench', u.name) FROM u`

// diagnosticWorkloads returns the rows that show where pglease's calls
// spend the time the limit UPDATE does not: a NOTIFY in the transaction,
// and renew as migrated; with acquire, release and the slot calls, and
// pglock's acquire and release, for comparison. The limit is first.
func (e *env) diagnosticWorkloads() []workload {
	relabel := func(w workload, path string) workload {
		w.path = path
		return w
	}
	return []workload{
		e.limitWorkload(),
		e.singleStatement("diag/update-notify", "UPDATE + pg_notify, one transaction", updateNotifySQL, 1),
		relabel(e.renewSQL("diag/renew/migrated"), "SQL via pgx, as migrated"),
		e.acquireReleaseSQL("diag/acquire-release", "SQL via pgx", releaseSQL),
		e.claimReleaseSQL("diag/claim-release"),
		e.pglockAcquireRelease(),
	}
}

// The floor of any pglease.renew: a PL/pgSQL function with renew's
// signature, SECURITY DEFINER with a pinned search_path (what every pglease
// function needs, so that another role can neither bypass it nor redirect
// its operators), empty and around the limit UPDATE. pglease.renew cannot
// cost less than the second: its execution-time target is read against it.
const (
	floorFunctionsSQL = `
CREATE OR REPLACE FUNCTION bench_floor_empty(
    p_name text, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$ BEGIN renewed := true; END $$;
CREATE OR REPLACE FUNCTION bench_floor_update(
    p_name text, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE public.bench_limit AS l SET expires_at = now() + interval '30 s'
    WHERE l.name = p_name
    RETURNING l.expires_at INTO expires_at;
    renewed := FOUND;
END
$$;`
	floorEmptySQL  = `SELECT renewed FROM bench_floor_empty($1, 'bench', 1, interval '30 s')`
	floorUpdateSQL = `SELECT renewed FROM bench_floor_update($1, 'bench', 1, interval '30 s')`
	// releaseByNameSQL releases the tenure acquireSQL just took (the
	// subjects take turns: it runs right after it, on a connection of its
	// own).
	releaseByNameSQL = `SELECT released FROM pglease.release($1, $2,
		(SELECT s.fence FROM pglease.lease_status AS s WHERE s.name = $1))`
)

// execSamples is how many times each statement is timed by the server.
const execSamples = 100

// ExecTime is the server's execution time of one call, without the round
// trip and the commit: what the function itself costs.
type ExecTime struct {
	Name    string  `json:"name"`
	Path    string  `json:"path"`
	Ms      float64 `json:"median_ms"` // of execSamples
	VsLimit float64 `json:"vs_limit"`
}

// explainExec runs sql under EXPLAIN ANALYZE (so it executes, and commits
// when run outside a transaction) and returns the server's execution time.
func explainExec(ctx context.Context, conn *pgx.Conn, sql string, args ...any) (time.Duration, error) {
	var plan []struct {
		ExecutionTime float64 `json:"Execution Time"`
	}
	if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) "+sql, args...).Scan(&plan); err != nil {
		return 0, err
	}
	if len(plan) != 1 {
		return 0, fmt.Errorf("EXPLAIN returned %d plans", len(plan))
	}
	return time.Duration(plan[0].ExecutionTime * float64(time.Millisecond)), nil
}

// renewExecTimes times, taking turns, the limit UPDATE and pglease.renew as
// migrated, each on a connection of its own.
func (e *env) renewExecTimes(ctx context.Context) ([]ExecTime, error) {
	const name, holder = "exec/renew", "bench/exec/renew"
	limitArgs := func(ctx context.Context, conn *pgx.Conn) ([]any, error) {
		_, err := conn.Exec(ctx, limitRowSQL, name)
		return []any{name}, err
	}
	renewArgs := func(ctx context.Context, conn *pgx.Conn) ([]any, error) {
		fence, err := sqlAcquire(ctx, conn, name, holder, heldTTL)
		return []any{name, holder, fence, heldTTL}, err
	}
	type subject struct {
		ExecTime
		sql  string
		prep func(ctx context.Context, conn *pgx.Conn) ([]any, error)
		conn *pgx.Conn
		args []any
		ds   []time.Duration
	}
	const cycle = "exec/cycle"
	acquireArgs := func(ctx context.Context, conn *pgx.Conn) ([]any, error) {
		return []any{cycle, holder, heldTTL}, nil
	}
	releaseArgs := func(ctx context.Context, conn *pgx.Conn) ([]any, error) {
		return []any{cycle, holder}, nil
	}
	floorArgs := func(ctx context.Context, conn *pgx.Conn) ([]any, error) {
		if _, err := conn.Exec(ctx, floorFunctionsSQL); err != nil {
			return nil, fmt.Errorf("create the floor's functions: %w", err)
		}
		return limitArgs(ctx, conn)
	}
	subjects := []*subject{
		{ExecTime: ExecTime{Name: "UPDATE one row (the limit)", Path: "SQL"}, sql: limitUpdateSQL, prep: limitArgs},
		{ExecTime: ExecTime{Name: "pglease.renew", Path: "as migrated"}, sql: renewSQL, prep: renewArgs},
		{ExecTime: ExecTime{Name: "empty PL/pgSQL function, SECURITY DEFINER, SET search_path, renew's signature", Path: "floor"}, sql: floorEmptySQL, prep: floorArgs},
		{ExecTime: ExecTime{Name: "the same function around the limit UPDATE", Path: "floor"}, sql: floorUpdateSQL, prep: floorArgs},
		{ExecTime: ExecTime{Name: "pglease.acquire of a free lease", Path: "as migrated"}, sql: acquireSQL, prep: acquireArgs},
		{ExecTime: ExecTime{Name: "pglease.release (fence read by a subquery)", Path: "as migrated"}, sql: releaseByNameSQL, prep: releaseArgs},
	}
	for _, s := range subjects {
		var err error
		if s.conn, err = pgx.Connect(ctx, e.url); err != nil {
			return nil, err
		}
		defer s.conn.Close(ctx)
		if s.args, err = s.prep(ctx, s.conn); err != nil {
			return nil, err
		}
	}
	for range execSamples {
		for _, s := range subjects {
			d, err := explainExec(ctx, s.conn, s.sql, s.args...)
			if err != nil {
				return nil, err
			}
			s.ds = append(s.ds, d)
		}
	}
	limit := ms(median(subjects[0].ds))
	out := make([]ExecTime, len(subjects))
	for i, s := range subjects {
		out[i] = s.ExecTime
		out[i].Ms = ms(median(s.ds))
		out[i].VsLimit = out[i].Ms / limit
	}
	return out, nil
}
