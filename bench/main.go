// Command bench measures pglease against the physical limit of one
// Postgres server (a single-row UPDATE per transaction), against
// cirello.io/pglock and advisory locks, and checks pglease's performance
// targets. It creates a scratch database on the server, applies pglease's
// migrations to it, runs everything in one go, drops the database, and
// writes the results as markdown (-out) and JSON (-json).
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// defaultURL is the server used when neither -url nor
// PGLEASE_BENCH_DATABASE_URL says otherwise.
const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// dropTimeout bounds dropping the scratch database at the end, also after
// an interrupt.
const dropTimeout = 30 * time.Second

type config struct {
	url         string
	cpuProfile  string
	cell        time.Duration
	rounds      int
	clients     []int
	slotClients []int
	out         string
	json        string
	pgbench     string
	pgbenchTime time.Duration
	handovers   int // release handovers, client and supervisor level
	crashes     int // crash takeovers
	crashTTL    time.Duration
	leases      int
	purgeNames  int
	purgeOnly   bool
	// keeperLeases, when set, are the sizes of the keeper comparison
	// (keeper.go), run alone.
	keeperLeases []int
	// heldLeases, when set, are the sizes of the held-leases run
	// (held.go), run alone.
	heldLeases []int
	// waiters, when more than 0, runs only the waiters run (waiters.go).
	waiters int
	// metricsOnly runs only the metrics overhead comparison (metrics.go).
	metricsOnly bool
	// fencedOnly runs only the fenced-write comparison (fenced.go).
	fencedOnly bool
	// scrapeLeases, when set, are the sizes of the scrape cost
	// (scrape.go), run alone.
	scrapeLeases []int
	// stores are the other stores of the comparison (compare.go): etcd,
	// redis; storeDir is where their data goes; storesOnly runs only the
	// comparison.
	stores       []string
	storeClients []int
	storeDir     string
	storesOnly   bool
	// plot is the SVG file the comparison's plot goes to (plot.go).
	plot string
	// cronRuns is how many cycles of each kind the cron section runs
	// (cron.go); cronOnly runs only that section.
	cronRuns int
	cronOnly bool
	// fullScrapeLeases are the sizes of the scrape section in the full
	// run.
	fullScrapeLeases []int
	// slotsOnly runs only the slot section (slotsonly.go).
	slotsOnly bool
	// leaderOnly runs only the leadership section (leader.go).
	leaderOnly bool
	// batchOnly runs only the batched calls' section (batch.go).
	batchOnly bool
	// historyOnly runs only the tenure history section (history.go).
	historyOnly bool
	// groupsOnly runs only the shard-group section (groups.go).
	groupsOnly bool
	// limitsOnly runs only the rate limits' section (limits.go), against
	// the machine's Redis at redisAddr.
	limitsOnly bool
	redisAddr  string
}

func main() {
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	if ran, err := proxyCommand(os.Args[1:]); ran { // bench proxy: see proxy.go
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	if ran, err := etcdCommand(os.Args[1:]); ran { // the etcd server of -stores: see etcd.go
		if err != nil {
			log.Fatal(err)
		}
		return
	}
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", cmp.Or(os.Getenv("PGLEASE_BENCH_DATABASE_URL"), defaultURL),
		"server to create the scratch database on (default from PGLEASE_BENCH_DATABASE_URL)")
	fs.DurationVar(&cfg.cell, "duration", 2*time.Second, "measured time per row and concurrency")
	fs.IntVar(&cfg.rounds, "rounds", 2, "turns each cell's time is split into, interleaved with the other rows")
	clients := fs.String("clients", "1,8,32", "concurrencies of the throughput table")
	slotClients := fs.String("slot-clients", "1,8", "concurrencies of the slot capacity sweep")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write the bench process's CPU profile (the Go clients' side of every row) to this file")
	fs.StringVar(&cfg.out, "out", "../BENCHMARKS.md", "markdown file to write (also printed)")
	fs.StringVar(&cfg.json, "json", "results/latest.json", "JSON file to write with every figure")
	fs.StringVar(&cfg.pgbench, "pgbench", "", "pgbench binary (default: from PATH, else "+pgbenchFallback+")")
	fs.DurationVar(&cfg.pgbenchTime, "pgbench-time", 3*time.Second, "pgbench cross-check duration")
	fs.IntVar(&cfg.handovers, "handovers", 200, "release handovers, at client and at supervisor level")
	fs.IntVar(&cfg.crashes, "crash-handovers", 50, "crash takeovers")
	fs.DurationVar(&cfg.crashTTL, "crash-ttl", 200*time.Millisecond, "TTL of the lease in the crash takeovers")
	fs.IntVar(&cfg.leases, "renew-holder-leases", 1000, "leases of the renew_holder comparison")
	fs.IntVar(&cfg.purgeNames, "purge-names", 1_000_000, "unique names of the table-size run, with and without purge (0: skip it)")
	fs.BoolVar(&cfg.purgeOnly, "purge-only", false, "run only the table-size run: print its section and write -json, leave -out alone")
	fs.BoolVar(&cfg.fencedOnly, "fenced-only", false, "run only the fenced-write comparison (an application UPDATE with and without assert_held, in a transaction and in one round trip with SendFenced, at -clients) and print its section")
	fs.BoolVar(&cfg.metricsOnly, "metrics-only", false, "run only the metrics overhead comparison (renew with and without an OpenTelemetry SDK, and without again as an A/A control, at -clients, each cell at least 12s in 12 turns) and print its section")
	keeperLeases := fs.String("keeper-leases", "", "run only the keeper comparison, for these lease counts (e.g. 1000,10000), and print its section")
	fs.IntVar(&cfg.waiters, "waiters", 0, "run only the waiters run (this many standbys blocked in Acquire on one lease: server CPU while they wait, handover time, acquire calls per handover) and print its section")
	heldLeases := fs.String("held-leases", "", "run only the held-leases run (one holder, renew_holder against a bare UPDATE, server CPU per lease), for these lease counts (e.g. 10000,100000,1000000), and print its section")
	scrapeLeases := fs.String("scrape-leases", "", "run only the scrape cost of pglease.metrics, for these lease counts (e.g. 10000,100000), and print its section")
	stores := fs.String("stores", "etcd,redis", "stores compared with pglease's acquire + release, each a server the bench starts (etcd, redis; none: skip the comparison)")
	storeClients := fs.String("store-clients", "1,2,4,8,16,32", "concurrencies of the comparison with pglock and -stores, and of its plot")
	fs.StringVar(&cfg.plot, "plot", "../docs/img/bench-throughput.svg", "SVG file to draw the comparison's cycles/s against clients to (linked from -out)")
	fs.StringVar(&cfg.storeDir, "store-dir", os.TempDir(), "where the compared stores keep their data: put it on the Postgres server's disk")
	fs.BoolVar(&cfg.storesOnly, "stores-only", false, "run only the comparison with -stores, at -store-clients, and print its section")
	fs.BoolVar(&cfg.cronOnly, "cron-only", false, "run only the cron section (the run ledger's cost per run against acquire + release) and print it")
	fs.IntVar(&cfg.cronRuns, "cron-runs", 2000, "cycles of each kind in the cron section")
	fullScrape := fs.String("full-scrape-leases", "10000", "lease counts of the scrape section in the full run")
	fs.BoolVar(&cfg.historyOnly, "history-only", false, "run only the tenure history section (acquire + release and renew at C=8, names with history on against names with it off) and print it with its targets")
	fs.BoolVar(&cfg.batchOnly, "batch-only", false, "run only the batched calls' section (8 goroutines sharing one pglease.Client, coalesced into acquire_batch/release_batch, against pglock and Redis one command at a time and pipelined; Redis started under -store-dir) and print it")
	fs.BoolVar(&cfg.slotsOnly, "slots-only", false, "run only the slot section (claim + release against a lease's acquire + release at -clients, weighted claims of 1, 4 and 16 units of capacity 64, each cell at least 12s in 12 turns; renew_slot's server time and HOT share) and print it")
	fs.BoolVar(&cfg.leaderOnly, "leader-only", false, "run only the leadership section (handover on request over -handovers, renew_lease, acquire with a value, observing at C=8) and print it")
	fs.BoolVar(&cfg.groupsOnly, "groups-only", false, "run only the shard-group section (M=1024 with N=1, 4, 16: intervals and time to converge after a join and a kill, moves against the minimum, server time per interval; M=10000 with N=16) and print it")
	fs.BoolVar(&cfg.limitsOnly, "limits-only", false, "run only the rate limits' section (pglease.take at -clients against redis_rate's GCRA script on the machine's Redis, without persistence and with appendfsync always; the floor UPDATE; take + INSERT in a transaction; coalesced takes) and print it")
	fs.StringVar(&cfg.redisAddr, "redis", cmp.Or(os.Getenv("PGLEASE_BENCH_REDIS_ADDR"), defaultRedisAddr),
		"the machine's Redis for the rate limits' section, host:port (default from PGLEASE_BENCH_REDIS_ADDR); its persistence is set for the run and restored after")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if cfg.cronRuns < 1 {
		return cfg, errors.New("-cron-runs must be at least 1")
	}
	var err error
	if cfg.fullScrapeLeases, err = parseInts(*fullScrape); err != nil {
		return cfg, fmt.Errorf("-full-scrape-leases: %w", err)
	}
	if *scrapeLeases != "" {
		if cfg.scrapeLeases, err = parseInts(*scrapeLeases); err != nil {
			return cfg, fmt.Errorf("-scrape-leases: %w", err)
		}
	}
	if *heldLeases != "" {
		if cfg.heldLeases, err = parseInts(*heldLeases); err != nil {
			return cfg, fmt.Errorf("-held-leases: %w", err)
		}
	}
	if *keeperLeases != "" {
		if cfg.keeperLeases, err = parseInts(*keeperLeases); err != nil {
			return cfg, fmt.Errorf("-keeper-leases: %w", err)
		}
	}
	if cfg.stores, err = parseStores(*stores); err != nil {
		return cfg, fmt.Errorf("-stores: %w", err)
	}
	if cfg.storesOnly && len(cfg.stores) == 0 {
		return cfg, errors.New("-stores-only needs -stores to name at least one store")
	}
	if cfg.storeClients, err = parseInts(*storeClients); err != nil {
		return cfg, fmt.Errorf("-store-clients: %w", err)
	}
	if cfg.clients, err = parseInts(*clients); err != nil {
		return cfg, fmt.Errorf("-clients: %w", err)
	}
	if cfg.slotClients, err = parseInts(*slotClients); err != nil {
		return cfg, fmt.Errorf("-slot-clients: %w", err)
	}
	switch {
	case cfg.rounds < 1 || cfg.cell/time.Duration(cfg.rounds) < 10*time.Millisecond:
		return cfg, errors.New("-duration / -rounds must be at least 10ms")
	case cfg.handovers < 1 || cfg.crashes < 1 || cfg.leases < 1:
		return cfg, errors.New("-handovers, -crash-handovers and -renew-holder-leases must be at least 1")
	case cfg.purgeNames < 0 || (cfg.purgeOnly && cfg.purgeNames == 0):
		return cfg, errors.New("-purge-names must be 0 or more, and more than 0 with -purge-only")
	}
	return cfg, nil
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func run(ctx context.Context, cfg config) (err error) {
	r := &Report{
		Command: command(),
		Date:    time.Now(),
		Host:    readHost(),
		Run: RunSettings{
			CellSeconds: cfg.cell.Seconds(), Rounds: cfg.rounds,
			Clients: cfg.clients, SlotClients: cfg.slotClients, StoreClients: cfg.storeClients,
		},
	}
	if r.Server, err = readServer(ctx, cfg.url); err != nil {
		return err
	}
	if cfg.purgeOnly {
		return r.runPurge(ctx, cfg)
	}
	if len(cfg.heldLeases) > 0 {
		return runHeldBench(ctx, cfg)
	}
	if cfg.waiters > 0 {
		return runWaitersBench(ctx, cfg)
	}
	if len(cfg.keeperLeases) > 0 {
		return runKeeperBench(ctx, cfg)
	}
	if cfg.metricsOnly {
		return runMetricsBench(ctx, cfg)
	}
	if cfg.fencedOnly {
		return runFencedBench(ctx, cfg)
	}
	if len(cfg.scrapeLeases) > 0 {
		return runScrapeBench(ctx, cfg)
	}
	if cfg.storesOnly {
		return runStoresBench(ctx, cfg)
	}
	if cfg.cronOnly {
		return runCronBench(ctx, cfg)
	}
	if cfg.leaderOnly {
		return runLeaderBench(ctx, cfg)
	}
	if cfg.batchOnly {
		return runBatchBench(ctx, cfg)
	}
	if cfg.historyOnly {
		return runHistoryBench(ctx, cfg)
	}
	if cfg.slotsOnly {
		return runSlotsBench(ctx, cfg)
	}
	if cfg.groupsOnly {
		return runGroupsBench(ctx, cfg)
	}
	if cfg.limitsOnly {
		return runLimitsBench(ctx, cfg)
	}
	sc, err := createScratch(ctx, cfg.url, scratchName(""))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	log.Printf("scratch database %s on %s", sc.name, r.Server.Version)
	if err := e.exec(ctx, limitTableSQL); err != nil {
		return fmt.Errorf("create the limit's table: %w", err)
	}
	if err := e.exec(ctx, floorFunctionsSQL); err != nil {
		return fmt.Errorf("create the floor's functions: %w", err)
	}
	if err := e.createPglockTable(); err != nil {
		return fmt.Errorf("create pglock's table: %w", err)
	}
	if err := e.exec(ctx, fencedTableSQL); err != nil {
		return fmt.Errorf("create the application table: %w", err)
	}

	ws := append(e.leaseWorkloads(), e.pglockWorkloads()...)
	for _, n := range cfg.clients {
		log.Printf("throughput at C=%d: %d rows × %s", n, len(ws), cfg.cell)
		rows, err := measure(ctx, e, ws, n, cfg)
		if err != nil {
			return err
		}
		r.Throughput = append(r.Throughput, rows...)
	}

	log.Printf("diagnostics at C=%d", targetClients)
	if r.Diagnostics, err = measure(ctx, e, e.diagnosticWorkloads(), targetClients, cfg); err != nil {
		return err
	}
	if r.ExecTimes, err = e.renewExecTimes(ctx); err != nil {
		return fmt.Errorf("execution times: %w", err)
	}

	log.Printf("pgbench cross-check for %s", cfg.pgbenchTime)
	if r.Pgbench, err = e.runPgbench(ctx, cfg.pgbench, targetClients, cfg.pgbenchTime); err != nil {
		return err
	}

	if r.Slots, r.SlotExec, err = e.benchSlots(ctx, cfg); err != nil {
		return err
	}
	if err := e.exec(ctx, slotCyclesVacuumSQL); err != nil {
		return err
	}
	if r.SlotCycles, err = e.benchSlotCycles(ctx, cfg, []int{targetClients}); err != nil {
		return err
	}
	if r.Metrics, err = e.benchMetrics(ctx, cfg, []int{targetClients}); err != nil {
		return err
	}

	log.Printf("renew_holder against %d single renews", cfg.leases)
	if r.RenewHolder, err = e.benchRenewHolder(ctx, cfg.leases, cfg.rounds); err != nil {
		return fmt.Errorf("renew_holder: %w", err)
	}

	log.Printf("%d release handovers and %d crash takeovers", cfg.handovers, cfg.crashes)
	if r.Handover, err = e.benchHandover(ctx, cfg.handovers, cfg.crashes, cfg.crashTTL); err != nil {
		return fmt.Errorf("handover: %w", err)
	}
	log.Printf("%d supervisor handovers", cfg.handovers)
	sup, err := e.benchSupervisorHandover(ctx, cfg.handovers)
	if err != nil {
		return err
	}
	r.Handover = append(r.Handover, sup)

	if r.Fenced, err = e.benchFenced(ctx, cfg, []int{targetClients}); err != nil {
		return fmt.Errorf("fenced writes: %w", err)
	}

	if len(cfg.stores) > 0 {
		if r.Stores, err = measureStores(ctx, e, cfg); err != nil {
			return fmt.Errorf("against %s: %w", strings.Join(cfg.stores, " and "), err)
		}
	}

	if r.Batch, err = measureBatch(ctx, cfg); err != nil {
		return fmt.Errorf("batched calls: %w", err)
	}
	if r.History, err = measureHistory(ctx, cfg); err != nil {
		return fmt.Errorf("tenure history: %w", err)
	}
	log.Printf("leadership: %d handovers on request", cfg.handovers)
	if r.Leader, err = measureLeader(ctx, cfg); err != nil {
		return fmt.Errorf("leadership: %w", err)
	}
	if r.Cron, err = measureCron(ctx, cfg, cfg.cronRuns); err != nil {
		return fmt.Errorf("cron: %w", err)
	}
	if r.Scrape, err = measureScrape(ctx, cfg, cfg.fullScrapeLeases); err != nil {
		return fmt.Errorf("scrape: %w", err)
	}
	if r.Limits, err = measureLimits(ctx, cfg); err != nil {
		return fmt.Errorf("rate limits: %w", err)
	}

	if cfg.purgeNames > 0 {
		return r.runPurge(ctx, cfg)
	}
	r.Host.LoadEnd = loadavg()
	r.checkTargets()
	return r.write(cfg)
}

// runPurge runs the table-size run as the report's last section, then
// writes the report.
func (r *Report) runPurge(ctx context.Context, cfg config) error {
	log.Printf("table size: %d unique names, with and without purge", cfg.purgeNames)
	p, err := benchPurge(ctx, cfg.url, cfg.purgeNames)
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	r.Purge = &p
	r.Host.LoadEnd = loadavg()
	if cfg.purgeOnly {
		r.checkPurge()
		return r.writePurgeOnly(cfg)
	}
	r.checkTargets()
	return r.write(cfg)
}

// measure runs the group ws, whose first workload is the limit, at n
// clients on e and returns its rows.
func measure(ctx context.Context, e *env, ws []workload, n int, cfg config) ([]Row, error) {
	ts, err := runGroupOn(ctx, e, ws, n, cfg)
	if err != nil {
		return nil, err
	}
	limit := ts[0].opsPerSec()
	rows := make([]Row, len(ws))
	for i, w := range ws {
		rows[i] = newRow(w, n, ts[i])
		rows[i].VsLimit = rows[i].OpsPerSec / limit
	}
	return rows, nil
}

// measureAt runs the group ws at each of clients on e, interleaved turn by
// turn at each, and returns their rows, logging each group as what.
func measureAt(ctx context.Context, e *env, what string, ws []workload, clients []int, cfg config) ([]Row, error) {
	var rows []Row
	for _, n := range clients {
		log.Printf("%s at C=%d: %d rows × %s in %d turns", what, n, len(ws), cfg.cell, cfg.rounds)
		ts, err := runGroupOn(ctx, e, ws, n, cfg)
		if err != nil {
			return nil, err
		}
		for i, w := range ws {
			rows = append(rows, newRow(w, n, ts[i]))
		}
	}
	return rows, nil
}

// runGroupOn runs the group ws at n clients while e has a pool capped at
// two connections per client, so that no client waits for a connection even
// if a client library holds a second one.
func runGroupOn(ctx context.Context, e *env, ws []workload, n int, cfg config) (ts []*tally, err error) {
	err = e.withPool(ctx, 2*n, func() error {
		ts, err = runGroup(ctx, ws, n, cfg.cell, cfg.rounds)
		return err
	})
	return ts, err
}

// dropScratch drops s, also when ctx has ended (an interrupt).
func dropScratch(ctx context.Context, s *scratch) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dropTimeout)
	defer cancel()
	return s.drop(dctx)
}

// write draws the plot to cfg.plot, prints the markdown and writes it to
// cfg.out, whole, and the JSON to cfg.json.
func (r *Report) write(cfg config) error {
	plotLink := ""
	if r.Stores != nil && cfg.plot != "" {
		var svg bytes.Buffer
		if err := r.Stores.plot().WriteSVG(&svg); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(cfg.plot), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(cfg.plot, svg.Bytes(), 0o644); err != nil {
			return err
		}
		rel, err := filepath.Rel(filepath.Dir(cfg.out), cfg.plot)
		if err != nil {
			return err
		}
		plotLink = filepath.ToSlash(rel)
	}
	var md bytes.Buffer
	r.writeMarkdown(&md, plotLink)
	if _, err := os.Stdout.Write(md.Bytes()); err != nil {
		return err
	}
	if err := os.WriteFile(cfg.out, md.Bytes(), 0o644); err != nil {
		return err
	}
	return r.writeJSON(cfg.json)
}

// writeJSON writes every figure of r to path, creating its directory.
func (r *Report) writeJSON(path string) error {
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(js, '\n'), 0o644)
}

// writePurgeOnly prints the table-size section of a -purge-only run and
// writes the JSON to cfg.json; BENCHMARKS.md stays as the last full run
// wrote it.
func (r *Report) writePurgeOnly(cfg config) error {
	var md bytes.Buffer
	r.writePurgeMarkdown(&md)
	if _, err := os.Stdout.Write(md.Bytes()); err != nil {
		return err
	}
	return r.writeJSON(cfg.json)
}

// command returns how this run was started, for the report's header, with
// any password in -url hidden.
func command() string {
	args := make([]string, 0, len(os.Args))
	for _, a := range os.Args[1:] {
		if v, ok := strings.CutPrefix(a, "-url="); ok {
			a = "-url=" + redact(v)
		} else {
			a = redact(a)
		}
		args = append(args, a)
	}
	return strings.TrimSpace("cd bench && go run . " + strings.Join(args, " "))
}

// pglockVersion is the version of cirello.io/pglock built in.
var pglockVersion = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "cirello.io/pglock" {
				return d.Version
			}
		}
	}
	return "(unknown)"
}()
