package pgserver

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// unsetVar names an environment variable the tests never set.
const unsetVar = "PGSERVER_TEST_UNSET_DATABASE_URL"

func TestFindLocal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := Find(ctx, Options{EnvVar: unsetVar})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	t.Logf("found %s, PostgreSQL %s", s.Source, s.Version)
	checkServer(ctx, t, s.URL)

	if c, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second); err == nil {
		_ = c.Close()
		if want := "local server 127.0.0.1:5432"; s.Source != want {
			t.Errorf("Source = %q, want %q: a server listens on 127.0.0.1:5432", s.Source, want)
		}
		if s.Started() {
			t.Errorf("Started() = true for a server that was found")
		}
	}
}

func TestFindEnvVar(t *testing.T) {
	const envVar = "PGSERVER_TEST_DATABASE_URL"
	t.Setenv(envVar, adminURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Find(ctx, Options{EnvVar: envVar})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if s.Source != envVar {
		t.Errorf("Source = %q, want %q", s.Source, envVar)
	}
	if s.URL != adminURL(t) {
		t.Errorf("URL = %q, want the variable's value %q", MaskURL(s.URL), MaskURL(adminURL(t)))
	}
	if s.Started() {
		t.Errorf("Started() = true for a server that was found")
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}

func TestFindEnvVarBad(t *testing.T) {
	const envVar = "PGSERVER_TEST_DATABASE_URL"
	tests := []struct {
		name string
		url  string
	}{
		{"url, closed port", "postgres://alice:s3cret-pw@127.0.0.1:1/postgres?sslmode=disable"},
		{"url, bad port", "postgres://alice:s3cret-pw@127.0.0.1:notaport/postgres"},
		{"url, password parameter", "postgres://alice@127.0.0.1:1/postgres?password=s3cret-pw&sslmode=disable"},
		{"dsn, closed port", "host=127.0.0.1 port=1 user=alice password=s3cret-pw sslmode=disable"},
		{"dsn, quoted password", "host=127.0.0.1 port=1 user=alice password='s3cret-pw x' sslmode=disable"},
		{"dsn, bad port", "host=127.0.0.1 port=notaport password=s3cret-pw"},
		{"missing database", withMissingDatabase(t, adminURL(t))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(envVar, tt.url)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			s, err := Find(ctx, Options{EnvVar: envVar})
			if err == nil {
				_ = s.Stop(ctx)
				t.Fatalf("Find succeeded with %s (%s), want an error", s.Source, MaskURL(s.URL))
			}
			t.Logf("error after %v: %v", time.Since(start), err)
			if _, ok := errors.AsType[*NoServerError](err); ok {
				t.Errorf("Find fell through to other servers, want it to stop at %s", envVar)
			}
			if msg := err.Error(); strings.Contains(msg, "s3cret") {
				t.Errorf("error shows the password: %s", msg)
			} else if !strings.Contains(msg, envVar) {
				t.Errorf("error does not name %s: %s", envVar, msg)
			}
		})
	}
}

// withMissingDatabase returns connString pointing to a database that does not
// exist.
func withMissingDatabase(t testing.TB, connString string) string {
	t.Helper()
	u, err := DatabaseURL(connString, "pgserver_no_such_database")
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func TestFindNoServer(t *testing.T) {
	// Nothing is reachable: a closed port, no binaries.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	_ = l.Close()
	savedLocal, savedGlobs, savedPath := localServers, binDirGlobs, searchPath
	t.Cleanup(func() {
		localServers, binDirGlobs, searchPath = savedLocal, savedGlobs, savedPath
	})
	localServers = []localServer{{"postgres://postgres@" + closed + "/postgres?sslmode=disable", "local server " + closed}}
	binDirGlobs = []string{t.TempDir() + "/*/bin"}
	searchPath = t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Find(ctx, Options{EnvVar: unsetVar})
	if err == nil {
		_ = s.Stop(ctx)
		t.Fatalf("Find succeeded with %s, want an error", s.Source)
	}
	nse, ok := errors.AsType[*NoServerError](err)
	if !ok {
		t.Fatalf("Find: %v, want a *NoServerError", err)
	}
	var sources []string
	for _, a := range nse.Attempts {
		sources = append(sources, a.Source)
	}
	want := []string{unsetVar, "local server " + closed, "throwaway cluster"}
	if strings.Join(sources, "|") != strings.Join(want, "|") {
		t.Errorf("attempts %q, want %q", sources, want)
	}
	nse.Hints = append(nse.Hints, "run something else")
	msg := err.Error()
	for _, advice := range []string{
		"set " + unsetVar + "=postgres://user@host:port/db (a role that can CREATE DATABASE)",
		"PGHOST",
		"127.0.0.1:5432",
		"apt-get install postgresql",
		"  - run something else",
	} {
		if !strings.Contains(msg, advice) {
			t.Errorf("error lacks %q:\n%s", advice, msg)
		}
	}
	t.Logf("error:\n%v", err)
}

func TestFindCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := Find(ctx, Options{EnvVar: unsetVar})
	if err == nil {
		_ = s.Stop(context.Background())
	}
	if err != context.Canceled { // unchanged: not wrapped
		t.Errorf("Find with a cancelled context: %v, want context.Canceled unchanged", err)
	}
}

// checkServer connects to url and runs a query.
func checkServer(ctx context.Context, t testing.TB, url string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", MaskURL(url), err)
	}
	defer conn.Close(ctx)
	var version string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		t.Fatalf("SELECT version(): %v", err)
	}
	return version
}

func TestFindLibpqEnv(t *testing.T) {
	cfg, err := pgx.ParseConfig(adminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range libpqServerVars {
		t.Setenv(name, "")
	}
	t.Setenv("PGHOST", cfg.Host)
	t.Setenv("PGPORT", strconv.Itoa(int(cfg.Port)))
	t.Setenv("PGUSER", cfg.User)
	t.Setenv("PGPASSWORD", cfg.Password)
	if got, want := strings.Join(LibpqEnv(), ","), "PGHOST,PGPORT,PGUSER"; got != want {
		t.Errorf("LibpqEnv() = %s, want %s", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Find(ctx, Options{EnvVar: unsetVar})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if want := "PG* environment (PGHOST, PGPORT, PGUSER)"; s.Source != want || s.Started() {
		t.Errorf("Source = %q, started %v; want %q, not started", s.Source, s.Started(), want)
	}
	checkServer(ctx, t, s.URL)

	// A PG* environment that names a dead server is final too.
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("PGPORT", "1")
	s, err = Find(ctx, Options{EnvVar: unsetVar})
	if err == nil {
		t.Fatalf("Find succeeded with %s, want an error", s.Source)
	}
	if _, ok := errors.AsType[*NoServerError](err); ok || !strings.Contains(err.Error(), "PG* environment") {
		t.Errorf("Find: %v, want a final error naming the PG* environment", err)
	}
}
