package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"

	"github.com/redis/go-redis/v9"

	"github.com/pglease/pglease/internal/coalesce"
	"github.com/pglease/pglease/pglease"
)

// The batched calls' section (-batch-only, docs/go.md#batched-calls): C
// goroutines of one process, each on lease names of its own, sharing one
// pglease.Client, which coalesces their concurrent acquires and releases
// into acquire_batch and release_batch calls; against pglock, Redis's lock
// one command at a time, and Redis's lock with the goroutines' commands
// coalesced into pipelines the same way.

// batchClients is the section's concurrency (issue #31's target: C=8).
const batchClients = 8

// Keys of the section's rows.
const (
	batchKey         = "acquire-release/batched"
	batchFloorKey    = "acquire-release/batched-floor"
	redisPipelineKey = "acquire-release/redis-pipelined"
)

// The batched floor's statements: a lease row taken and given back with
// no pglease function, no role check, no notification, names in one
// array. What any batched acquire and release must at least do: write
// each row and commit.
const (
	floorBatchAcquireSQL = `UPDATE pglease.leases
		SET holder = $2, fence = fence + 1, acquired_at = clock_timestamp(),
		    expires_at = clock_timestamp() + $3::interval, holder_role = session_user
		WHERE name = ANY ($1::text[]) AND (holder IS NULL OR expires_at <= clock_timestamp())`
	floorBatchReleaseSQL = `UPDATE pglease.leases
		SET holder = NULL, expires_at = least(expires_at, clock_timestamp())
		WHERE name = ANY ($1::text[]) AND holder = $2`
	floorBatchRowsSQL = `INSERT INTO pglease.leases (name, fence, acquired_at, expires_at)
		SELECT n, 1, now(), now() FROM unnest($1::text[]) AS n
		ON CONFLICT (name) DO NOTHING`
)

// BatchComparison is the -batch-only section's figures.
type BatchComparison struct {
	Rows         []Row  `json:"rows"`
	RedisVersion string `json:"redis_version"`
	LoadStart    string `json:"load_start"`
	LoadEnd      string `json:"load_end"`
}

// batchedAcquireRelease is C goroutines sharing one pglease.Client, each
// cycling TryAcquire + Release on a name of its own: while one call is in
// flight the others queue and go out together (group commit).
func (e *env) batchedAcquireRelease() workload {
	return workload{
		key: batchKey, name: "pglease, one shared Client (batched)", path: "Go package: TryAcquire + Release, coalesced into acquire_batch / release_batch",
		steps: []string{"acquire", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			c, err := pglease.New(e.pool, pglease.Config{Holder: "bench/batched"})
			if err != nil {
				return nil, err
			}
			inst := &instance{cycles: make([][]step, n), close: func() {}}
			for i := range n {
				name := id(batchKey, i)
				inst.cycles[i] = pkgCycle(func(ctx context.Context) (*pglease.Lease, error) {
					return c.TryAcquire(ctx, name, cycleTTL)
				})
			}
			return inst, nil
		},
	}
}

// batchedFloor is the bound of the batched row: C goroutines coalescing
// their acquires and releases exactly as a shared pglease.Client does
// (package coalesce, one batch in flight per kind), but each batch is a
// bare UPDATE of the names' rows (floorBatchAcquireSQL): no more work per
// name than any batched acquire and release must do, so batched × pglock
// cannot pass this row's × pglock by more than the bench's noise.
func (e *env) batchedFloor() workload {
	return workload{
		key: batchFloorKey, name: "floor: bare UPDATEs, coalesced the same way", path: "pgx: UPDATE ... WHERE name = ANY($1), one batch in flight per kind, no pglease function",
		steps: []string{"acquire", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			names := make([]string, n)
			for i := range names {
				names[i] = id(batchFloorKey, i)
			}
			if _, err := e.pool.Exec(ctx, floorBatchRowsSQL, names); err != nil {
				return nil, fmt.Errorf("create the floor's lease rows: %w", err)
			}
			group := func(q string, args ...any) *coalesce.Group[string, struct{}] {
				many := func(ctx context.Context, names []string) error {
					tag, err := e.pool.Exec(ctx, q, append([]any{names}, args...)...)
					if err == nil && tag.RowsAffected() != int64(len(names)) {
						err = fmt.Errorf("floor batch of %d names changed %d rows", len(names), tag.RowsAffected())
					}
					return err
				}
				return &coalesce.Group[string, struct{}]{
					One: func(ctx context.Context, name string) (struct{}, error) {
						return struct{}{}, many(ctx, []string{name})
					},
					Many: func(ctx context.Context, names []string) []coalesce.Result[struct{}] {
						err := many(ctx, names)
						out := make([]coalesce.Result[struct{}], len(names))
						for i := range out {
							out[i].Err = err
						}
						return out
					},
					Max: pglease.MaxBatch,
				}
			}
			acquires := group(floorBatchAcquireSQL, "bench/floor", cycleTTL)
			releases := group(floorBatchReleaseSQL, "bench/floor")
			inst := &instance{cycles: make([][]step, n), close: func() {}}
			for i, name := range names {
				inst.cycles[i] = []step{
					func(ctx context.Context) error { _, err := acquires.Do(ctx, name); return err },
					func(ctx context.Context) error { _, err := releases.Do(ctx, name); return err },
				}
			}
			return inst, nil
		},
	}
}

// redisCmd is one command of the pipelined Redis lock.
type redisCmd struct {
	unlock     bool
	key, token string
}

// redisLockPipelined is Redis's lock (SET NX PX, the compare-and-delete
// script) with the C goroutines' concurrent commands coalesced into one
// pipeline per round trip, exactly as pglease coalesces its calls
// (package coalesce): an idle client sends a command at once; commands
// made meanwhile go out in one pipeline when it returns.
func (e *env) redisLockPipelined(s *store) workload {
	return workload{
		key: redisPipelineKey, name: "Redis SET NX + compare-and-delete, pipelined", path: "Redis " + s.version + ": the goroutines' commands coalesced into pipelines, appendfsync always",
		steps: []string{"set", "delete"},
		start: func(ctx context.Context, n int) (*instance, error) {
			cli := redis.NewClient(&redis.Options{Addr: s.addr, PoolSize: n, MinIdleConns: n})
			if err := redisUnlock.Load(ctx, cli).Err(); err != nil {
				_ = cli.Close()
				return nil, fmt.Errorf("load the unlock script: %w", err)
			}
			queue := func(ctx context.Context, p redis.Pipeliner, c redisCmd) redis.Cmder {
				if c.unlock {
					return redisUnlock.EvalSha(ctx, p, []string{c.key}, c.token)
				}
				return p.SetNX(ctx, c.key, c.token, cycleTTL)
			}
			check := func(c redisCmd, cmd redis.Cmder) error {
				if err := cmd.Err(); err != nil {
					return err
				}
				switch v := cmd.(type) {
				case *redis.BoolCmd:
					if !v.Val() {
						return errRefused("SET NX " + c.key)
					}
				case *redis.Cmd:
					if n, err := v.Int(); err != nil || n != 1 {
						return fmt.Errorf("compare-and-delete %s: deleted %d keys, want 1 (%v)", c.key, n, err)
					}
				}
				return nil
			}
			g := &coalesce.Group[redisCmd, struct{}]{
				One: func(ctx context.Context, c redisCmd) (struct{}, error) {
					cmds, err := cli.Pipelined(ctx, func(p redis.Pipeliner) error { queue(ctx, p, c); return nil })
					if err != nil && len(cmds) == 0 {
						return struct{}{}, err
					}
					return struct{}{}, check(c, cmds[0])
				},
				Many: func(ctx context.Context, cs []redisCmd) []coalesce.Result[struct{}] {
					out := make([]coalesce.Result[struct{}], len(cs))
					cmds := make([]redis.Cmder, len(cs))
					_, err := cli.Pipelined(ctx, func(p redis.Pipeliner) error {
						for i, c := range cs {
							cmds[i] = queue(ctx, p, c)
						}
						return nil
					})
					for i, c := range cs {
						if cmds[i] == nil {
							out[i].Err = err
							continue
						}
						out[i].Err = check(c, cmds[i])
					}
					return out
				},
				Max: 256,
			}
			inst := &instance{cycles: make([][]step, n), serverTicks: s.cpuTicks, close: func() { _ = cli.Close() }}
			for i := range n {
				key, token := id(redisPipelineKey, i), fmt.Sprintf("bench-%d", i)
				lock := func(ctx context.Context) error {
					_, err := g.Do(ctx, redisCmd{key: key, token: token})
					return err
				}
				unlock := func(ctx context.Context) error {
					_, err := g.Do(ctx, redisCmd{unlock: true, key: key, token: token})
					return err
				}
				inst.cycles[i] = []step{lock, unlock}
			}
			return inst, nil
		},
	}
}

// measureBatch measures the batched calls' section on a scratch database
// of its own, with a Redis server of its own.
func measureBatch(ctx context.Context, cfg config) (_ *BatchComparison, err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_batch"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	if err := e.createPglockTable(); err != nil {
		return nil, fmt.Errorf("create pglock's table: %w", err)
	}
	rs, err := startRedis(ctx, cfg.storeDir)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, rs.stop()) }()
	b := &BatchComparison{RedisVersion: rs.version, LoadStart: loadavg()}
	ws := []workload{
		e.batchedAcquireRelease(),
		e.batchedFloor(),
		e.acquireReleasePkg(),
		e.pglockAcquireRelease(),
		e.redisLock(rs),
		e.redisLockPipelined(rs),
	}
	log.Printf("batched calls at C=%d: %d rows × %s", batchClients, len(ws), cfg.cell)
	ts, err := runGroupOn(ctx, e, ws, batchClients, cfg)
	if err != nil {
		return nil, err
	}
	for i, w := range ws {
		b.Rows = append(b.Rows, newRow(w, batchClients, ts[i]))
	}
	b.LoadEnd = loadavg()
	return b, nil
}

// runBatchBench runs only the batched calls' section (-batch-only) and
// prints it.
func runBatchBench(ctx context.Context, cfg config) error {
	b, err := measureBatch(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", b.LoadStart, b.LoadEnd, runtime.NumCPU())
	b.writeMarkdown(os.Stdout)
	return nil
}

// writeMarkdown renders the section.
func (b *BatchComparison) writeMarkdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## Batched calls")
	p("")
	p("%d goroutines of one process, each cycling acquire + release on a name of its own, interleaved in turns. The batched row shares one pglease.Client, which coalesces concurrent calls into `acquire_batch` / `release_batch` when they would otherwise wait for a connection ([docs/go.md](docs/go.md#batched-calls)); the unbatched row gives each goroutine a Client of its own (one call per round trip). Redis %s runs with appendfsync always; its pipelined row coalesces the goroutines' commands into pipelines the same way.",
		batchClients, b.RedisVersion)
	p("")
	p("The floor row bounds the batched row: the same goroutines and the same coalescing (one batch in flight per kind), each batch a bare `UPDATE` of its names' rows, with no pglease function: no more work per name than any batched acquire and release must do, so batched × pglock cannot pass floor × pglock by more than the noise between rows.")
	p("")
	p("| Lock | cycles/s | × pglock | × Redis | × Redis pipelined | p50 ms | p99 ms |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	ratio := func(r *Row, key string) string {
		for _, o := range b.Rows {
			if o.Key == key && o.CyclesPerSec > 0 {
				return fmt.Sprintf("%.2f×", r.CyclesPerSec/o.CyclesPerSec)
			}
		}
		return "—"
	}
	for i := range b.Rows {
		r := &b.Rows[i]
		p("| %s (%s) | %s | %s | %s | %s | %.3f | %.3f |", r.Name, r.Path, count(r.CyclesPerSec),
			ratio(r, "acquire-release/pglock"), ratio(r, redisKey), ratio(r, redisPipelineKey), r.Latency.P50, r.Latency.P99)
	}
}
