package pgtest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/schema"
)

// NewMigrated returns the URL of a fresh database with pglease's migrations
// applied, dropped when the test ends. When EnvSchema is "extension" it runs
// CREATE EXTENSION pglease instead (see [CreateExtension]).
func NewMigrated(t testing.TB) string {
	t.Helper()
	url := NewDatabase(t)
	if UsesExtension(t) {
		CreateExtension(t, url)
		return url
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := schema.Up(ctx, url); err != nil {
		t.Fatalf("pgtest: apply pglease migrations: %v", err)
	}
	return url
}

// NewPool returns a pool on a fresh migrated database, closed when the test
// ends (before the database is dropped).
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, NewMigrated(t))
}

// NewDirectPool is NewPool for tests of LISTEN/NOTIFY wake-ups: its
// connections never go through a connection pooler, since transaction
// pooling cannot carry a LISTEN (waiters behind one wake at expiry, which
// other tests cover).
func NewDirectPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return openPool(t, NewMigrated(t))
}

// Pool opens a pool on url, closed when the test ends. When the run goes
// through a connection pooler, the pool connects through it.
func Pool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	return openPool(t, clientURL(t, url))
}

func openPool(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
