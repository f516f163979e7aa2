package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/pglease/pglease/internal/coalesce"
	"github.com/pglease/pglease/ratelimit"
)

// The rate limits' section (-limits-only, docs/limits.md): pglease.take
// decisions per second and their p99 at -clients, against a GCRA Lua script
// of go-redis/redis_rate's shape on the machine's Redis (-redis, default
// 127.0.0.1:6379; github.com/go-redis/redis_rate is not served here, so its
// script is reproduced below), once with no persistence and once with
// appendonly yes + appendfsync always (set with CONFIG SET, restored
// after); against the floor, a single-row UPDATE of a table laid out as
// pglease.limit_state; a take in a transaction that also inserts a row
// against the insert alone; and concurrent takes of one process coalesced
// into one statement against one statement each.

// Keys of the section's rows.
const (
	limitTakeKey       = "limit/take"
	limitFloorKey      = "limit/floor"
	limitRedisKey      = "limit/redis-gcra"
	limitTxTakeKey     = "limit/tx-insert-take"
	limitTxInsertKey   = "limit/tx-insert"
	limitCoalescedKey  = "limit/take-coalesced"
	limitRedisNone     = "no persistence"
	limitRedisAlways   = "appendfsync always"
	defaultRedisAddr   = "127.0.0.1:6379"
	limitBenchTarget   = "bench/limit/"
	minTakeVsFloor     = 0.9 // take decisions/s over the floor UPDATE's at C=8 (issue #51)
	redisRewriteWait   = 30 * time.Second
	limitCoalesceLimit = 256
)

// The section's tables: the floor's, laid out as pglease.limit_state (same
// columns, key, fill factor), and the application table of the
// transaction rows.
const limitTablesSQL = `
CREATE TABLE bench_limit_state (LIKE pglease.limit_state INCLUDING ALL) WITH (fillfactor = 70);
CREATE TABLE bench_limit_events (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, at timestamptz NOT NULL DEFAULT now());
SELECT pglease.limit_set('` + limitBenchTarget + `', 1000000, '1 second', 1000000);`

// limitFloorSQL is the floor: what any take must at least do, one row's
// theoretical arrival time moved on and committed.
const limitFloorSQL = `UPDATE bench_limit_state SET tat = greatest(tat, clock_timestamp()) + interval '1 microsecond'
	WHERE key = $1 AND key_role = 'bench'`

// limitCoalescedSQL takes one token of each key in one statement, in input
// order: what a client coalescing concurrent Allow calls would send.
const limitCoalescedSQL = `SELECT t.allowed FROM unnest($1::text[]) WITH ORDINALITY AS k(key, i)
	CROSS JOIN LATERAL pglease.take(k.key, 1) AS t ORDER BY k.i`

// redisGCRA is go-redis/redis_rate's allow_n script (v10), as it is: GCRA
// on Redis' clock, the key's theoretical arrival time in a string with an
// expiry. Its replicate_commands call is left out (effects replication is
// Redis 7's default).
var redisGCRA = redis.NewScript(`
local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)

local tat = redis.call("GET", rate_limit_key)
if not tat then
  tat = now
else
  tat = tonumber(tat)
end
tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
local remaining = diff / emission_interval

if remaining < 0 then
  local reset_after = tat - now
  local retry_after = diff * -1
  return {0, 0, tostring(retry_after), tostring(reset_after)}
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
return {cost, remaining, tostring(-1), tostring(reset_after)}
`)

// LimitsComparison is the -limits-only section's figures.
type LimitsComparison struct {
	RedisVersion string `json:"redis_version"`
	RedisAddr    string `json:"redis_addr"`
	// None and Always are the rows at each concurrency with Redis without
	// persistence (take, floor, Redis) and with appendfsync always (take,
	// Redis), each group interleaved turn by turn.
	None   []Row `json:"redis_none"`
	Always []Row `json:"redis_always"`
	// Tx are the transaction rows at C=8; Coalesced the coalescing rows.
	Tx        []Row  `json:"transaction"`
	Coalesced []Row  `json:"coalesced"`
	LoadStart string `json:"load_start"`
	LoadEnd   string `json:"load_end"`
}

// limitTake is C goroutines sharing one ratelimit.Limiter, each taking one
// token of a key of its own per cycle (always allowed).
func (e *env) limitTake() workload {
	return workload{
		key: limitTakeKey, name: "pglease take", path: "Go package ratelimit: Limiter.Allow, one shared Limiter, one SELECT pglease.take per call",
		steps: []string{"take"},
		start: func(ctx context.Context, n int) (*instance, error) {
			l, err := ratelimit.New(e.pool, ratelimit.Config{})
			if err != nil {
				return nil, err
			}
			inst := &instance{cycles: make([][]step, n), close: func() {}}
			for i := range n {
				key := id(limitBenchTarget+"take", i)
				inst.cycles[i] = []step{func(ctx context.Context) error {
					ok, err := l.Allow(ctx, key)
					if err == nil && !ok {
						err = errRefused("take " + key)
					}
					return err
				}}
			}
			return inst, nil
		},
	}
}

// limitFloor is the floor: each client UPDATEs a row of its own of a table
// laid out as pglease.limit_state, one statement per transaction.
func (e *env) limitFloor() workload {
	return workload{
		key: limitFloorKey, name: "floor: single-row UPDATE", path: "pgx: UPDATE of a table laid out as pglease.limit_state, no function",
		steps: []string{"update"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				key := id(limitFloorKey, i)
				if _, err := conn.Exec(ctx, `INSERT INTO bench_limit_state (key, key_role, tat) VALUES ($1, 'bench', now())
					ON CONFLICT DO NOTHING`, key); err != nil {
					return nil, err
				}
				return []step{func(ctx context.Context) error {
					tag, err := conn.Exec(ctx, limitFloorSQL, key)
					if err == nil && tag.RowsAffected() != 1 {
						err = fmt.Errorf("floor UPDATE of %s changed %d rows", key, tag.RowsAffected())
					}
					return err
				}}, nil
			})
		},
	}
}

// limitRedis is redis_rate's GCRA script through go-redis, a pool of C
// connections, each client on a key of its own, the same limit.
func limitRedis(addr, version, mode string) workload {
	return workload{
		key: limitRedisKey + "/" + strings.ReplaceAll(mode, " ", "-"), name: "Redis GCRA (redis_rate's script), " + mode,
		path:  "go-redis: EVALSHA of redis_rate's allow_n, Redis " + version + ", " + mode,
		steps: []string{"take"},
		start: func(ctx context.Context, n int) (*instance, error) {
			cli := redis.NewClient(&redis.Options{Addr: addr, PoolSize: n, MinIdleConns: n})
			if err := redisGCRA.Load(ctx, cli).Err(); err != nil {
				_ = cli.Close()
				return nil, fmt.Errorf("load the GCRA script: %w", err)
			}
			inst := &instance{cycles: make([][]step, n), close: func() { _ = cli.Close() }}
			for i := range n {
				key := id("bench:limit", i)
				inst.cycles[i] = []step{func(ctx context.Context) error {
					v, err := redisGCRA.EvalSha(ctx, cli, []string{key}, 1000000, 1000000, 1, 1).Slice()
					if err == nil && (len(v) == 0 || v[0] == int64(0)) {
						err = errRefused("GCRA " + key)
					}
					return err
				}}
			}
			return inst, nil
		},
	}
}

// limitTx is one transaction per cycle that inserts an application row,
// with (take) or without a take of the client's key before the insert.
func (e *env) limitTx(take bool) workload {
	w := workload{key: limitTxInsertKey, name: "INSERT in a transaction", path: "pgx: BEGIN; INSERT; COMMIT", steps: []string{"tx"}}
	if take {
		w.key, w.name, w.path = limitTxTakeKey, "take + INSERT in a transaction", "pgx + ratelimit: BEGIN; Limiter.TakeTx; INSERT; COMMIT"
	}
	w.start = func(ctx context.Context, n int) (*instance, error) {
		l, err := ratelimit.New(e.pool, ratelimit.Config{})
		if err != nil {
			return nil, err
		}
		return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
			key := id(limitBenchTarget+"tx", i)
			return []step{func(ctx context.Context) error {
				return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if take {
						d, err := l.TakeTx(ctx, tx, key, 1)
						if err != nil {
							return err
						}
						if !d.Allowed {
							return errRefused("take " + key)
						}
					}
					_, err := tx.Exec(ctx, `INSERT INTO bench_limit_events (key) VALUES ($1)`, key)
					return err
				})
			}}, nil
		})
	}
	return w
}

// limitCoalesced is C goroutines whose concurrent takes are coalesced as
// the lease client coalesces acquires (package coalesce): an idle group
// sends a take at once; takes made meanwhile go out together in one
// statement (limitCoalescedSQL) when it returns.
func (e *env) limitCoalesced() workload {
	return workload{
		key: limitCoalescedKey, name: "pglease take, coalesced", path: "pgx: concurrent takes coalesced into one SELECT over unnest(keys), one in flight",
		steps: []string{"take"},
		start: func(ctx context.Context, n int) (*instance, error) {
			many := func(ctx context.Context, keys []string) ([]bool, error) {
				rows, err := e.pool.Query(ctx, limitCoalescedSQL, keys)
				if err != nil {
					return nil, err
				}
				return pgx.CollectRows(rows, pgx.RowTo[bool])
			}
			g := &coalesce.Group[string, bool]{
				One: func(ctx context.Context, key string) (bool, error) {
					ok, err := many(ctx, []string{key})
					if err != nil {
						return false, err
					}
					return ok[0], nil
				},
				Many: func(ctx context.Context, keys []string) []coalesce.Result[bool] {
					ok, err := many(ctx, keys)
					out := make([]coalesce.Result[bool], len(keys))
					for i := range out {
						if err != nil {
							out[i].Err = err
						} else {
							out[i].Res = ok[i]
						}
					}
					return out
				},
				Max: limitCoalesceLimit,
			}
			inst := &instance{cycles: make([][]step, n), close: func() {}}
			for i := range n {
				key := id(limitBenchTarget+"coalesced", i)
				inst.cycles[i] = []step{func(ctx context.Context) error {
					ok, err := g.Do(ctx, key)
					if err == nil && !ok {
						err = errRefused("take " + key)
					}
					return err
				}}
			}
			return inst, nil
		},
	}
}

// redisPersistence sets the machine's Redis at addr to mode (no
// persistence, or appendonly yes with appendfsync always) and returns a
// function that restores what it was.
func redisPersistence(ctx context.Context, cli *redis.Client, mode string) (restore func() error, err error) {
	old := map[string]string{}
	for _, k := range []string{"appendonly", "appendfsync", "save"} {
		v, err := cli.ConfigGet(ctx, k).Result()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", k, err)
		}
		old[k] = v[k]
	}
	restore = func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), redisRewriteWait)
		defer cancel()
		var errs []error
		for _, k := range []string{"appendfsync", "save", "appendonly"} {
			errs = append(errs, cli.ConfigSet(rctx, k, old[k]).Err())
		}
		return errors.Join(errs...)
	}
	set := map[string]string{"appendonly": "no", "save": ""}
	if mode == limitRedisAlways {
		set = map[string]string{"appendonly": "yes", "appendfsync": "always", "save": ""}
	}
	for k, v := range set {
		if err := cli.ConfigSet(ctx, k, v).Err(); err != nil {
			return nil, errors.Join(fmt.Errorf("CONFIG SET %s %q: %w", k, v, err), restore())
		}
	}
	// Turning the AOF on rewrites it in the background first: measure
	// after that.
	deadline := time.Now().Add(redisRewriteWait)
	for {
		info, err := cli.Info(ctx, "persistence").Result()
		if err != nil {
			return nil, errors.Join(err, restore())
		}
		if !strings.Contains(info, "aof_rewrite_in_progress:1") && !strings.Contains(info, "aof_rewrite_scheduled:1") {
			break
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("Redis' AOF rewrite still running after %s", redisRewriteWait), restore())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return restore, nil
}

// measureLimits measures the section on a scratch database of its own and
// the machine's Redis.
func measureLimits(ctx context.Context, cfg config) (_ *LimitsComparison, err error) {
	addr := cmp.Or(cfg.redisAddr, defaultRedisAddr)
	version, err := redisVersion(addr)
	if err != nil {
		return nil, fmt.Errorf("the rate limits' section needs the machine's Redis on %s (-redis ADDR): %w", addr, err)
	}
	cli := redis.NewClient(&redis.Options{Addr: addr})
	defer cli.Close()
	sc, err := createScratch(ctx, cfg.url, scratchName("_limits"))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	if err := e.exec(ctx, limitTablesSQL); err != nil {
		return nil, fmt.Errorf("create the limits' tables: %w", err)
	}
	l := &LimitsComparison{RedisVersion: version, RedisAddr: addr, LoadStart: loadavg()}
	for _, mode := range []string{limitRedisNone, limitRedisAlways} {
		restore, err := redisPersistence(ctx, cli, mode)
		if err != nil {
			return nil, err
		}
		ws := []workload{e.limitTake(), limitRedis(addr, version, mode)}
		if mode == limitRedisNone {
			ws = []workload{e.limitTake(), e.limitFloor(), limitRedis(addr, version, mode)}
		}
		rows, err := measureAt(ctx, e, "rate limits, Redis "+mode, ws, cfg.clients, cfg)
		err = errors.Join(err, restore())
		if err != nil {
			return nil, err
		}
		if mode == limitRedisNone {
			l.None = rows
		} else {
			l.Always = rows
		}
	}
	if l.Tx, err = measureAt(ctx, e, "take in a transaction", []workload{e.limitTx(true), e.limitTx(false)}, []int{targetClients}, cfg); err != nil {
		return nil, err
	}
	if l.Coalesced, err = measureAt(ctx, e, "coalesced takes", []workload{e.limitCoalesced(), e.limitTake()}, []int{targetClients}, cfg); err != nil {
		return nil, err
	}
	l.LoadEnd = loadavg()
	return l, nil
}

// runLimitsBench runs only the rate limits' section (-limits-only) and
// prints it.
func runLimitsBench(ctx context.Context, cfg config) error {
	l, err := measureLimits(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", l.LoadStart, l.LoadEnd, runtime.NumCPU())
	l.writeMarkdown(os.Stdout, "##")
	return nil
}

// rowOf returns the row of rows with key at n clients, or nil.
func rowOf(rows []Row, key string, n int) *Row {
	for i := range rows {
		if rows[i].Key == key && rows[i].Clients == n {
			return &rows[i]
		}
	}
	return nil
}

// ratioOf formats a's rate over b's, or "—".
func ratioOf(a, b *Row) string {
	if a == nil || b == nil || b.CyclesPerSec == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a.CyclesPerSec/b.CyclesPerSec)
}

// writeMarkdown renders the section under a heading of level h.
func (l *LimitsComparison) writeMarkdown(w io.Writer, h string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s Rate limits", h)
	p("")
	p("`pglease.take` of one token per call, each client on a key of its own (always allowed: the write path), through package ratelimit's `Limiter.Allow`, one Limiter shared by the clients; against go-redis/redis_rate's GCRA script (reproduced: the module is not served to this build) through go-redis on Redis %s at %s, without persistence and with `appendonly yes` + `appendfsync always` (set with CONFIG SET for the run, restored after). The floor is a single-row `UPDATE` per transaction of a table laid out as `pglease.limit_state`: what any take must at least do. Rows of one table were measured interleaved, turn by turn; ratios are within the table.",
		l.RedisVersion, l.RedisAddr)
	p("")
	p("| Redis | C | take decisions/s | take p99 ms | floor UPDATE/s | take × floor | Redis decisions/s | Redis p99 ms | take × Redis |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, group := range []struct {
		mode string
		rows []Row
	}{{limitRedisNone, l.None}, {limitRedisAlways, l.Always}} {
		redisKey := limitRedisKey + "/" + strings.ReplaceAll(group.mode, " ", "-")
		for _, r := range group.rows {
			if r.Key != limitTakeKey {
				continue
			}
			floor, rd := rowOf(group.rows, limitFloorKey, r.Clients), rowOf(group.rows, redisKey, r.Clients)
			floorRate, floorRatio := "—", "—"
			if floor != nil {
				floorRate, floorRatio = count(floor.CyclesPerSec), ratioOf(&r, floor)
			}
			redisRate, redisP99 := "—", "—"
			if rd != nil {
				redisRate, redisP99 = count(rd.CyclesPerSec), fmt.Sprintf("%.3f", rd.Latency.P99)
			}
			p("| %s | %d | %s | %.3f | %s | %s | %s | %s | %s |", group.mode, r.Clients, count(r.CyclesPerSec), r.Latency.P99,
				floorRate, floorRatio, redisRate, redisP99, ratioOf(&r, rd))
		}
	}
	p("")
	tt, ti := rowOf(l.Tx, limitTxTakeKey, targetClients), rowOf(l.Tx, limitTxInsertKey, targetClients)
	if tt != nil && ti != nil {
		p("A transaction that inserts an application row, with a `Limiter.TakeTx` of the client's key before the insert and without, at C=%d: %s against %s transactions/s (%s), p99 %.3f against %.3f ms.",
			targetClients, count(tt.CyclesPerSec), count(ti.CyclesPerSec), ratioOf(tt, ti), tt.Latency.P99, ti.Latency.P99)
		p("")
	}
	co, un := rowOf(l.Coalesced, limitCoalescedKey, targetClients), rowOf(l.Coalesced, limitTakeKey, targetClients)
	if co != nil && un != nil {
		p("Coalescing, at C=%d goroutines of one process: takes made while one is in flight sent together in one statement (package coalesce, as the lease client batches acquires) give %s decisions/s, p99 %.3f ms, against %s, p99 %.3f ms, one statement per call (%s).",
			targetClients, count(co.CyclesPerSec), co.Latency.P99, count(un.CyclesPerSec), un.Latency.P99, ratioOf(co, un))
		p("")
	}
	p("Load average %s at the start of the section, %s at its end.", l.LoadStart, l.LoadEnd)
}

// checkLimitsTarget evaluates issue #51's target: take ≥ 0.9× the floor
// UPDATE at C=8.
func (r *Report) checkLimitsTarget() {
	name := fmt.Sprintf("pglease take ≥ %.1f× a single-row UPDATE of the same layout at C=%d", minTakeVsFloor, targetClients)
	if r.Limits == nil {
		r.unmeasured(name)
		return
	}
	take, floor := rowOf(r.Limits.None, limitTakeKey, targetClients), rowOf(r.Limits.None, limitFloorKey, targetClients)
	if take == nil || floor == nil {
		r.unmeasured(name)
		return
	}
	ratio := take.CyclesPerSec / floor.CyclesPerSec
	r.add(name, ratio >= minTakeVsFloor, "%.2f× (%s vs %s decisions/s)", ratio, count(take.CyclesPerSec), count(floor.CyclesPerSec))
}
