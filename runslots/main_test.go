package runslots_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/internal/testing/testsignal"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

// TestMain points DATABASE_URL at a migrated database for the examples.
func TestMain(m *testing.M) { pgtest.MainWithExamples(m) }

// callTimeout bounds each database call of the helpers, so that a test that
// wrongly blocks fails with a message instead of hanging.
const callTimeout = 20 * time.Second

func newClient(t testing.TB, db pglease.DB, holder string) *runslots.Client {
	t.Helper()
	c, err := runslots.New(db, runslots.Config{Holder: holder})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

// newClients returns n clients holding "holder-0" ... on db.
func newClients(t testing.TB, db pglease.DB, n int) []*runslots.Client {
	t.Helper()
	cs := make([]*runslots.Client, n)
	for i := range cs {
		cs[i] = newClient(t, db, fmt.Sprintf("holder-%d", i))
	}
	return cs
}

// newPool opens a pool of up to maxConns connections on a fresh migrated
// database, closed when the test ends.
func newPool(t testing.TB, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.NewMigrated(t))
	if err != nil {
		t.Fatalf("parse pool config: %v", err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func mustClaim(t testing.TB, c *runslots.Client, scope string, capacity int, ttl time.Duration) *runslots.Slot {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s, err := c.TryClaim(ctx, runslots.Want{Scope: scope, Capacity: capacity}, ttl)
	if err != nil {
		t.Fatalf("TryClaim(%q, %d) as %s: %v", scope, capacity, c.Holder(), err)
	}
	return s
}

// mustBeFull fails unless c's claim of scope at capacity is refused with a
// *FullError reporting inUse live holders.
func mustBeFull(t testing.TB, c *runslots.Client, scope string, capacity, inUse int) *runslots.FullError {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	s, err := c.TryClaim(ctx, runslots.Want{Scope: scope, Capacity: capacity}, time.Minute)
	if err == nil {
		t.Fatalf("TryClaim(%q, %d) as %s: got slot %d fence %d, want ErrFull", scope, capacity, c.Holder(), s.Number(), s.Fence())
	}
	full, ok := errors.AsType[*runslots.FullError](err)
	if !ok || !errors.Is(err, runslots.ErrFull) {
		t.Fatalf("TryClaim(%q, %d): got %v, want a *FullError matching ErrFull", scope, capacity, err)
	}
	if full.Scope != scope || full.Capacity != capacity || full.InUse != inUse {
		t.Fatalf("FullError: got %+v, want scope %q, capacity %d, in use %d", full, scope, capacity, inUse)
	}
	return full
}

func mustRelease(t testing.TB, s *runslots.Slot) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := s.Release(ctx); err != nil {
		t.Fatalf("Release of slot %d of %q: %v", s.Number(), s.Scope(), err)
	}
}

// inUse returns the number of live holders of scope the server reports.
func inUse(t testing.TB, db pglease.DB, scope string) int {
	t.Helper()
	n, err := scopeInUse(db, scope)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// scopeInUse is inUse for goroutines that must not call t.Fatal (a Run's
// fn): it returns the failure.
func scopeInUse(db pglease.DB, scope string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	scopes, err := pgleaseadmin.Scopes(ctx, db)
	if err != nil {
		return 0, fmt.Errorf("Scopes: %w", err)
	}
	for _, s := range scopes {
		if s.Scope == scope {
			return s.InUse, nil
		}
	}
	return 0, nil
}

// slotStatus returns the server's view of slot number of scope.
func slotStatus(t testing.TB, db pglease.DB, scope string, number int) pgleaseadmin.SlotStatus {
	t.Helper()
	st, err := findSlot(db, scope, number)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// findSlot is slotStatus for goroutines that must not call t.Fatal (a
// Run's fn): it returns the failure.
func findSlot(db pglease.DB, scope string, number int) (pgleaseadmin.SlotStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	all, err := pgleaseadmin.Slots(ctx, db)
	if err != nil {
		return pgleaseadmin.SlotStatus{}, fmt.Errorf("Slots: %w", err)
	}
	for _, s := range all {
		if s.Scope == scope && s.Slot == number {
			return s, nil
		}
	}
	return pgleaseadmin.SlotStatus{}, fmt.Errorf("Slots: no slot %d of scope %q in %+v", number, scope, all)
}

// bumpFence moves the fence of slot number of scope on, as a takeover
// would: fault injection at the database, through the schema owner's pool.
func bumpFence(t testing.TB, pool *pgxpool.Pool, scope string, number int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	tag, err := pool.Exec(ctx, `UPDATE pglease.slots SET fence = fence + 1 WHERE scope = $1 AND slot = $2`, scope, number)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("bump fence of slot %d of %q: %v (%d rows)", number, scope, err, tag.RowsAffected())
	}
}

// waitingHook returns a signal of the scope each time one of c's blocking
// claims has been refused and is about to wait.
func waitingHook(c *runslots.Client) testsignal.Signal[string] {
	s := testsignal.New[string]()
	runslots.SetWaitingHook(c, s.Send)
	return s
}

// noDB is a database that fails the test when it is used: arguments that
// the client must refuse before any round trip are tried against it.
type noDB struct{ t testing.TB }

var errNoDB = errors.New("noDB: no round trip expected")

func (d noDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	d.t.Errorf("unexpected Exec")
	return pgconn.CommandTag{}, errNoDB
}

func (d noDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	d.t.Errorf("unexpected Query")
	return nil, errNoDB
}

func (d noDB) QueryRow(context.Context, string, ...any) pgx.Row {
	d.t.Errorf("unexpected QueryRow")
	return errRow{}
}

func (d noDB) Begin(context.Context) (pgx.Tx, error) {
	d.t.Errorf("unexpected Begin")
	return nil, errNoDB
}

// SendBatch implements pglease.DB; no test sends a batch on it.
func (d noDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	d.t.Errorf("unexpected SendBatch")
	return nil
}

type errRow struct{}

func (errRow) Scan(...any) error { return errNoDB }

// claimRun claims a slot of scope with capacity for ttl, waiting as Claim
// does, and holds it while fn runs (Slot.Run).
func claimRun(ctx context.Context, c *runslots.Client, scope string, capacity int, ttl time.Duration, fn func(context.Context) error) error {
	s, err := c.Claim(ctx, runslots.Want{Scope: scope, Capacity: capacity}, ttl)
	if err != nil {
		return err
	}
	return s.Run(ctx, fn)
}
