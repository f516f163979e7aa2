//go:build sharded

package shardtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
)

// fleet is the two clusters the tests share; tests that stop a cluster
// start fleets of their own.
var fleet *Fleet

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := StartFleet(ctx, 2)
	if err != nil {
		fmt.Fprintf(os.Stderr, "shardtest: %v\n", err)
		return 1
	}
	fleet = f
	code := m.Run()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), time.Minute)
	defer stopCancel()
	if err := f.Stop(stopCtx); err != nil {
		fmt.Fprintf(os.Stderr, "shardtest: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "shardtest: goroutines leaked by the tests: %v\n", err)
			return 1
		}
	}
	return code
}

// testContext returns a context that ends with the test or after two
// minutes.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newSharded returns a fresh proxy over n partitions of f, dropped when
// the test ends.
func newSharded(t testing.TB, f *Fleet, n int) *Sharded {
	t.Helper()
	s, err := f.NewSharded(testContext(t), n)
	if err != nil {
		t.Fatalf("shardtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Drop(ctx); err != nil {
			t.Errorf("shardtest: drop: %v", err)
		}
	})
	return s
}

// newRole creates a login role in pglease_client on every cluster of f,
// dropped when the test ends, and returns its name.
func newRole(t testing.TB, f *Fleet, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	if err := f.CreateRole(testContext(t), name); err != nil {
		t.Fatalf("shardtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := f.DropRole(ctx, name); err != nil {
			t.Errorf("shardtest: %v", err)
		}
	})
	return name
}

// pool opens a pool on url as role (the URL's own user when role is
// empty), closed when the test ends.
func pool(t testing.TB, url, role string) *pgxpool.Pool {
	t.Helper()
	if role != "" {
		var err error
		if url, err = RoleURL(url, role); err != nil {
			t.Fatal(err)
		}
	}
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// querier is what the helpers need from a pool, a connection or a
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

type acquireResult struct {
	Acquired  bool
	Fence     int64
	Holder    string
	ExpiresIn time.Duration
}

func tryAcquire(ctx context.Context, q querier, name, holder string, ttl time.Duration) (acquireResult, error) {
	var r acquireResult
	err := q.QueryRow(ctx, `SELECT acquired, fence, holder, expires_in FROM pglease.acquire($1, $2, $3)`, name, holder, ttl).
		Scan(&r.Acquired, &r.Fence, &r.Holder, &r.ExpiresIn)
	return r, err
}

func acquire(t testing.TB, q querier, name, holder string, ttl time.Duration) acquireResult {
	t.Helper()
	r, err := tryAcquire(testContext(t), q, name, holder, ttl)
	if err != nil {
		t.Fatalf("acquire(%q, %q, %v): %v", name, holder, ttl, err)
	}
	return r
}

func mustAcquire(t testing.TB, q querier, name, holder string, ttl time.Duration, wantFence int64) {
	t.Helper()
	r := acquire(t, q, name, holder, ttl)
	if !r.Acquired || r.Fence != wantFence || r.Holder != holder {
		t.Fatalf("acquire(%q, %q): got acquired=%v fence=%d holder=%q, want acquired=true fence=%d holder=%q",
			name, holder, r.Acquired, r.Fence, r.Holder, wantFence, holder)
	}
}

func renew(t testing.TB, q querier, name, holder string, fence int64, ttl time.Duration) bool {
	t.Helper()
	var renewed bool
	err := q.QueryRow(testContext(t), `SELECT renewed FROM pglease.renew($1, $2, $3, $4)`, name, holder, fence, ttl).Scan(&renewed)
	if err != nil {
		t.Fatalf("renew(%q, %q, %d): %v", name, holder, fence, err)
	}
	return renewed
}

func release(t testing.TB, q querier, name, holder string, fence int64) bool {
	t.Helper()
	var released bool
	err := q.QueryRow(testContext(t), `SELECT released FROM pglease.release($1, $2, $3)`, name, holder, fence).Scan(&released)
	if err != nil {
		t.Fatalf("release(%q, %q, %d): %v", name, holder, fence, err)
	}
	return released
}

// requirePgError fails unless err is a server error with SQLSTATE code
// whose message contains every one of contains.
func requirePgError(t testing.TB, err error, code string, contains ...string) {
	t.Helper()
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		t.Fatalf("error: got %v, want SQLSTATE %s", err, code)
	}
	if pgErr.Code != code {
		t.Fatalf("SQLSTATE: got %s (%s), want %s", pgErr.Code, pgErr.Message, code)
	}
	for _, s := range contains {
		if !strings.Contains(pgErr.Message, s) {
			t.Fatalf("message: got %q, want it to contain %q", pgErr.Message, s)
		}
	}
}

// partitionOf asks the proxy which partition owns key.
func partitionOf(t testing.TB, proxy querier, key string) int {
	t.Helper()
	var p int
	if err := proxy.QueryRow(testContext(t), `SELECT partition FROM pglease.partition_of($1)`, key).Scan(&p); err != nil {
		t.Fatalf("partition_of(%q): %v", key, err)
	}
	return p
}

// namesOn returns n names that the proxy routes to partition want.
func namesOn(t testing.TB, proxy querier, prefix string, want, n int) []string {
	t.Helper()
	var names []string
	for i := 0; len(names) < n; i++ {
		if i > 10000 {
			t.Fatalf("no %d names of prefix %q on partition %d in 10000 tries", n, prefix, want)
		}
		name := fmt.Sprintf("%s-%d", prefix, i)
		if partitionOf(t, proxy, name) == want {
			names = append(names, name)
		}
	}
	return names
}

// waitFor polls cond until it reports true, failing the test after 10s. It
// is for states only the server can tell (a lease expiring), never to give
// another goroutine time to run. Only the test's goroutine may call it:
// callbacks and other goroutines use [waitUntil].
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if err := waitUntil(testContext(t), 10*time.Second, what, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond until it reports true and returns nil, or returns
// an error saying what it waited for when cond fails, ctx ends or within
// passes. It fails no test, so a callback can return its error.
func waitUntil(ctx context.Context, within time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		switch {
		case ok:
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("wait for %s: still not the case after %v (%w)", what, within, context.Cause(ctx))
		case err != nil:
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
