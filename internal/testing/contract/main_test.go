package contract

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}

// callTimeout bounds every single database call of the helpers below, so a
// test that wrongly blocks fails with a message instead of hanging.
const callTimeout = 20 * time.Second

// querier is what the helpers need from a pool, a connection or a
// transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// testContext returns a context that ends with the test or after a minute.
// Cleanup functions must not use it: it is cancelled before they run.
func testContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func callContext(t testing.TB) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), callTimeout)
}

// testDB is a migrated database shared by the parallel subtests of a group.
// Each subtest keeps to lease names, scopes and holders of its own, made
// with namer.
type testDB struct {
	url  string
	pool *pgxpool.Pool
}

type subtest struct {
	name string
	run  func(t *testing.T, db *testDB)
}

// runGroup runs tests as parallel subtests of t on one fresh migrated
// database, dropped when they have all finished. Databases cost about two
// seconds each to create and drop, so groups keep the suite fast. The
// tenure history is on for every name the subtests make with namer, so
// that their grants and ends also pass the history's checks (no two
// tenures of a name or slot overlap, fences rise in grant order).
func runGroup(t *testing.T, maxConns int32, tests []subtest) {
	t.Helper()
	url := pgtest.NewMigrated(t)
	db := &testDB{url: url, pool: newPool(t, url, maxConns)}
	if !strings.HasPrefix(t.Name(), "TestTenureHistory") { // it turns the history on and off itself
		mustExec(t, db.pool, `SELECT pglease.history_enable($1, '1 day')`, t.Name()+"/")
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.run(t, db)
		})
	}
}

// namer returns a function that puts a name in t's own namespace, so that
// subtests sharing a database never meet.
func namer(t testing.TB) func(string) string {
	prefix := t.Name() + "/"
	return func(s string) string { return prefix + s }
}

// newPool opens a pool of up to maxConns connections on url, closed when the
// test ends (before its database is dropped).
func newPool(t testing.TB, url string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
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

// connect opens a single connection on url, closed when the test ends.
func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// uniqueName returns prefix followed by random hex, for names that must not
// collide with other tests on the same server (roles).
func uniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func mustExec(t testing.TB, q querier, sql string, args ...any) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	if _, err := q.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}

// pgCode returns the SQLSTATE of err, or "" when err is not a server error.
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// requirePgError fails unless err is a server error with SQLSTATE code whose
// message contains every one of contains.
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

// waitFor polls cond until it reports true, failing the test after timeout.
// It is for states only the server can tell (a lease expiring, a backend
// waiting on a lock), never to give another goroutine time to run.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("wait for %s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("wait for %s: still not the case after %v", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// beginBefore begins a transaction on q and fixes its start time (now())
// before the caller creates the leases or slots it then watches expire from
// inside: a view or check that wrongly used now() would see them live.
func beginBefore(t testing.TB, q interface {
	Begin(context.Context) (pgx.Tx, error)
}) pgx.Tx {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	tx, err := q.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, `SELECT now()`); err != nil {
		t.Fatalf("start transaction: %v", err)
	}
	return tx
}

// waitBlockedBy waits until the backend pid waits on a lock held by the
// backend blocker, as the server reports it in pg_stat_activity and
// pg_blocking_pids. Naming the blocker matters: a backend can also wait on
// locks of other sessions on the server, such as the cluster-wide lock that
// serialises the commits of transactions that sent a NOTIFY.
func waitBlockedBy(t testing.TB, q querier, pid, blocker uint32) {
	t.Helper()
	waitFor(t, time.Minute, fmt.Sprintf("backend %d to wait on a lock of backend %d", pid, blocker), func() (bool, error) {
		ctx, cancel := callContext(t)
		defer cancel()
		var blocked bool
		err := q.QueryRow(ctx, `SELECT coalesce(a.wait_event_type = 'Lock', false)
				AND $2::integer = ANY (pg_catalog.pg_blocking_pids(a.pid))
			FROM pg_catalog.pg_stat_activity AS a WHERE a.pid = $1`, int64(pid), int64(blocker)).Scan(&blocked)
		return blocked, err
	})
}

// backendPID returns the server process id of the connection's backend.
func backendPID(t testing.TB, q querier) uint32 {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var pid uint32
	if err := q.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatalf("pg_backend_pid: %v", err)
	}
	return pid
}

// ---- leases ----

type acquireResult struct {
	Acquired  bool
	Fence     int64
	Holder    string
	ExpiresAt time.Time
	ExpiresIn time.Duration
}

func tryAcquire(ctx context.Context, q querier, name, holder string, ttl time.Duration) (acquireResult, error) {
	var r acquireResult
	err := q.QueryRow(ctx, `SELECT acquired, fence, holder, expires_at, expires_in
		FROM pglease.acquire($1, $2, $3)`, name, holder, ttl).
		Scan(&r.Acquired, &r.Fence, &r.Holder, &r.ExpiresAt, &r.ExpiresIn)
	return r, err
}

func acquire(t testing.TB, q querier, name, holder string, ttl time.Duration) acquireResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	r, err := tryAcquire(ctx, q, name, holder, ttl)
	if err != nil {
		t.Fatalf("acquire(%q, %q, %v): %v", name, holder, ttl, err)
	}
	return r
}

// mustAcquire acquires and fails unless the lease was granted with fence
// wantFence.
func mustAcquire(t testing.TB, q querier, name, holder string, ttl time.Duration, wantFence int64) acquireResult {
	t.Helper()
	r := acquire(t, q, name, holder, ttl)
	if !r.Acquired || r.Fence != wantFence || r.Holder != holder {
		t.Fatalf("acquire(%q, %q): got acquired=%v fence=%d holder=%q, want acquired=true fence=%d holder=%q",
			name, holder, r.Acquired, r.Fence, r.Holder, wantFence, holder)
	}
	return r
}

type renewResult struct {
	Renewed   bool
	ExpiresAt *time.Time
	ExpiresIn *time.Duration
}

func renew(t testing.TB, q querier, name, holder string, fence int64, ttl time.Duration) renewResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var r renewResult
	err := q.QueryRow(ctx, `SELECT renewed, expires_at, expires_in
		FROM pglease.renew($1, $2, $3, $4)`, name, holder, fence, ttl).
		Scan(&r.Renewed, &r.ExpiresAt, &r.ExpiresIn)
	if err != nil {
		t.Fatalf("renew(%q, %q, %d, %v): %v", name, holder, fence, ttl, err)
	}
	return r
}

// requireNotRenewed fails unless r is the refusal of a renewal.
func requireNotRenewed(t testing.TB, r renewResult) {
	t.Helper()
	if r.Renewed || r.ExpiresAt != nil || r.ExpiresIn != nil {
		t.Fatalf("renew: got renewed=%v expires_at=%v expires_in=%v, want false, NULL, NULL",
			r.Renewed, r.ExpiresAt, r.ExpiresIn)
	}
}

func release(t testing.TB, q querier, name, holder string, fence int64) bool {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var released bool
	err := q.QueryRow(ctx, `SELECT released FROM pglease.release($1, $2, $3)`, name, holder, fence).
		Scan(&released)
	if err != nil {
		t.Fatalf("release(%q, %q, %d): %v", name, holder, fence, err)
	}
	return released
}

type leaseRow struct {
	Name      string
	Holder    *string
	Fence     int64
	State     string
	ExpiresAt *time.Time
	ExpiresIn *time.Duration
}

// leaseStatus reads the lease from pglease.lease_status; found is false when
// the view has no row for name.
func leaseStatus(t testing.TB, q querier, name string) (row leaseRow, found bool) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	err := q.QueryRow(ctx, `SELECT name, holder, fence, state, expires_at, expires_in
		FROM pglease.lease_status WHERE name = $1`, name).
		Scan(&row.Name, &row.Holder, &row.Fence, &row.State, &row.ExpiresAt, &row.ExpiresIn)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false
	}
	if err != nil {
		t.Fatalf("lease_status %q: %v", name, err)
	}
	return row, true
}

func mustLeaseStatus(t testing.TB, q querier, name string) leaseRow {
	t.Helper()
	row, found := leaseStatus(t, q, name)
	if !found {
		t.Fatalf("lease_status %q: no row", name)
	}
	return row
}

// waitLeaseState waits until the server reports lease name in state.
func waitLeaseState(t testing.TB, q querier, name, state string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("lease %q to be %s", name, state), func() (bool, error) {
		row, found := leaseStatus(t, q, name)
		return found && row.State == state, nil
	})
}

func assertHeld(ctx context.Context, q querier, name string, fence int64) error {
	_, err := q.Exec(ctx, `SELECT pglease.assert_held($1, $2)`, name, fence)
	return err
}

// ---- slots ----

type claimResult struct {
	Claimed   bool
	Slot      *int32
	Fence     *int64
	ExpiresAt *time.Time
	ExpiresIn *time.Duration
	InUse     int32
	RetryIn   *time.Duration
}

func tryClaimSlot(ctx context.Context, q querier, scope, holder string, capacity int32, ttl time.Duration) (claimResult, error) {
	var r claimResult
	err := q.QueryRow(ctx, `SELECT claimed, slot, fence, expires_at, expires_in, in_use, retry_in
		FROM pglease.claim_slot($1, $2, $3, $4)`, scope, holder, capacity, ttl).
		Scan(&r.Claimed, &r.Slot, &r.Fence, &r.ExpiresAt, &r.ExpiresIn, &r.InUse, &r.RetryIn)
	return r, err
}

func claimSlot(t testing.TB, q querier, scope, holder string, capacity int32, ttl time.Duration) claimResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	r, err := tryClaimSlot(ctx, q, scope, holder, capacity, ttl)
	if err != nil {
		t.Fatalf("claim_slot(%q, %q, %d, %v): %v", scope, holder, capacity, ttl, err)
	}
	return r
}

// mustClaimSlot claims and fails unless the claim was granted with slot
// wantSlot and fence wantFence.
func mustClaimSlot(t testing.TB, q querier, scope, holder string, capacity int32, ttl time.Duration, wantSlot int32, wantFence int64) claimResult {
	t.Helper()
	r := claimSlot(t, q, scope, holder, capacity, ttl)
	if !r.Claimed || r.Slot == nil || *r.Slot != wantSlot || r.Fence == nil || *r.Fence != wantFence ||
		r.ExpiresAt == nil || r.ExpiresIn == nil || *r.ExpiresIn != ttl || r.RetryIn != nil {
		t.Fatalf("claim_slot(%q, %q, %d): got %s, want claimed slot %d fence %d, expires_in the TTL, retry_in NULL",
			scope, holder, capacity, r, wantSlot, wantFence)
	}
	return r
}

func (r claimResult) String() string {
	return fmt.Sprintf("claimed=%v slot=%s fence=%s in_use=%d expires_in=%s retry_in=%s",
		r.Claimed, ptrString(r.Slot), ptrString(r.Fence), r.InUse, ptrString(r.ExpiresIn), ptrString(r.RetryIn))
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

func renewSlot(t testing.TB, q querier, scope string, slot int32, holder string, fence int64, ttl time.Duration) renewResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var r renewResult
	err := q.QueryRow(ctx, `SELECT renewed, expires_at, expires_in
		FROM pglease.renew_slot($1, $2, $3, $4, $5)`, scope, slot, holder, fence, ttl).
		Scan(&r.Renewed, &r.ExpiresAt, &r.ExpiresIn)
	if err != nil {
		t.Fatalf("renew_slot(%q, %d, %q, %d, %v): %v", scope, slot, holder, fence, ttl, err)
	}
	return r
}

func releaseSlot(t testing.TB, q querier, scope string, slot int32, holder string, fence int64) bool {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var released bool
	err := q.QueryRow(ctx, `SELECT released FROM pglease.release_slot($1, $2, $3, $4)`,
		scope, slot, holder, fence).Scan(&released)
	if err != nil {
		t.Fatalf("release_slot(%q, %d, %q, %d): %v", scope, slot, holder, fence, err)
	}
	return released
}

type slotRow struct {
	Scope     string
	Slot      int32
	Holder    *string
	Fence     int64
	State     string
	ExpiresAt *time.Time
	ExpiresIn *time.Duration
}

func slotStatus(t testing.TB, q querier, scope string, slot int32) (row slotRow, found bool) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	err := q.QueryRow(ctx, `SELECT scope, slot, holder, fence, state, expires_at, expires_in
		FROM pglease.slot_status WHERE scope = $1 AND slot = $2`, scope, slot).
		Scan(&row.Scope, &row.Slot, &row.Holder, &row.Fence, &row.State, &row.ExpiresAt, &row.ExpiresIn)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, false
	}
	if err != nil {
		t.Fatalf("slot_status %q %d: %v", scope, slot, err)
	}
	return row, true
}

func mustSlotStatus(t testing.TB, q querier, scope string, slot int32) slotRow {
	t.Helper()
	row, found := slotStatus(t, q, scope, slot)
	if !found {
		t.Fatalf("slot_status %q slot %d: no row", scope, slot)
	}
	return row
}

func waitSlotState(t testing.TB, q querier, scope string, slot int32, state string) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("slot %q/%d to be %s", scope, slot, state), func() (bool, error) {
		row, found := slotStatus(t, q, scope, slot)
		return found && row.State == state, nil
	})
}

// scopeStatus reads pglease.slot_scope_status; a scope without slot rows
// reads as 0, 0.
func scopeStatus(t testing.TB, q querier, scope string) (inUse, slots int32) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	err := q.QueryRow(ctx, `SELECT in_use, slots FROM pglease.slot_scope_status WHERE scope = $1`, scope).
		Scan(&inUse, &slots)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0
	}
	if err != nil {
		t.Fatalf("slot_scope_status %q: %v", scope, err)
	}
	return inUse, slots
}

// requireAtMostAbout fails unless got is within [want-tolerance, want].
func requireAtMostAbout(t testing.TB, what string, got, want, tolerance time.Duration) {
	t.Helper()
	if got > want || got < want-tolerance {
		t.Fatalf("%s: got %v, want between %v and %v", what, got, want-tolerance, want)
	}
}
