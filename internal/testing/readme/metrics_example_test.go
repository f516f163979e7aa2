package readme_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// metricsExample is the runnable example of docs/observability.md: a
// module of its own (the OpenTelemetry SDK and exporters stay out of
// pglease's), shown in full on the page.
const metricsExample = "examples/metrics"

// TestMetricsExample builds examples/metrics in its own module and runs
// two instances as docs/observability.md says: the leader's /metrics has
// the supervisor's and its lease's instruments, named after it, and its
// /healthz answers ok; the standby's counts its refusals, and reports
// leading once the leader stopped and it took over. The page shows the
// program as it is.
func TestMetricsExample(t *testing.T) {
	root := repoRoot(t)
	src, err := os.ReadFile(filepath.Join(root, metricsExample, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	if blocks, _ := fencedBlocks(string(page)); !hasBlock(blocks, "go", string(src)) {
		t.Errorf("docs/observability.md does not show %s/main.go as it is, in a ```go block", metricsExample)
	}

	bin := filepath.Join(t.TempDir(), "metrics")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(root, metricsExample)
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", metricsExample, err, out)
	}
	url := pgtest.NewMigrated(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	start := func() (*program, string) {
		p := startExample(ctx, t, metricsExample, bin, url, "LISTEN_ADDR=127.0.0.1:0")
		line := p.next(t, "metrics on http://127.0.0.1:<port>/metrics")
		addr, ok := strings.CutPrefix(line, "metrics on ")
		if !ok {
			t.Fatalf("%s printed %q first, want where it serves its metrics", metricsExample, line)
		}
		return p, strings.TrimSuffix(addr, "/metrics")
	}
	const named = `pglease_kind="lease",pglease_name="outbox-dispatcher"`

	leader, leaderURL := start()
	leader.expect(t, "leading with fence 1")
	m := scrape(ctx, t, leaderURL+"/metrics")
	wantSample(t, m, "pglease_supervisor_leading", named, 1)
	wantSample(t, m, "pglease_supervisor_transitions_total", named+`,pglease_transition="acquired"`, 1)
	wantSample(t, m, "pglease_tenure_held", named, 1)
	wantSample(t, m, "pglease_tenure_acquisitions_total", named, 1)
	if got := scrape(ctx, t, leaderURL+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz of the leader = %q, want \"ok\\n\"", got)
	}

	standby, standbyURL := start()
	standby.expect(t, "standing by")
	m = scrape(ctx, t, standbyURL+"/metrics")
	wantSample(t, m, "pglease_supervisor_leading", named, 0)
	if n := sample(t, m, "pglease_tenure_refusals_total", named); n < 1 {
		t.Errorf("pglease_tenure_refusals_total of the standby = %g, want at least 1", n)
	}

	leader.interrupt(t)
	leader.expect(t, "stopped: context canceled")
	leader.exit(t)
	standby.expect(t, "leading with fence 2")
	m = scrape(ctx, t, standbyURL+"/metrics")
	wantSample(t, m, "pglease_supervisor_leading", named, 1)
	wantSample(t, m, "pglease_supervisor_transitions_total", named+`,pglease_transition="acquired"`, 1)
	standby.interrupt(t)
	standby.expect(t, "stopped: context canceled")
	standby.exit(t)
}

// hasBlock reports whether blocks has one of lang whose body is body.
func hasBlock(blocks []block, lang, body string) bool {
	for _, b := range blocks {
		if b.lang == lang && b.body == body {
			return true
		}
	}
	return false
}

// scrape returns the body of a GET of url, which must answer 200.
func scrape(ctx context.Context, t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}

// sample returns the value of the Prometheus sample of name whose labels
// include labels (a comma-separated run of them, in the exporter's order),
// failing t when there is none.
func sample(t *testing.T, metrics, name, labels string) float64 {
	t.Helper()
	for line := range strings.Lines(metrics) {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok || !strings.Contains(rest, labels) {
			continue
		}
		_, value, _ := strings.Cut(rest, "} ")
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return v
	}
	t.Fatalf("no sample %s{%s} in:\n%s", name, labels, metrics)
	return 0
}

// wantSample fails t unless the sample of name with labels is want.
func wantSample(t *testing.T, metrics, name, labels string, want float64) {
	t.Helper()
	if got := sample(t, metrics, name, labels); got != want {
		t.Errorf("%s{%s} = %g, want %g", name, labels, got, want)
	}
}
