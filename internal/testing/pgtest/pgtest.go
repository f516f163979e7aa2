package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/internal/testing/pgcontainer"
)

const (
	// EnvDatabaseURL names the environment variable holding the connection
	// string of the server to test against, for a role that can create
	// databases.
	EnvDatabaseURL = "PGLEASE_TEST_DATABASE_URL"
	// EnvBinDir names the environment variable holding a directory of
	// PostgreSQL binaries (initdb, pg_ctl) to start a throwaway cluster
	// from, instead of using any running server.
	EnvBinDir = "PGLEASE_TEST_PG_BINDIR"
	// DatabasePrefix starts the name of every database NewDatabase creates.
	DatabasePrefix = "pglease_test_"
)

const (
	// findTimeout bounds finding or starting the server, which may pull a
	// container image.
	findTimeout = 5 * time.Minute
	// dbTimeout bounds creating or dropping a database.
	dbTimeout = time.Minute
)

// discovery is the outcome of finding the server, once per process.
type discovery struct {
	once   sync.Once
	server *pgserver.Server
	err    error
}

var (
	// found is the server of this process. Tests replace it.
	found = &discovery{}
	// find finds the server. Tests replace it.
	find = findOrStartContainer
	// mainCalled records that Main runs the tests.
	mainCalled atomic.Bool
)

// options returns the options of pgserver.Find set by the environment.
func options() pgserver.Options {
	opts := pgserver.Options{EnvVar: EnvDatabaseURL}
	if dir := os.Getenv(EnvBinDir); dir != "" {
		opts.ForceThrowaway = true
		opts.BinDir = dir
	}
	return opts
}

// findOrStartContainer finds a server as pgserver.Find does, else starts a
// container if a Docker engine answers.
func findOrStartContainer(ctx context.Context, opts pgserver.Options) (*pgserver.Server, error) {
	s, err := pgserver.Find(ctx, opts)
	noServer, ok := errors.AsType[*pgserver.NoServerError](err)
	if !ok {
		return s, err
	}
	s, err = pgcontainer.Start(ctx)
	if err == nil {
		return s, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, ctxErr
	}
	noServer.Attempts = append(noServer.Attempts, pgserver.Attempt{Source: pgcontainer.Source, Err: err})
	noServer.Hints = append(noServer.Hints, pgcontainer.Hint)
	return nil, noServer
}

// server returns the server of this process, finding it on first use, or
// fails the test.
func server(t testing.TB) *pgserver.Server {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatalf("pgtest: TestMain must call pgtest.Main, which stops the server pgtest may start and checks for leaked goroutines:\n\n" +
			"\tfunc TestMain(m *testing.M) { pgtest.Main(m) }")
	}
	s, err := discover()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

// discover finds the server of this process on first use.
func discover() (*pgserver.Server, error) {
	d := found
	d.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), findTimeout)
		defer cancel()
		opts := options()
		d.server, d.err = find(ctx, opts)
		if d.err != nil && opts.BinDir != "" {
			d.err = fmt.Errorf("%s=%s: %w", EnvBinDir, opts.BinDir, d.err)
		}
		if d.err == nil {
			fmt.Fprintf(os.Stderr, "pgtest: using %s, PostgreSQL %s\n", d.server.Source, d.server.Version)
		}
	})
	return d.server, d.err
}

// NewDatabase creates an empty database on the test server, drops it when
// the test and its subtests have finished (after the cleanup functions
// registered later, such as closing a pool), and returns its URL. It fails
// the test if there is no server or the database cannot be created.
func NewDatabase(t testing.TB) string {
	t.Helper()
	s := server(t)
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	name := DatabasePrefix + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(t.Context(), dbTimeout)
	defer cancel()
	url, err := pgserver.CreateDatabase(ctx, s.URL, name)
	if err != nil {
		t.Fatalf("pgtest: on %s: %v", s.Source, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if err := closeServers(ctx, name); err != nil {
			t.Errorf("pgtest: %v", err)
		}
		if err := pgserver.DropDatabase(ctx, s.URL, name); err != nil {
			t.Errorf("pgtest: on %s: %v", s.Source, err)
		}
	})
	t.Logf("pgtest: database %s on %s", name, s.Source)
	return url
}

// LockRoleDrops keeps other tests' databases from being dropped until t
// ends (see [pgserver.LockRoleDrops]). A test that migrates a database all
// the way down, which drops the role pglease_client where it can, calls it
// first: PostgreSQL's DROP ROLE fails with an internal error when a
// database that depends on the role is dropped at that moment.
func LockRoleDrops(t testing.TB) {
	t.Helper()
	s := server(t)
	ctx, cancel := context.WithTimeout(t.Context(), dbTimeout)
	defer cancel()
	unlock, err := pgserver.LockRoleDrops(ctx, s.URL)
	if err != nil {
		t.Fatalf("pgtest: on %s: %v", s.Source, err)
	}
	t.Cleanup(unlock)
}

// AdminURL returns the connection string of the test server's
// administrative role (able to create databases; a superuser unless
// PGLEASE_TEST_DATABASE_URL says otherwise), to the database "postgres" or
// the one PGLEASE_TEST_DATABASE_URL names. It may hold a password: print it with [pgserver.MaskURL]. It fails the test if
// there is no server.
func AdminURL(t testing.TB) string {
	t.Helper()
	return server(t).URL
}

// Source says in words which server the tests use, such as "local server
// 127.0.0.1:5432". It fails the test if there is no server.
func Source(t testing.TB) string {
	t.Helper()
	return server(t).Source
}

// Main runs the tests, for TestMain. After m.Run it stops the server if this
// process started it, then, if the tests passed, fails the run if goroutines
// were leaked (goleak), and exits with the run's code.
func Main(m *testing.M) {
	mainCalled.Store(true)
	os.Exit(run(m))
}

// run runs the tests and the checks after them, and returns the exit code.
func run(m *testing.M) (code int) {
	// Deferred as well, so that the server is stopped even if m.Run panics
	// on this goroutine.
	stopped := false
	defer func() {
		if !stopped {
			_ = stopServer()
		}
	}()
	code = m.Run()
	code = max(code, stopPooler())
	if err := dropExampleDatabase(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		code = max(code, 1)
	}
	stopped = true
	if err := stopServer(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		code = max(code, 1)
	}
	if code != 0 {
		return code
	}
	if err := goleak.Find(leakOptions()...); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: goroutines leaked by the tests: %v\n", err)
		return 1
	}
	return 0
}

// stopServer stops the server if this process started it.
func stopServer() error {
	s := found.server
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", s.Source, err)
	}
	return nil
}

// leakOptions returns the goroutines goleak ignores: none, unless the server
// is a container, whose library may keep a connection to its reaper and to
// the Docker engine for the life of the process.
func leakOptions() []goleak.Option {
	if s := found.server; s == nil || s.Source != pgcontainer.Source {
		return nil
	}
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}
