//go:build unix

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	neturl "net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/faultproxy"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
)

// startExporter starts pglease exporter with args on a free loopback port
// and returns it and the URL of its /metrics.
func startExporter(t *testing.T, c cli, args ...string) (*background, string) {
	t.Helper()
	b := c.start(append([]string{"exporter", "--listen", "127.0.0.1:0"}, args...)...)
	line := b.readLine(30 * time.Second)
	_, rest, ok := strings.Cut(line, "serving http://")
	addr, _, ok2 := strings.Cut(rest, "/metrics")
	if !ok || !ok2 {
		t.Fatalf("first line of pglease exporter: got %q, want %q", line, "pglease exporter: serving http://ADDR/metrics ...")
	}
	return b, "http://" + addr + "/metrics"
}

// get fetches url and returns its status and body.
func get(t *testing.T, url string, timeout time.Duration) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// testExporter serves a database through a fault proxy: the metrics of a
// lease and of a quota, the series dropped by --max-series, pglease_up 0 within the
// timeout while the database is blackholed, 1 again after, and exit 0 on
// SIGTERM.
func testExporter(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	pool := pgtest.Pool(t, url)
	client, err := pglease.New(pool, pglease.Config{Holder: "exporter-test"})
	if err != nil {
		t.Fatal(err)
	}
	// A cap on the role that creates the leases (rows count from the
	// cap on): its limit and use.
	var owner string
	if err := pool.QueryRow(t.Context(), `SELECT current_user FROM pglease.quota_set(current_user, 'leases', 10)`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `SELECT pglease.quota_set(current_user, 'leases', NULL)`)
	})
	for _, name := range []string{"jobs/a", `jobs/"quoted"`, "other"} {
		if _, err := client.TryAcquire(t.Context(), name, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(faultproxy.PostgresTarget(cfg.Host, cfg.Port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })

	b, metrics := startExporter(t, c.with("PGLEASE_DATABASE_URL="+viaProxy(t, url, proxy.Addr())),
		"--names", "^jobs/", "--max-series", "1", "--timeout", "1s")
	code, body := get(t, metrics, 10*time.Second)
	requireContains(t, "GET /metrics", fmt.Sprint(code)+"\n"+body, "200\n", "pglease_up 1\n",
		`pglease_lease_held{name="jobs/\"quoted\""} 1`, `pglease_lease_fence{name="jobs/\"quoted\""} 1`,
		`pglease_exporter_series_dropped_total{kind="lease"} 3`, `pglease_leases{state="held"} 3`, `pglease_schema_info{version="`,
		`pglease_quota_limit_rows{role="`+owner+`",kind="leases"} 10`, `pglease_quota_used_rows{role="`+owner+`",kind="leases"} 3`,
		`pglease_exporter_series_dropped_total{kind="quota"} 0`)
	if strings.Contains(body, `name="other"`) || strings.Contains(body, `name="jobs/a"`) {
		t.Fatalf("GET /metrics with --names ^jobs/ --max-series 1: got other names:\n%s", body)
	}
	if code, _ := get(t, strings.TrimSuffix(metrics, "metrics")+"nothing", 10*time.Second); code != http.StatusNotFound {
		t.Fatalf("GET /nothing: got %d, want 404", code)
	}

	proxy.Blackhole()
	start := time.Now()
	code, body = get(t, metrics, 10*time.Second)
	if took := time.Since(start); code != 200 || !strings.Contains(body, "pglease_up 0\n") || took > 3*time.Second {
		t.Fatalf("GET /metrics while the database is blackholed: %d after %s, want 200 with pglease_up 0 within the 1s timeout:\n%s", code, took, body)
	}
	proxy.Resume()
	proxy.CutAll()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, body = get(t, metrics, 10*time.Second); strings.Contains(body, "pglease_up 1\n") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pglease_up still 0 30s after the database came back:\n%s\nstderr:\n%s", body, b.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.waitStderr("answers again", 10*time.Second)
	requireContains(t, "stderr of the exporter", b.stderr.String(), "cannot read the database; pglease_up 0", "timeout of 1s")

	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	b.waitExit(15*time.Second, 0)
}

// testExporterErrors: each bad start fails with one line and the right
// exit code, before serving.
func testExporterErrors(t *testing.T, c cli) {
	migrated := pgtest.NewMigrated(t)
	noSchema := pgtest.NewDatabase(t)
	old := pgtest.NewDatabase(t)
	if err := schema.Goto(t.Context(), old, 2); err != nil {
		t.Fatal(err)
	}
	noGrant := loginURL(t, migrated, false)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	for _, tc := range []struct {
		name     string
		database string
		args     []string
		code     int
		want     []string
	}{
		{"no port", migrated, []string{"--listen", "localhost"}, 2, []string{"--listen", "missing port"}},
		{"address in use", migrated, []string{"--listen", busy.Addr().String()}, 1, []string{"cannot listen on " + busy.Addr().String(), "in use", "hint:"}},
		{"not this host's address", migrated, []string{"--listen", "192.0.2.1:9841"}, 1, []string{"cannot listen on 192.0.2.1:9841", "hint:"}},
		{"unreachable", "postgres://u@" + closedPort(t) + "/db?sslmode=disable", nil, 1, []string{"cannot connect", "refused", "hint:"}},
		{"no schema", noSchema, nil, 1, []string{"schema pglease not found", "pglease migrate up"}},
		{"schema 0.2.0", old, nil, 1, []string{"is version 0.2.0", "no pglease.metrics", "hint: run `pglease migrate up`"}},
		{"no grant", noGrant, nil, 1, []string{"permission denied", "GRANT pglease_client TO "}},
		{"bad regex", migrated, []string{"--names", "(unclosed"}, 2, []string{"--names", "not a valid regular expression"}},
		{"max series", migrated, []string{"--max-series", "-1"}, 2, []string{"--max-series must be from 0"}},
		{"timeout", migrated, []string{"--timeout", "0s"}, 2, []string{"--timeout must be more than 0"}},
		{"argument", migrated, []string{"extra"}, 2, []string{"takes no arguments"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.with("PGLEASE_DATABASE_URL="+tc.database).mustRun(tc.code, append([]string{"exporter", "--listen", "127.0.0.1:0"}, tc.args...)...)
			requireOneLine(t, "stderr", r.stderr)
			requireContains(t, "stderr", r.stderr, tc.want...)
			if n := strings.Count(r.stderr, "pglease:"); n != 1 {
				t.Fatalf("stderr says %q %d times, want once: %q", "pglease:", n, r.stderr)
			}
			if r.stdout != "" {
				t.Fatalf("stdout: got %q, want nothing (it is not serving)", r.stdout)
			}
		})
	}
}

// loginURL creates a LOGIN role, a member of pglease_client when client is
// set, dropped when the test ends, and returns url with its credentials.
func loginURL(t *testing.T, url string, client bool) string {
	t.Helper()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := fmt.Sprintf("pglease_cli_exporter_%d", time.Now().UnixNano())
	sql := `CREATE ROLE ` + role + ` LOGIN PASSWORD 'exporter-pw'`
	if client {
		sql += ` IN ROLE pglease_client`
	}
	if _, err := admin.Exec(ctx, sql); err != nil {
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
	u.User = neturl.UserPassword(role, "exporter-pw")
	return u.String()
}
