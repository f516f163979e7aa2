package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/cmd/pglease/internal/exporter"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// Defaults of pglease exporter.
const (
	defaultExporterListen = "127.0.0.1:9841"
	// exporterConns is the exporter's pool: a scrape uses one connection;
	// two Prometheus servers scraping at once get one each.
	exporterConns = 2
	// shutdownTimeout bounds the scrapes in flight at shutdown.
	shutdownTimeout = 10 * time.Second
	// maxExporterNames and maxNamesPattern are pglease.metrics' bounds.
	maxExporterNames = 1_000_000
	maxNamesPattern  = 1024
)

var exporterCommand = &command{
	name:    "exporter",
	summary: "Serve the database's leases, slots and tables as Prometheus metrics",
	usage: `
Usage: pglease exporter [--listen ADDR] [--names REGEX] [--max-series N]
                        [--timeout D] [--database URL]

Serves /metrics in the Prometheus text format: each scrape makes one
read-only call of pglease.metrics. Per lease: pglease_lease_held,
pglease_lease_expiry_seconds, pglease_lease_fence (it only grows: its
increase is the handovers); per slot scope: pglease_slot_scope_in_use and
pglease_slot_scope_capacity; per role's quota (role, kind):
pglease_quota_limit_rows and pglease_quota_used_rows; per configured rate
limit (target, never per key): pglease_limit_burst, _period_seconds,
_remaining_min, _buckets, _limited_buckets, _reserved_tokens (what the
role may see: docs/limits.md#levels); totals by state,
waiters, table rows and bytes, the oldest free row (purge health), the
schema version, and pglease_up. Every metric: docs/observability.md.

The role needs role pglease_client and nothing else (GRANT pglease_client
TO ...); its sessions are read-only. At start the exporter checks the
address, the database, the schema (0.3.0 or later) and the grant, and
exits 1 with one line when one fails (2 for bad flags). Once serving,
a scrape always answers within its timeout: when the database does not
answer, with pglease_up 0 (one log line when it stops answering, one
when it answers again). SIGINT or SIGTERM stop it (exit 0).

--names and --max-series bound the per-name series: only lease and
scope names matching REGEX (a POSIX regular expression, as PostgreSQL's
~: unanchored), and of those the first N in the order of the primary key
(the database's collation), are exported one by one; N bounds the quotas
and the rate limits (the first N by target; --names does not select
them) too. The series left out are counted in
pglease_exporter_series_dropped_total. The totals count every row.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db   dbFlag
			opts exporterOptions
		)
		db.register(fs)
		fs.StringVar(&opts.listen, "listen", defaultExporterListen, "`ADDR`ess to serve /metrics on, host:port (:9841 for every interface)")
		fs.StringVar(&opts.names, "names", "", "export only lease and scope names matching this `REGEX` one by one (default: every name)")
		fs.IntVar(&opts.maxSeries, "max-series", pgleaseadmin.DefaultMaxNames, "export at most `N` lease names and N scope names one by one (0: totals only)")
		fs.DurationVar(&opts.timeout, "timeout", exporter.DefaultTimeout, "bound of each scrape's query (Prometheus' scrape timeout, when shorter, lowers it)")
		return func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("exporter", "takes no arguments, got %q", args)
			}
			switch {
			case opts.maxSeries < 0 || opts.maxSeries > maxExporterNames:
				return usagef("exporter", "--max-series must be from 0 to %d, got %d", maxExporterNames, opts.maxSeries)
			case opts.timeout <= 0:
				return usagef("exporter", "--timeout must be more than 0, got %s", opts.timeout)
			case len(opts.names) > maxNamesPattern:
				return usagef("exporter", "--names must be at most %d bytes long, got %d bytes", maxNamesPattern, len(opts.names))
			}
			if _, _, err := net.SplitHostPort(opts.listen); err != nil {
				return usagef("exporter", "--listen %q: %v", opts.listen, addrReason(err))
			}
			return a.exporter(ctx, &db, opts)
		}
	},
}

// exporterOptions are the flags of pglease exporter.
type exporterOptions struct {
	listen    string
	names     string
	maxSeries int
	timeout   time.Duration
}

func (a *app) exporter(ctx context.Context, db *dbFlag, opts exporterOptions) error {
	t, err := a.parseTarget(db, "exporter")
	if err != nil {
		return err
	}
	// Read-only sessions, each statement bounded below the scrape's own
	// timeout, unless the connection string says otherwise.
	params := t.cfg.ConnConfig.RuntimeParams
	if _, ok := params["default_transaction_read_only"]; !ok {
		params["default_transaction_read_only"] = "on"
	}
	if _, ok := params["statement_timeout"]; !ok {
		params["statement_timeout"] = strconv.FormatInt(opts.timeout.Milliseconds(), 10)
	}
	t.cfg.MaxConns = exporterConns

	ln, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return failf("exporter: cannot listen on %s: %s; hint: pick a free port, or an address of this host", opts.listen, addrReason(err))
	}
	defer ln.Close()

	pool, err := a.connect(ctx, t)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := a.requireSchema(ctx, pool, t); err != nil {
		return err
	}
	// One read at start: the grant, the schema version and --names are
	// checked before serving.
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	_, err = pgleaseadmin.ReadMetrics(cctx, pool, pgleaseadmin.Filter{Names: opts.names, MaxNames: maxNamesOf(opts.maxSeries)})
	cancel()
	switch {
	case errors.Is(err, pglease.ErrInvalidArgument):
		return usagef("exporter", "--names %q: %s", opts.names, detail(err))
	case errors.Is(err, pglease.ErrPermissionDenied):
		return failf("exporter: permission denied reading %s as role %s; hint: the exporter's role needs role pglease_client: GRANT pglease_client TO %s",
			t, t.cfg.ConnConfig.User, quoteIdent(t.cfg.ConnConfig.User))
	case errors.Is(err, pglease.ErrNotMigrated):
		return failf("exporter: schema pglease in %s is version %s, which has no pglease.metrics (0.3.0 or later); hint: run `pglease migrate up`",
			t, schemaVersion(ctx, pool))
	case err != nil:
		return a.queryError(ctx, "exporter: read the database", err)
	}

	log := newLogger(a.stderr, true)
	exp := exporter.New(pool, exporter.Options{
		Names: opts.names, MaxNames: maxNamesOf(opts.maxSeries), Timeout: opts.timeout, Log: log,
	})
	mux := http.NewServeMux()
	mux.Handle("/metrics", exp)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "pglease exporter: metrics at /metrics")
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// A scrape's answer is written after its query, which the timeout
		// bounds; the write gets as long again.
		WriteTimeout: 2*opts.timeout + 10*time.Second,
	}
	fmt.Fprintf(a.stdout, "pglease exporter: serving http://%s/metrics for %s\n", ln.Addr(), t)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return failf("exporter: serve on %s: %v", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return failf("exporter: shut down: %v", err)
	}
	<-served
	return nil
}

// maxNamesOf maps --max-series to pgleaseadmin.Filter.MaxNames,
// whose zero means the default: 0 is "none" there as -1.
func maxNamesOf(maxSeries int) int {
	if maxSeries == 0 {
		return -1
	}
	return maxSeries
}

// schemaVersion returns the version of schema pglease, for a message:
// pglease.version(), which 0.1.0 does not have.
func schemaVersion(ctx context.Context, pool *pgxpool.Pool) string {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	var v string
	if err := pool.QueryRow(cctx, `SELECT pglease.version()`).Scan(&v); err != nil {
		return "0.1.0"
	}
	return v
}

// addrReason returns why an address was refused, without repeating it.
func addrReason(err error) string {
	if ae, ok := errors.AsType[*net.AddrError](err); ok {
		return ae.Err
	}
	if oe, ok := errors.AsType[*net.OpError](err); ok && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

// quoteIdent quotes a role name for a GRANT statement.
func quoteIdent(s string) string {
	if s == "" {
		return "<role>"
	}
	return pgx.Identifier{s}.Sanitize()
}
