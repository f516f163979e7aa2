package exporter

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// DefaultTimeout bounds a scrape's query when Options.Timeout is zero.
const DefaultTimeout = 5 * time.Second

// ContentType is the media type of what Handler serves: the Prometheus
// text format, version 0.0.4.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// timeoutHeader is the header in which Prometheus sends its scrape timeout,
// in seconds.
const timeoutHeader = "X-Prometheus-Scrape-Timeout-Seconds"

// timeoutMargin is left of Prometheus' scrape timeout to write the answer.
const timeoutMargin = 250 * time.Millisecond

// Series per name: held, expiry and fence per lease; in use and capacity
// per scope (and limit and used per quota: seriesPerQuota).
const (
	seriesPerLease = 3
	seriesPerScope = 2
)

// Options configure an Exporter.
type Options struct {
	// Names and MaxNames select the leases and scopes exported one by one,
	// as pgleaseadmin.Filter says. MaxNames also bounds the jobs
	// (which Names selects too) and the quotas (role and kind, in that
	// order); negative: none.
	Names    string
	MaxNames int
	// Timeout bounds each scrape's query; a shorter scrape timeout sent by
	// Prometheus (X-Prometheus-Scrape-Timeout-Seconds) lowers it. Defaults
	// to DefaultTimeout.
	Timeout time.Duration
	// Log receives a line when the database stops answering and when it
	// answers again (not one per failed scrape). Defaults to slog.Default().
	Log *slog.Logger
}

// Exporter serves the metrics of one pglease database. Each scrape is one
// call of pglease.metrics; when it fails (an outage, a timeout, a revoked
// grant) the scrape still answers, with pglease_up 0 and the exporter's
// own metrics. Safe for concurrent scrapes.
type Exporter struct {
	db   pglease.DB
	opts Options

	scrapeErrors  atomic.Int64
	droppedLeases atomic.Int64 // series
	droppedScopes atomic.Int64 // series
	droppedQuotas atomic.Int64 // series
	droppedLimits atomic.Int64 // series

	mu     sync.Mutex
	failed bool   // the last scrape failed
	cause  string // and why: Explain's words, or "timeout" for any timeoutError
}

// New returns an exporter reading database, a pool whose sessions should
// be read-only and bounded by a statement timeout (cmd/pglease sets both).
func New(database pglease.DB, opts Options) *Exporter {
	opts.Timeout = cmp.Or(opts.Timeout, DefaultTimeout)
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Exporter{db: database, opts: opts}
}

// ServeHTTP answers a scrape of /metrics (GET or HEAD).
func (e *Exporter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	timeout := e.opts.Timeout
	if s, err := strconv.ParseFloat(r.Header.Get(timeoutHeader), 64); err == nil && s > 0 {
		scrape := time.Duration(s * float64(time.Second))
		d := scrape - timeoutMargin
		if d <= 0 {
			d = scrape / 2 // a very short scrape timeout: keep half for the answer
		}
		timeout = min(timeout, d)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	body := e.scrape(ctx, timeout)
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if r.Method == http.MethodGet {
		_, _ = w.Write(body)
	}
}

// Scrape reads the database within ctx and returns the text exposition of
// what it read, or of pglease_up 0 when the read failed.
func (e *Exporter) Scrape(ctx context.Context) []byte {
	var budget time.Duration
	if d, ok := ctx.Deadline(); ok {
		budget = time.Until(d)
	}
	return e.scrape(ctx, budget)
}

// scrape is Scrape, whose ctx ends budget after the scrape began (0: no
// deadline): the time an error names when the database did not answer.
func (e *Exporter) scrape(ctx context.Context, budget time.Duration) []byte {
	start := time.Now()
	m, err := pgleaseadmin.ReadMetrics(ctx, e.db, pgleaseadmin.Filter{Names: e.opts.Names, MaxNames: e.opts.MaxNames})
	took := time.Since(start)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			err = timeoutError{after: timeoutText(budget)}
		}
		e.scrapeErrors.Add(1)
	}
	e.noteOutcome(err)
	var (
		quotas   []quotaUsage
		quotasOK bool
		limits   []pgleaseadmin.LimitLevel
		limitsOK bool
	)
	if err == nil {
		e.droppedLeases.Add(m.LeasesDropped * seriesPerLease)
		e.droppedScopes.Add(m.ScopesDropped * seriesPerScope)
		// Read before the counter of dropped series is written, which
		// then includes this scrape's, as for names.
		var dropped int64
		quotas, dropped, quotasOK = e.readQuotas(ctx, e.maxNames())
		e.droppedQuotas.Add(dropped * seriesPerQuota)
		limits, dropped, limitsOK = e.readLimits(ctx, e.maxNames())
		e.droppedLimits.Add(dropped * seriesPerLimit)
	}

	var w textWriter
	w.family("pglease_up", "gauge", "Whether the last read of the pglease database succeeded (1) or not (0): unreachable, too slow, no grant, no schema.")
	w.sample("pglease_up", boolValue(err == nil))
	w.family("pglease_exporter_scrape_duration_seconds", "gauge", "How long the read of the database took in this scrape.")
	w.sample("pglease_exporter_scrape_duration_seconds", took.Seconds())
	w.family("pglease_exporter_scrape_errors_total", "counter", "Scrapes whose read of the database failed, since the exporter started.")
	w.sampleInt("pglease_exporter_scrape_errors_total", e.scrapeErrors.Load())
	w.family("pglease_exporter_series_dropped_total", "counter",
		"Per-name series left out by --max-series (3 per lease, 2 per slot scope, 2 per quota, 6 per rate limit), summed over the scrapes since the exporter started.")
	w.sampleInt("pglease_exporter_series_dropped_total", e.droppedLeases.Load(), label{"kind", "lease"})
	w.sampleInt("pglease_exporter_series_dropped_total", e.droppedScopes.Load(), label{"kind", "slot"})
	w.sampleInt("pglease_exporter_series_dropped_total", e.droppedQuotas.Load(), label{"kind", "quota"})
	w.sampleInt("pglease_exporter_series_dropped_total", e.droppedLimits.Load(), label{"kind", "limit"})
	if err == nil {
		writeMetrics(&w, m)
		if quotasOK {
			writeQuotas(&w, quotas)
		}
		if limitsOK {
			writeLimits(&w, limits)
		}
		e.writeJobs(ctx, &w)
		e.writeGroups(ctx, &w)
		e.writeTenureEnds(ctx, &w)
	}
	return w.b.Bytes()
}

// writeMetrics writes the database's figures.
func writeMetrics(w *textWriter, m pgleaseadmin.Metrics) {
	w.family("pglease_schema_info", "gauge", "The version of the pglease schema, in label version; always 1.")
	w.sample("pglease_schema_info", 1, label{"version", m.Version})

	w.family("pglease_lease_held", "gauge", "Whether the lease has a live tenure (1) or not (0): expired or released.")
	for _, l := range m.Leases {
		w.sample("pglease_lease_held", boolValue(l.Held), label{"name", l.Name})
	}
	w.family("pglease_lease_expiry_seconds", "gauge",
		"The tenure's end minus now on the server's clock: the time left while held; zero or negative once the tenure ended (how long ago).")
	for _, l := range m.Leases {
		w.sample("pglease_lease_expiry_seconds", l.Expiry.Seconds(), label{"name", l.Name})
	}
	w.family("pglease_lease_fence", "gauge",
		"The fence of the lease's current or last tenure. It only grows, by one per new tenure: its increase is the number of handovers.")
	for _, l := range m.Leases {
		w.sampleInt("pglease_lease_fence", l.Fence, label{"name", l.Name})
	}
	w.family("pglease_leases", "gauge", "Lease rows by state (held, expired, free), over every lease whatever --names and --max-series select.")
	w.sampleInt("pglease_leases", m.LeaseStates.Held, label{"state", "held"})
	w.sampleInt("pglease_leases", m.LeaseStates.Expired, label{"state", "expired"})
	w.sampleInt("pglease_leases", m.LeaseStates.Free, label{"state", "free"})

	w.family("pglease_slot_scope_in_use", "gauge", "Live holders of the slot scope.")
	for _, s := range m.Scopes {
		w.sampleInt("pglease_slot_scope_in_use", int64(s.InUse), label{"scope", s.Scope})
	}
	w.family("pglease_slot_scope_capacity", "gauge",
		"The capacity that admits the scope's next claim: the smallest a live holder claimed with, else the latest claim's (0: unknown).")
	for _, s := range m.Scopes {
		w.sampleInt("pglease_slot_scope_capacity", int64(s.Capacity), label{"scope", s.Scope})
	}
	w.family("pglease_slots", "gauge", "Slot rows by state (held, expired, free), over every scope.")
	w.sampleInt("pglease_slots", m.SlotStates.Held, label{"state", "held"})
	w.sampleInt("pglease_slots", m.SlotStates.Expired, label{"state", "expired"})
	w.sampleInt("pglease_slots", m.SlotStates.Free, label{"state", "free"})

	w.family("pglease_waiters", "gauge", "Refused acquires (kind lease) and claims (kind slot) registered as waiting for a release.")
	w.sampleInt("pglease_waiters", m.LeaseWaiters, label{"kind", "lease"})
	w.sampleInt("pglease_waiters", m.SlotWaiters, label{"kind", "slot"})

	w.family("pglease_table_rows", "gauge", "Rows of each table of schema pglease, counted exactly.")
	for _, t := range m.Tables {
		w.sampleInt("pglease_table_rows", t.Rows, label{"table", t.Name})
	}
	w.family("pglease_table_bytes", "gauge", "Size of each table of schema pglease on disk, with its indexes and TOAST.")
	for _, t := range m.Tables {
		w.sampleInt("pglease_table_bytes", t.Bytes, label{"table", t.Name})
	}
	w.family("pglease_purge_oldest_free_seconds", "gauge",
		"How long the lease (kind lease) or slot scope (kind slot) free for the longest has been free; purge deletes it once this passes its free-for time.")
	w.sample("pglease_purge_oldest_free_seconds", m.LeaseOldestFree.Seconds(), label{"kind", "lease"})
	w.sample("pglease_purge_oldest_free_seconds", m.ScopeOldestFree.Seconds(), label{"kind", "slot"})
	w.family("pglease_purged_rows_total", "counter", "Rows pglease.purge has deleted since the schema was installed.")
	w.sampleInt("pglease_purged_rows_total", m.PurgedRows)
}

// writeJobs writes the run ledger's series, one per job (docs/cron.md):
// when its last success ended, its window's length, when its last run
// started. A schema before 0.3.0 has no ledger: no series then. A failed
// read is logged and leaves the series out; pglease_up says the database
// was read.
func (e *Exporter) writeJobs(ctx context.Context, w *textWriter) {
	jobs, err := pgleaseadmin.Jobs(ctx, e.db, pgleaseadmin.Filter{Names: e.opts.Names, MaxNames: e.opts.MaxNames})
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42883" { // undefined_function: no ledger before 0.3.0
			e.opts.Log.Warn("pglease exporter: read the run ledger", "err", err)
		}
		return
	}
	w.family("pglease_job_last_success_timestamp_seconds", "gauge",
		"When the job's newest successful run ended (Unix seconds, server clock); 0 when the ledger keeps none.")
	for _, j := range jobs {
		w.sample("pglease_job_last_success_timestamp_seconds", unixSeconds(j.LastSuccess), label{"name", j.Name})
	}
	w.family("pglease_job_window_seconds", "gauge", "The job's --once-per window, as its newest run was begun with.")
	for _, j := range jobs {
		w.sample("pglease_job_window_seconds", j.Window.Seconds(), label{"name", j.Name})
	}
	w.family("pglease_job_last_run_timestamp_seconds", "gauge", "When the job's newest run started (Unix seconds, server clock).")
	for _, j := range jobs {
		w.sample("pglease_job_last_run_timestamp_seconds", unixSeconds(j.Last.StartedAt), label{"name", j.Name})
	}
}

// writeGroups writes the shard groups' series (docs/groups.md): per group
// its shards, live members and unowned shards, and per live member the
// shards it owns (members are a fleet's workers: as many series as
// workers). A schema before 0.3.0 has no groups: no series then. A failed
// read is logged and leaves the series out.
func (e *Exporter) writeGroups(ctx context.Context, w *textWriter) {
	groups, err := pgleaseadmin.Groups(ctx, e.db)
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42883" { // undefined_function: no groups before 0.3.0
			e.opts.Log.Warn("pglease exporter: read the shard groups", "err", err)
		}
		return
	}
	w.family("pglease_group_shards", "gauge", "The shard group's number of shards.")
	for _, g := range groups {
		w.sampleInt("pglease_group_shards", int64(g.Shards), label{"group", g.Name})
	}
	w.family("pglease_group_members", "gauge", "The shard group's live members.")
	for _, g := range groups {
		w.sampleInt("pglease_group_members", int64(len(g.Members)), label{"group", g.Name})
	}
	w.family("pglease_group_unowned_shards", "gauge", "The shard group's shards that no live member owns.")
	for _, g := range groups {
		w.sampleInt("pglease_group_unowned_shards", int64(g.Unowned), label{"group", g.Name})
	}
	w.family("pglease_group_member_shards", "gauge", "The shards a live member of the group owns (those it is handing over included).")
	for _, g := range groups {
		for _, m := range g.Members {
			w.sampleInt("pglease_group_member_shards", int64(m.Shards), label{"group", g.Name}, label{"member", m.Name})
		}
	}
}

// writeTenureEnds writes the tenures ended by how, of the names whose
// tenure history is on (docs/tenure-history.md): six series whatever the
// fleet, one per way a tenure ends. A schema before 0.4.0 has no history:
// no series then. A failed read is logged and leaves the series out.
func (e *Exporter) writeTenureEnds(ctx context.Context, w *textWriter) {
	ends, err := pgleaseadmin.TenureEnds(ctx, e.db)
	if err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42883" { // undefined_function: before 0.4.0
			e.opts.Log.Warn("pglease exporter: read the tenures ended", "err", err)
		}
		return
	}
	w.family("pglease_tenures_ended_total", "counter",
		"Tenures ended of names whose tenure history is on, by how (released, handed_over, forced, expired, taken_over, purged).")
	for _, how := range []string{"released", "handed_over", "forced", "expired", "taken_over", "purged"} {
		w.sampleInt("pglease_tenures_ended_total", ends[how], label{"how", how})
	}
}

// maxNames is how many names of each kind (leases, scopes, jobs, quotas,
// rate limits)
// are exported one by one: Options.MaxNames, its default when zero, none
// when negative.
func (e *Exporter) maxNames() int {
	return max(cmp.Or(e.opts.MaxNames, pgleaseadmin.DefaultMaxNames), 0)
}

// unixSeconds is t as Unix seconds, 0 for the zero time.
func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMicro()) / 1e6
}

// noteOutcome logs a line when the database stops answering, when the
// reason changes, and when it answers again.
func (e *Exporter) noteOutcome(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case err == nil && e.failed:
		e.failed, e.cause = false, ""
		e.opts.Log.Info("exporter: the database answers again; pglease_up 1")
	case err != nil:
		// Scrapes time out after slightly different times (each one's
		// deadline comes from its own request): one outage all the same.
		cause := "timeout"
		if !errors.As(err, new(timeoutError)) {
			cause = Explain(err)
		}
		if !e.failed || cause != e.cause {
			e.opts.Log.Warn("exporter: cannot read the database; pglease_up 0", "err", Explain(err))
		}
		e.failed, e.cause = true, cause
	}
}

// Explain words err, an error of pgleaseadmin.ReadMetrics, with what to do
// about it when that is known.
func Explain(err error) string {
	msg := err.Error()
	switch {
	case errors.Is(err, pglease.ErrPermissionDenied):
		return msg + "; hint: the exporter's role needs role pglease_client: GRANT pglease_client TO <role>"
	case errors.Is(err, pglease.ErrNotMigrated):
		return msg + "; hint: schema pglease is missing or older than 0.3.0 (pglease.metrics): run `pglease migrate up`"
	}
	return msg
}

// timeoutError: the database gave no answer within a scrape's timeout.
type timeoutError struct{ after string }

func (e timeoutError) Error() string { return "no answer within the scrape's timeout of " + e.after }

// timeoutText formats a scrape's budget for a timeout's error.
func timeoutText(budget time.Duration) string {
	if budget <= 0 {
		return "?"
	}
	return budget.Round(time.Millisecond).String()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
