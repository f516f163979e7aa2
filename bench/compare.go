package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// Keys of the rows of the comparison with other stores.
const (
	etcdKey  = "acquire-release/etcd"
	redisKey = "acquire-release/redis"
)

// StoreComparison is the comparison of pglease's acquire + release with
// the locks of the stores a user would run instead (-stores).
type StoreComparison struct {
	Rows []Row `json:"rows"`
	// Versions are the compared servers' versions, by store.
	Versions map[string]string `json:"versions"`
	// SameDisk says whether the stores' data directory (-store-dir) is on
	// the device of the Postgres server's data directory: "yes", "no", or
	// why it is not known.
	SameDisk string `json:"same_disk"`
}

// knownStores are the stores -stores accepts, in the order they are run.
var knownStores = []string{"etcd", "redis"}

// parseStores parses -stores: a comma-separated list of knownStores, or
// "none".
func parseStores(s string) ([]string, error) {
	if strings.TrimSpace(s) == "none" {
		return nil, nil
	}
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if !slices.Contains(knownStores, f) {
			return nil, fmt.Errorf("%q is not a store this bench runs: want a comma-separated list of %s, or none", f, strings.Join(knownStores, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// startStores starts the servers of names, their data under dir.
func startStores(ctx context.Context, names []string, dir string) ([]*store, error) {
	var out []*store
	for _, name := range names {
		start := startEtcd
		if name == "redis" {
			start = startRedis
		}
		s, err := start(ctx, dir)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start %s: %w", name, err), stopStores(out))
		}
		log.Printf("%s %s serving on %s, data in %s", s.name, s.version, s.addr, s.dir)
		out = append(out, s)
	}
	return out, nil
}

// stopStores stops every server of ss.
func stopStores(ss []*store) error {
	var err error
	for _, s := range ss {
		err = errors.Join(err, s.stop())
	}
	return err
}

// storeWorkloads returns the comparison's rows: pglease's acquire + release
// and pglock's, both with the Postgres server's CPU time, then one row per
// store of ss.
func (e *env) storeWorkloads(ss []*store) []workload {
	ws := []workload{e.withServerCPU(e.acquireReleasePkg()), e.withServerCPU(e.pglockAcquireRelease())}
	for _, s := range ss {
		switch s.name {
		case "etcd":
			ws = append(ws, e.etcdLock(s))
		case "redis":
			ws = append(ws, e.redisLock(s))
		}
	}
	return ws
}

// withServerCPU makes w read the Postgres server's CPU time around each
// turn (pgServerTicks).
func (e *env) withServerCPU(w workload) workload {
	start := w.start
	w.start = func(ctx context.Context, n int) (*instance, error) {
		inst, err := start(ctx, n)
		if err == nil {
			inst.serverTicks = func() (map[int]int64, error) { return e.pgServerTicks(ctx) }
		}
		return inst, err
	}
	return w
}

// pgServerTicks returns the CPU time, by pid, of the server's processes
// that work for the scratch database: its backends and autovacuum workers,
// and the background processes of the whole server (WAL writer,
// checkpointer, background writer, ...). Backends of other databases are
// left out. The server must run on this machine.
func (e *env) pgServerTicks(ctx context.Context) (map[int]int64, error) {
	rows, _ := e.pool.Query(ctx, "SELECT pid FROM pg_catalog.pg_stat_activity WHERE datname = current_database() OR datname IS NULL")
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("list the server's processes: %w", err)
	}
	out := make(map[int]int64, len(pids))
	for _, pid := range pids {
		t, err := processTicks(pid)
		if errors.Is(err, os.ErrNotExist) {
			continue // ended since the query
		}
		if err != nil {
			return nil, fmt.Errorf("read the CPU time of the server's process %d (the server must run on this machine): %w", pid, err)
		}
		out[pid] = t
	}
	return out, nil
}

// measureStores starts the stores of cfg, runs the comparison at every
// concurrency of cfg.storeClients and stops them.
func measureStores(ctx context.Context, e *env, cfg config) (_ *StoreComparison, err error) {
	ss, err := startStores(ctx, cfg.stores, cfg.storeDir)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, stopStores(ss)) }()
	c := &StoreComparison{Versions: map[string]string{}}
	if err := e.withPool(ctx, 1, func() error { c.SameDisk = e.sameDisk(ctx, cfg.storeDir); return nil }); err != nil {
		return nil, err
	}
	for _, s := range ss {
		c.Versions[s.name] = s.version
	}
	if c.Rows, err = measureAt(ctx, e, "against "+strings.Join(cfg.stores, " and "), e.storeWorkloads(ss), cfg.storeClients, cfg); err != nil {
		return nil, err
	}
	return c, nil
}

// sameDisk compares the device of dir with that of the server's data
// directory (which needs a role that may read it: a superuser or
// pg_read_all_settings).
func (e *env) sameDisk(ctx context.Context, dir string) string {
	var data string
	if err := e.pool.QueryRow(ctx, "SHOW data_directory").Scan(&data); err != nil {
		return fmt.Sprintf("unknown: the server's data directory: %v", err)
	}
	var a, b syscall.Stat_t
	if err := syscall.Stat(dir, &a); err != nil {
		return fmt.Sprintf("unknown: %v", err)
	}
	if err := syscall.Stat(data, &b); err != nil {
		return fmt.Sprintf("unknown: %v", err)
	}
	if a.Dev == b.Dev {
		return "yes"
	}
	return fmt.Sprintf("no: %s and the server's %s are on different devices", dir, data)
}

// runStoresBench runs only the comparison with other stores (-stores-only)
// on a scratch database and prints its section.
func runStoresBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_stores"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	if err := e.createPglockTable(); err != nil {
		return fmt.Errorf("create pglock's table: %w", err)
	}
	load := loadavg()
	c, err := measureStores(ctx, e, cfg)
	if err != nil {
		return err
	}
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs.\n\n", load, loadavg(), runtime.NumCPU())
	c.writeMarkdown(os.Stdout, cfg.storeClients, "")
	return nil
}

// durableWrites says what each row's cycle durably writes before it
// returns, by key.
var durableWrites = map[string]string{
	"acquire-release/pkg-try": "2 commits, each a WAL flush (concurrent commits share flushes)",
	"acquire-release/pglock":  "2 commits (Acquire: nextval, then an UPSERT; Release: a DELETE), each a WAL flush",
	etcdKey:                   "2 raft entries (a transaction, a delete), each in the WAL, fsynced (concurrent proposals share fsyncs)",
	redisKey:                  "2 AOF appends (SET, the script's DEL), fsynced before the reply (appendfsync always; one fsync per event-loop iteration)",
}

// storeNames are the plot's names of the comparison's rows, by key.
var storeNames = map[string]string{
	"acquire-release/pkg-try": "pglease",
	"acquire-release/pglock":  "pglock",
	etcdKey:                   "etcd",
	redisKey:                  "Redis",
}

// plot returns the cycles/s of every row against clients, one series per
// lock, in the order the rows were measured.
func (c *StoreComparison) plot() Plot {
	p := Plot{Title: "Lock taken and given back: cycles/s against clients", XLabel: "clients (C), each on a key of its own", YLabel: "acquire + release cycles/s"}
	idx := map[string]int{}
	for _, r := range c.Rows {
		i, ok := idx[r.Key]
		if !ok {
			i = len(p.Series)
			idx[r.Key] = i
			p.Series = append(p.Series, Series{Name: cmp.Or(storeNames[r.Key], r.Name)})
		}
		p.Series[i].X = append(p.Series[i].X, float64(r.Clients))
		p.Series[i].Y = append(p.Series[i].Y, r.CyclesPerSec)
	}
	return p
}

// writeMarkdown renders the comparison at each concurrency of clients,
// with the plot at the path plot when it is not empty.
func (c *StoreComparison) writeMarkdown(w io.Writer, clients []int, plot string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("## Against pglock, etcd and Redis")
	p("")
	var vs []string
	for _, name := range knownStores {
		if v, ok := c.Versions[name]; ok {
			vs = append(vs, name+" "+v)
		}
	}
	p("A lock taken and given back (one acquire + release cycle) by C clients, each on a key of its own, with each store's usual Go client: pglease's Go package (TryAcquire + Release), cirello.io/pglock on the same Postgres, an etcd concurrency.Mutex and a Redis SET NX with a compare-and-delete. etcd and Redis are servers the bench starts (%s), with their data on the same disk as Postgres's (same device: %s) and every write made durable before its reply (etcd's WAL fsync, Redis' appendfsync always). Server CPU is the server processes' CPU time per cycle.",
		strings.Join(vs, ", "), c.SameDisk)
	p("")
	if plot != "" {
		p("![Cycles per second against clients for pglease, pglock, etcd and Redis](%s)", plot)
		p("")
	}
	p("| Lock | C | cycles/s | × pglease | p50 ms | p99 ms | Server CPU per cycle | Durably written per cycle |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
	for _, n := range clients {
		base := c.row("acquire-release/pkg-try", n)
		for _, r := range c.Rows {
			if r.Clients != n {
				continue
			}
			ratio := "—"
			if base != nil && base.CyclesPerSec > 0 {
				ratio = fmt.Sprintf("%.2f×", r.CyclesPerSec/base.CyclesPerSec)
			}
			cpu := "—"
			if r.ServerCPUPerCycle > 0 {
				cpu = fmt.Sprintf("%.0f µs", r.ServerCPUPerCycle)
			}
			p("| %s (%s) | %d | %s | %s | %.3f | %.3f | %s | %s |", r.Name, r.Path, n, count(r.CyclesPerSec), ratio, r.Latency.P50, r.Latency.P99, cpu, durableWrites[r.Key])
		}
	}
}

// row returns the comparison's row of key at n clients, or nil.
func (c *StoreComparison) row(key string, n int) *Row { return findRow(c.Rows, key, n) }
