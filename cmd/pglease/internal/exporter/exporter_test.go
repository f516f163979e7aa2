package exporter

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/obstest"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestEscaping(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain/name-1", "plain/name-1"},
		{`quote"`, `quote\"`},
		{`back\slash`, `back\\slash`},
		{"new\nline", `new\nline`},
		{"tab\tand\rcr", "tab\tand\rcr"},
		{`\"` + "\n", `\\\"\n`},
		{"ß日本🔒", "ß日本🔒"},
		{"bad\xffutf8", "bad\uFFFDutf8"},
		{"{a=\"b\"}", `{a=\"b\"}`},
	} {
		if got := escapeLabelValue(tc.in); got != tc.want {
			t.Errorf("escapeLabelValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got, want := escapeHelp("a\\b\nc \"d\""), `a\\b\nc "d"`; got != want {
		t.Errorf("escapeHelp = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0"}, {1, "1"}, {-3, "-3"}, {59.895884, "59.895884"}, {-0.5, "-0.5"},
		{1e20, "1e+20"}, {math.Inf(1), "+Inf"}, {math.Inf(-1), "-Inf"}, {math.NaN(), "NaN"},
	} {
		if got := formatValue(tc.in); got != tc.want {
			t.Errorf("formatValue(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// parseExposition parses body strictly (obstest.ParseText), failing the
// test on any error.
func parseExposition(t *testing.T, body string) map[string]obstest.Series {
	t.Helper()
	got, err := obstest.ParseText(body)
	if err != nil {
		t.Fatalf("parse the exposition: %v\n%s", err, body)
	}
	return got
}

// logBuffer collects log lines, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLog() (*slog.Logger, *logBuffer) {
	var b logBuffer
	return slog.New(slog.NewTextHandler(&b, nil)), &b
}

// scrape GETs /metrics from h with Prometheus' timeout header when timeout
// is set, and returns the body and how long it took.
func scrape(t *testing.T, h http.Handler, timeout time.Duration) (string, time.Duration) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if timeout > 0 {
		req.Header.Set(timeoutHeader, strconv.FormatFloat(timeout.Seconds(), 'f', -1, 64))
	}
	rec := httptest.NewRecorder()
	start := time.Now()
	h.ServeHTTP(rec, req)
	took := time.Since(start)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != ContentType {
		t.Fatalf("scrape: status %d, content type %q; want 200, %q", rec.Code, rec.Header().Get("Content-Type"), ContentType)
	}
	return rec.Body.String(), took
}

func TestScrape(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	c, err := pglease.New(pool, pglease.Config{Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{`quote"`, `back\slash`, "new\nline", "{job=\"x\"} 1", "ß日本🔒", "plain"}
	for _, name := range names {
		if _, err := c.TryAcquire(ctx, name, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	log, logs := newLog()
	e := New(pool, Options{MaxNames: 4, Log: log})
	body, _ := scrape(t, e, 0)
	got := parseExposition(t, body)
	m, err := pgleaseadmin.ReadMetrics(ctx, pool, pgleaseadmin.Filter{MaxNames: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Leases) != 4 || m.LeasesDropped != 2 {
		t.Fatalf("ReadMetrics: %d leases, %d dropped; want 4 and 2", len(m.Leases), m.LeasesDropped)
	}
	for _, l := range m.Leases {
		for metric, want := range map[string]float64{
			"pglease_lease_held": 1, "pglease_lease_fence": 1,
		} {
			if s, ok := got[metric+"{name="+l.Name+"}"]; !ok || s.Value != want {
				t.Errorf("%s{name=%q}: got %v (present %v), want %v", metric, l.Name, s.Value, ok, want)
			}
		}
		if s := got["pglease_lease_expiry_seconds{name="+l.Name+"}"]; s.Value <= 50 || s.Value > 60 {
			t.Errorf("pglease_lease_expiry_seconds{name=%q}: got %v, want about 60", l.Name, s.Value)
		}
	}
	for key, want := range map[string]float64{
		"pglease_up{}": 1,
		"pglease_schema_info{version=" + m.Version + "}":    1,
		"pglease_leases{state=held}":                        6,
		"pglease_exporter_series_dropped_total{kind=lease}": 6,
		"pglease_exporter_series_dropped_total{kind=slot}":  0,
		"pglease_exporter_scrape_errors_total{}":            0,
		"pglease_table_rows{table=leases}":                  6,
		"pglease_purged_rows_total{}":                       0,
		"pglease_waiters{kind=lease}":                       0,
	} {
		if s, ok := got[key]; !ok || s.Value != want {
			t.Errorf("%s: got %v (present %v), want %v", key, s.Value, ok, want)
		}
	}
	// Every table pglease.metrics lists, however many the schema has.
	for _, tbl := range m.Tables {
		for _, metric := range []string{"pglease_table_rows", "pglease_table_bytes"} {
			if s, ok := got[metric+"{table="+tbl.Name+"}"]; !ok || (metric == "pglease_table_bytes" && s.Value <= 0) {
				t.Errorf("%s{table=%q}: got %v (present %v), want a series", metric, tbl.Name, s.Value, ok)
			}
		}
	}
	// The counter of dropped series grows with each scrape that drops.
	body, _ = scrape(t, e, 0)
	if s := parseExposition(t, body)["pglease_exporter_series_dropped_total{kind=lease}"]; s.Value != 12 {
		t.Errorf("dropped lease series after two scrapes: got %v, want 12", s.Value)
	}
	if l := logs.String(); l != "" {
		t.Errorf("log of healthy scrapes: got %q, want nothing", l)
	}
	for _, method := range []string{http.MethodPost, http.MethodPut} {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(method, "/metrics", nil))
		if rec.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s /metrics: got %d, want 405", method, rec.Code)
		}
	}
}

// proxied returns a pool on the test database through a fault proxy, with
// the exporter's settings.
func proxied(t *testing.T, url string) (*pgxpool.Pool, *faultproxy.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.New(faultproxy.PostgresTarget(cfg.ConnConfig.Host, cfg.ConnConfig.Port))
	if err != nil {
		t.Fatal(err)
	}
	p.Route(&cfg.ConnConfig.Config)
	cfg.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Close()
		pool.Close()
	})
	return pool, p
}

// TestOutage: a blackholed database (connections hang), a refused one and
// a cut connection each give pglease_up 0 within the scrape's timeout,
// every scrape answers, one line is logged per outage, and pglease_up is 1
// again once the database answers.
func TestOutage(t *testing.T) {
	t.Parallel()
	pool, proxy := proxied(t, pgtest.NewMigrated(t))
	log, logs := newLog()
	const timeout = 700 * time.Millisecond
	e := New(pool, Options{Timeout: 5 * time.Second, Log: log})

	up := func(what string, want float64) {
		t.Helper()
		body, took := scrape(t, e, timeout+timeoutMargin) // Prometheus' header: the exporter keeps its margin
		if took > timeout+time.Second {
			t.Fatalf("%s: the scrape took %s, want at most its timeout %s and a second", what, took, timeout)
		}
		s, ok := parseExposition(t, body)["pglease_up{}"]
		if !ok || s.Value != want {
			t.Fatalf("%s: pglease_up %v (present %v), want %v", what, s.Value, ok, want)
		}
	}
	up("healthy", 1)

	proxy.Blackhole()
	for i := range 3 {
		up(fmt.Sprintf("blackholed, scrape %d", i+1), 0)
	}
	// Scrapes at once while blackholed: more than the pool's connections.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { up("blackholed, concurrent", 0) })
	}
	wg.Wait()
	proxy.Resume()
	proxy.CutAll()
	waitUp(t, e)
	if n := strings.Count(logs.String(), "cannot read the database"); n != 1 {
		t.Errorf("log lines for one outage of many scrapes: got %d, want 1:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), "timeout") || !strings.Contains(logs.String(), "answers again") {
		t.Errorf("log: got %q, want the timeout and the recovery", logs)
	}

	// Refused: the proxy is gone.
	_ = proxy.Close()
	up("refused", 0)
	body, _ := scrape(t, e, 0)
	if s := parseExposition(t, body)["pglease_exporter_scrape_errors_total{}"]; s.Value < 9 {
		t.Errorf("scrape errors: got %v, want at least 9", s.Value)
	}
	if strings.Contains(body, "pglease_lease_held") || !strings.Contains(body, "# TYPE pglease_up gauge") {
		t.Errorf("body while down: got %q, want the exporter's own metrics only", body)
	}
}

// waitUp scrapes until pglease_up is 1 (the pool reconnects on its own),
// failing after a timeout.
func waitUp(t *testing.T, e *Exporter) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		body, _ := scrape(t, e, 0)
		if parseExposition(t, body)["pglease_up{}"].Value == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pglease_up still 0 20s after the database came back:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestNoGrant: a role without pglease_client gets pglease_up 0, and the log
// names the grant to add.
func TestNoGrant(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := fmt.Sprintf("pglease_exporter_test_%d", time.Now().UnixNano())
	if _, err := admin.Exec(t.Context(), `CREATE ROLE `+role+` LOGIN PASSWORD 'pw-exporter'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP ROLE `+role) })
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.User, cfg.ConnConfig.Password = role, "pw-exporter"
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	log, logs := newLog()
	e := New(pool, Options{Log: log})
	body, _ := scrape(t, e, 0)
	if s := parseExposition(t, body)["pglease_up{}"]; s.Value != 0 {
		t.Fatalf("pglease_up without pglease_client: got %v, want 0", s.Value)
	}
	if !strings.Contains(logs.String(), "GRANT pglease_client TO") {
		t.Fatalf("log without pglease_client: got %q, want the grant to add", logs)
	}
}

// TestOutageLoggedOnce: scrapes that time out after different times (each
// has its own deadline) are one outage, logged once; another cause, and the
// recovery, are logged again. (TestOutage once logged two lines for one
// outage: "timeout of 696ms", then "of 700ms".)
func TestOutageLoggedOnce(t *testing.T) {
	log, logs := newLog()
	e := New(nil, Options{Log: log})
	e.noteOutcome(timeoutError{after: "696ms"})
	e.noteOutcome(timeoutError{after: "700ms"})
	if n := strings.Count(logs.String(), "cannot read the database"); n != 1 {
		t.Fatalf("log lines after two timeouts of one outage: got %d, want 1:\n%s", n, logs)
	}
	e.noteOutcome(errors.New("connection refused"))
	e.noteOutcome(errors.New("connection refused"))
	if n := strings.Count(logs.String(), "cannot read the database"); n != 2 {
		t.Fatalf("log lines after the cause changed to a refusal: got %d, want 2:\n%s", n, logs)
	}
	e.noteOutcome(nil)
	e.noteOutcome(nil)
	if n := strings.Count(logs.String(), "answers again"); n != 1 {
		t.Fatalf("recovery lines: got %d, want 1:\n%s", n, logs)
	}
}
