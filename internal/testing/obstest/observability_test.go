//go:build observability

package obstest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// envUpdatePlot, set to 1, makes TestHandover write its plot to
// docs/img/handover.svg (docs/observability.md shows it).
const envUpdatePlot = "PGLEASE_UPDATE_PLOT"

// Timing of the runs: Prometheus scrapes every scrapeInterval and
// evaluates the rules every second; the supervised lease has a TTL of ttl.
const (
	scrapeInterval = 500 * time.Millisecond
	ttl            = 3 * time.Second
	waitTimeout    = 30 * time.Second
)

// repoRoot returns the repository's root directory (tests run in their
// package's directory).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// mustBinary returns the path of program name, failing the test with the
// package to install when it is missing.
func mustBinary(t *testing.T, name string) string {
	t.Helper()
	path, err := Binary(name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// buildPglease builds the pglease command into the test's directory.
func buildPglease(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pglease")
	cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/pglease")
	cmd.Dir = repoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pglease: %v\n%s", err, out)
	}
	return bin
}

// clientRoleURL creates a LOGIN role that is a member of pglease_client
// and nothing else, dropped when the test ends, and returns url with its
// credentials: what an exporter should run as.
func clientRoleURL(t *testing.T, url string) string {
	t.Helper()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := fmt.Sprintf("pglease_obs_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN PASSWORD 'obs-pw' IN ROLE pglease_client`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), pgtest.AdminURL(t)); err == nil {
			_, _ = conn.Exec(context.Background(), `DROP ROLE `+role)
			_ = conn.Close(context.Background())
		}
	})
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.UserPassword(role, "obs-pw")
	return u.String()
}

// startExporter runs `pglease exporter` on url on a free loopback port
// until the test ends, and returns its address.
func startExporter(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"exporter", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "PGLEASE_DATABASE_URL="+url)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("pglease exporter's stderr:\n%s", stderr.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case line := <-lines:
		_, rest, _ := strings.Cut(line, "serving http://")
		addr, _, ok := strings.Cut(rest, "/metrics")
		if !ok {
			t.Fatalf("pglease exporter said %q, want the address it serves", line)
		}
		return addr
	case <-time.After(waitTimeout):
		t.Fatalf("pglease exporter did not start in %v", waitTimeout)
		return ""
	}
}

// fetch GETs url and returns its body.
func fetch(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// promtoolCheckMetrics runs promtool check metrics on body and fails the
// test on any problem it reports.
func promtoolCheckMetrics(t *testing.T, what, body string) {
	t.Helper()
	cmd := exec.Command(mustBinary(t, "promtool"), "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("promtool check metrics of %s: %v\n%s\n--- the metrics:\n%s", what, err, out, body)
	}
}

// startPrometheus starts Prometheus scraping targets as job pglease, with
// the rules of deploy/prometheus, until the test ends.
func startPrometheus(t *testing.T, targets ...string) *Prometheus {
	t.Helper()
	mustBinary(t, "prometheus")
	rules := filepath.Join(repoRoot(t), "deploy", "prometheus", "pglease.rules.yml")
	quoted := make([]string, len(targets))
	for i, target := range targets {
		quoted[i] = strconv.Quote(target)
	}
	config := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: pglease
    static_configs:
      - targets: [%s]
`, scrapeInterval, scrapeInterval*4/5, strconv.Quote(rules), strings.Join(quoted, ", "))
	p, err := StartPrometheus(t.Context(), t.TempDir(), config)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus' log:\n%s", p.LogTail())
		}
		if err := p.Stop(); err != nil {
			t.Errorf("stop prometheus: %v", err)
		}
	})
	return p
}

// waitQuery runs query until it returns a series for which ok holds, and
// returns that series; it fails the test after waitTimeout.
func waitQuery(t *testing.T, p *Prometheus, what, query string, ok func(Sample) bool) Sample {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got, err := p.Query(t.Context(), query)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			if ok(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s still %v after %v", what, query, got, waitTimeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// equals returns a predicate for waitQuery: the value is v.
func equals(v float64) func(Sample) bool { return func(s Sample) bool { return s.Value == v } }

// proxiedPool returns a pool on url through a fault proxy.
func proxiedPool(t *testing.T, url string) (*pgxpool.Pool, *faultproxy.Proxy) {
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

// supervised is one supervisor running on lease "leader".
type supervised struct {
	sup     *supervisor.Supervisor
	started chan struct{} // closed when its workload starts
	stop    context.CancelFunc
	done    chan struct{} // closed when Run has returned
}

// superviseLeader runs a supervisor of lease "leader" on db with holder,
// whose workload waits for its context; stopped when the test ends.
func superviseLeader(t *testing.T, db pglease.DB, holder string) *supervised {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sup, err := supervisor.NewLease(db, "leader", supervisor.Config{Holder: holder, TTL: ttl, Logger: quiet, PurgeEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &supervised{sup: sup, started: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	var once sync.Once
	go func() {
		defer close(s.done)
		_ = sup.Run(ctx, func(ctx context.Context) error {
			once.Do(func() { close(s.started) })
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// waitStarted waits until s runs its workload.
func (s *supervised) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-s.started:
	case <-time.After(waitTimeout):
		t.Fatalf("supervisor %s did not start its workload in %v", s.sup.Holder(), waitTimeout)
	}
}

// waitWaiter waits until a refused acquire of "leader" is registered as a
// waiter (a standby), as the server tells.
func waitWaiter(t *testing.T, db *pgxpool.Pool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		var n int
		if err := db.QueryRow(t.Context(), `SELECT count(*) FROM pglease.waiters
			WHERE kind = 'lease' AND name = 'leader' AND until > clock_timestamp()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no standby registered as a waiter of leader after %v", waitTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHandover: Prometheus scrapes `pglease exporter` (running as a role
// with pglease_client only) while supervisors hand lease "leader" over:
// once after the leader is cut off from the database (the standby takes
// over at the expiry), then four times on graceful stops (woken by the
// release). Prometheus' API shows the held gauge, each new fence, the
// expiry running out, and the flapping alert firing; the exporter's output
// passes promtool check metrics; the range of the run is plotted.
func TestHandover(t *testing.T) {
	mustBinary(t, "promtool")
	mustBinary(t, "prometheus")
	url := pgtest.NewMigrated(t)
	db := pgtest.Pool(t, url)
	ctx := t.Context()

	// Names that test the exporter's escaping, held for the whole run.
	other, err := pglease.New(db, pglease.Config{Holder: "other"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`jobs/"quoted"`, `back\slash`, "line\nfeed", "ß日本🔒", "{job=\"x\"} 1"} {
		if _, err := other.TryAcquire(ctx, name, time.Hour); err != nil {
			t.Fatal(err)
		}
	}

	// A daily budget 95% used by the exporter's own role (a client role
	// sees its own buckets): the recording rule PgleaseBudgetNearExhaustion
	// reads.
	exporterURL := clientRoleURL(t, url)
	if _, err := db.Exec(ctx, `SELECT pglease.limit_set('budget/', 1000, '1 day', 1000)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgtest.Pool(t, exporterURL).Exec(ctx, `SELECT pglease.take('budget/acme', 950)`); err != nil {
		t.Fatal(err)
	}

	bin := buildPglease(t)
	addr := startExporter(t, bin, exporterURL, "--timeout", "2s")
	promtoolCheckMetrics(t, "pglease exporter", fetch(t, "http://"+addr+"/metrics"))

	prom := startPrometheus(t, addr)
	waitQuery(t, prom, "the first scrape", `pglease_up`, equals(1))
	waitQuery(t, prom, "the budget's use", `target:pglease_limit_used:ratio{target="budget/"}`, equals(0.95))
	start := time.Now()
	var events []Event
	event := func(label string) { events = append(events, Event{time.Now(), label}) }

	// Leader a, through a connection that can be cut off; standby b.
	cutPool, cut := proxiedPool(t, url)
	a := superviseLeader(t, cutPool, "a")
	a.waitStarted(t)
	waitQuery(t, prom, "a holds the lease", `pglease_lease_held{name="leader"}`, equals(1))
	b := superviseLeader(t, db, "b")
	waitWaiter(t, db)
	// Renewals every TTL/3 for a few seconds: the expiry's saw-tooth.
	waitQuery(t, prom, "scrapes of a's tenure", `count_over_time(pglease_lease_fence{name="leader"}[1m])`,
		func(s Sample) bool { return s.Value >= 8 })

	event("a cut off")
	cut.Blackhole()
	b.waitStarted(t)
	event("b takes over")
	waitQuery(t, prom, "the crash handover", `pglease_lease_fence{name="leader"}`, equals(2))
	a.stop()
	_ = cut.Close()
	<-a.done

	// Graceful handovers: a new standby each time, then the leader stops.
	leader := b
	for fence := 3; fence <= 6; fence++ {
		next := superviseLeader(t, db, fmt.Sprintf("s%d", fence))
		waitWaiter(t, db)
		if fence == 3 {
			event("graceful stops")
		}
		leader.stop()
		<-leader.done
		next.waitStarted(t)
		waitQuery(t, prom, fmt.Sprintf("handover %d", fence-1), `pglease_lease_fence{name="leader"}`, equals(float64(fence)))
		leader = next
	}
	alert := waitQuery(t, prom, "the flapping alert", `ALERTS{alertname="PgleaseLeaseFlapping", alertstate="firing"}`,
		func(s Sample) bool { return s.Labels["name"] == "leader" })
	event("PgleaseLeaseFlapping fires")
	if alert.Labels["severity"] != "warning" || alert.Labels["job"] != "pglease" {
		t.Errorf("flapping alert: labels %v, want severity warning, job pglease", alert.Labels)
	}
	// The held gauge of the last leader, and no other alert of the rules:
	// the database answered all along and no lease lost its holder.
	waitQuery(t, prom, "the last leader holds the lease", `pglease_lease_held{name="leader"}`, equals(1))
	if got, err := prom.Query(ctx, `ALERTS{alertname=~"PgleaseDatabaseUnreadable|PgleaseLeaseUnheld|PgleasePurgeBehind|PgleaseSlotScopeFull"}`); err != nil || len(got) != 0 {
		t.Errorf("other alerts: got %v (%v), want none", got, err)
	}
	// Two more seconds of the last tenure, for the plot.
	end := time.Now().Add(2 * time.Second)
	waitQuery(t, prom, "a scrape after the end", `timestamp(pglease_up)`,
		func(s Sample) bool { return s.Value > float64(end.UnixNano())/1e9 })

	// What Prometheus recorded over the run.
	series := func(query string) []Point {
		got, err := prom.QueryRange(ctx, query, start, end, scrapeInterval/2)
		if err != nil || len(got) != 1 {
			t.Fatalf("query_range %s: %v (%v), want one series", query, got, err)
		}
		return got[0].Values
	}
	held := series(`pglease_lease_held{name="leader"}`)
	expiry := series(`pglease_lease_expiry_seconds{name="leader"}`)
	fence := series(`pglease_lease_fence{name="leader"}`)
	var fences []float64
	for i, p := range fence {
		if i > 0 && p.V < fence[i-1].V {
			t.Fatalf("the fence went backwards at %s: %v then %v", p.T, fence[i-1].V, p.V)
		}
		if !slices.Contains(fences, p.V) {
			fences = append(fences, p.V)
		}
	}
	if !slices.Equal(fences, []float64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("fences Prometheus saw: got %v, want 1 to 6, each", fences)
	}
	// Between the cut and b's tenure the expiry ran out: a's renewals
	// stopped, and nothing renewed it.
	cutAt, takenAt := events[0].T, firstAt(fence, 2)
	lowest := math.Inf(1)
	for _, p := range expiry {
		if p.T.After(cutAt) && p.T.Before(takenAt) {
			lowest = math.Min(lowest, p.V)
		}
	}
	if lowest > ttl.Seconds()/2 {
		t.Errorf("expiry between the cut (%s) and b's tenure (%s): lowest %v s, want it run down below %v s",
			cutAt.Sub(start), takenAt.Sub(start), lowest, ttl.Seconds()/2)
	}
	t.Logf("crash handover: b's tenure seen %s after the cut (TTL %s); expiry ran down to %.2f s",
		takenAt.Sub(cutAt).Round(10*time.Millisecond), ttl, lowest)

	var svg bytes.Buffer
	err = Plot(&svg, `Lease "leader" as Prometheus saw it (pglease exporter, scraped every `+scrapeInterval.String()+`)`,
		start, end, scrapeInterval, []Panel{
			{Title: `pglease_lease_held{name="leader"}`, Min: -0.1, Max: 1.1,
				Lines: []Line{{Label: "held", Color: "#1f77b4", Points: held, Step: true}}},
			{Title: `pglease_lease_expiry_seconds{name="leader"} (TTL ` + ttl.String() + `, renewed every TTL/3)`,
				Lines: []Line{{Label: "expiry, s", Color: "#ff7f0e", Points: expiry}}},
			{Title: `pglease_lease_fence{name="leader"}: one step per tenure`,
				Lines: []Line{{Label: "fence", Color: "#2ca02c", Points: fence, Step: true}}},
		}, events)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "handover.svg")
	if os.Getenv(envUpdatePlot) == "1" {
		out = filepath.Join(repoRoot(t), "docs", "img", "handover.svg")
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(out, svg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("plot of the run (%s, %d points per series): %s", end.Sub(start).Round(time.Second), len(fence), out)
}

// firstAt returns when points first has value v.
func firstAt(points []Point, v float64) time.Time {
	for _, p := range points {
		if p.V == v {
			return p.T
		}
	}
	return time.Time{}
}

// TestPostgresExporterQueries runs Debian's prometheus-postgres-exporter
// with deploy/postgres-exporter/queries.yaml beside pglease exporter, both
// as a role with pglease_client only, and compares their per-lease and
// per-scope series: the same names and labels (postgres-exporter adds
// server), the same values (the expiry within the second between the two
// reads).
func TestPostgresExporterQueries(t *testing.T) {
	bin := mustBinary(t, "prometheus-postgres-exporter")
	url := pgtest.NewMigrated(t)
	db := pgtest.Pool(t, url)
	ctx := t.Context()
	c, err := pglease.New(db, pglease.Config{Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"leader", `jobs/"quoted"`, "ß日本🔒"} {
		if _, err := c.TryAcquire(ctx, name, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	l, err := c.TryAcquire(ctx, "released", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"gpu", "cpu"} {
		if _, err := db.Exec(ctx, `SELECT pglease.claim_slot($1, 'h', 4, '1 hour')`, scope); err != nil {
			t.Fatal(err)
		}
	}
	roleURL := clientRoleURL(t, url)

	peAddr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	pe := exec.Command(bin,
		"--extend.query-path="+filepath.Join(repoRoot(t), "deploy", "postgres-exporter", "queries.yaml"),
		"--disable-default-metrics", "--disable-settings-metrics",
		"--no-collector.database", "--no-collector.bgwriter",
		"--web.listen-address="+peAddr)
	dsn, err := neturl.Parse(roleURL)
	if err != nil {
		t.Fatal(err)
	}
	if q := dsn.Query(); q.Get("sslmode") == "" {
		q.Set("sslmode", "disable") // lib/pq's default is require
		dsn.RawQuery = q.Encode()
	}
	pe.Env = append(os.Environ(), "DATA_SOURCE_NAME="+dsn.String())
	var peLog bytes.Buffer
	pe.Stdout, pe.Stderr = &peLog, &peLog
	if err := pe.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pe.Process.Signal(syscall.SIGTERM)
		_ = pe.Wait()
		if t.Failed() {
			t.Logf("prometheus-postgres-exporter's log:\n%s", peLog.String())
		}
	})
	addr := startExporter(t, buildPglease(t), roleURL)

	var theirs map[string]Series
	deadline := time.Now().Add(waitTimeout)
	for {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		if resp, err := client.Get("http://" + peAddr + "/metrics"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if theirs, err = ParseText(string(b)); err != nil {
				t.Fatalf("prometheus-postgres-exporter's metrics: %v", err)
			}
			if _, ok := theirs[`pglease_lease_held{name=leader,server=`+hostPort(t, url)+`}`]; ok {
				promtoolCheckMetrics(t, "prometheus-postgres-exporter", string(b))
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus-postgres-exporter serves no pglease_lease_held after %v; its log:\n%s\nmetrics: %v", waitTimeout, peLog.String(), theirs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ours, err := ParseText(fetch(t, "http://"+addr+"/metrics"))
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, s := range ours {
		switch s.Name {
		case "pglease_lease_held", "pglease_lease_expiry_seconds", "pglease_lease_fence",
			"pglease_slot_scope_in_use", "pglease_slot_scope_capacity":
		default:
			continue
		}
		with := s
		with.Labels = append(slices.Clone(s.Labels), [2]string{"server", hostPort(t, url)})
		o, ok := theirs[with.Key()]
		if !ok {
			t.Errorf("%s: not served by prometheus-postgres-exporter", with.Key())
			continue
		}
		tolerance := 0.0
		if s.Name == "pglease_lease_expiry_seconds" {
			tolerance = 2
		}
		if math.Abs(o.Value-s.Value) > tolerance {
			t.Errorf("%s: %v from prometheus-postgres-exporter, %v from pglease exporter", with.Key(), o.Value, s.Value)
		}
		compared++
	}
	if compared != 4*3+2*2 {
		t.Errorf("compared %d series, want 16 (4 leases, 2 scopes)", compared)
	}
	for key, s := range theirs {
		if strings.HasPrefix(s.Name, "pglease_") {
			without := s
			without.Labels = slices.DeleteFunc(slices.Clone(s.Labels), func(l [2]string) bool { return l[0] == "server" })
			if _, ok := ours[without.Key()]; !ok {
				t.Errorf("%s: served by prometheus-postgres-exporter only", key)
			}
		}
	}
}

// hostPort returns the host:port of url, the server label
// prometheus-postgres-exporter adds.
func hostPort(t *testing.T, url string) string {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
