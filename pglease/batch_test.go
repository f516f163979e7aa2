package pglease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/internal/testing/testsignal"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// batchHooks are a client's coalescing signals.
type batchHooks struct {
	sending, queued testsignal.Signal[int]
	left            testsignal.Signal[string]
}

func hookBatches(c *pglease.Client) batchHooks {
	h := batchHooks{testsignal.New[int](), testsignal.New[int](), testsignal.New[string]()}
	pglease.SetBatchHooks(c, h.sending.Send, h.queued.Send, h.left.Send)
	// A call in flight keeps its place however long a test takes to see it
	// wait: with the default 20 ms spill, a machine busy enough to take that
	// long between a blocked call's send and the next call let the next one
	// go out on its own, not queued (TestBatchCoalesces, 1 run in 30 beside
	// two CPU-bound processes).
	pglease.SetBatchSpill(c, time.Hour)
	return h
}

// rowLocker holds row locks on lease rows in a transaction of the test's
// own, on a connection of its own (never through a pooler), so that an
// acquire of those names waits: a call in flight for as long as the test
// wants.
type rowLocker struct {
	t    *testing.T
	conn *pgx.Conn
}

func newRowLocker(t *testing.T, url string) *rowLocker {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return &rowLocker{t: t, conn: conn}
}

// lock locks the rows of names (which must exist) until unlock.
func (r *rowLocker) lock(names ...string) {
	r.t.Helper()
	if _, err := r.conn.Exec(r.t.Context(), "BEGIN"); err != nil {
		r.t.Fatalf("BEGIN: %v", err)
	}
	if _, err := r.conn.Exec(r.t.Context(), "SELECT 1 FROM pglease.leases WHERE name = ANY($1) FOR UPDATE", names); err != nil {
		r.t.Fatalf("lock %v: %v", names, err)
	}
}

// awaitWaiter waits until a backend waits on a lock of the locker's
// transaction, as pg_stat_activity and pg_blocking_pids report it: a call
// that reached the server, so whatever its sender did before sending it
// (such as reading the clock for its deadline) is done.
func (r *rowLocker) awaitWaiter() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var waiting bool
		if err := r.conn.QueryRow(r.t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity AS a
			WHERE a.wait_event_type = 'Lock' AND pg_catalog.pg_backend_pid() = ANY (pg_catalog.pg_blocking_pids(a.pid)))`).Scan(&waiting); err != nil {
			r.t.Fatalf("look for a waiter on the locked rows: %v", err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.t.Fatal("no call waited on the locked rows within 10s")
}

func (r *rowLocker) unlock() {
	r.t.Helper()
	if _, err := r.conn.Exec(r.t.Context(), "ROLLBACK"); err != nil {
		r.t.Fatalf("ROLLBACK: %v", err)
	}
}

type tryResult struct {
	name     string
	lease    *pglease.Lease
	err      error
	returned time.Time
}

func goTry(ctx context.Context, c *pglease.Client, name string, ttl time.Duration, out chan<- tryResult) {
	go func() {
		l, err := c.TryAcquire(ctx, name, ttl)
		out <- tryResult{name, l, err, time.Now()}
	}()
}

// makeFree creates the rows of names, free (released at fence 1).
func makeFree(t *testing.T, c *pglease.Client, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := mustAcquire(t, c, name, time.Minute).Release(t.Context()); err != nil {
			t.Fatalf("Release %s: %v", name, err)
		}
	}
}

// TestBatchCoalesces: while one TryAcquire is in flight, three more queue
// and go out in one batch when it returns: one granted, one refused (held
// by another client), one the holder's own re-acquire. Each lease's
// Deadline counts from the batch's send time, after the first call
// returned, not from its own call.
func TestBatchCoalesces(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	pool := onePool(t, url)
	c := newClient(t, pool, "")
	other := newClient(t, pool, "")
	h := hookBatches(c)
	makeFree(t, c, "block")
	mustAcquire(t, other, "theirs", time.Hour)
	mine := mustAcquire(t, c, "mine", time.Hour)
	for range 2 {
		h.sending.Await(t, "the setup's calls")
	}
	locker := newRowLocker(t, url)
	locker.lock("block")

	out := make(chan tryResult, 4)
	const ttl = 10 * time.Second
	goTry(t.Context(), c, "block", ttl, out)
	if n := h.sending.Await(t, "the first call"); n != 1 {
		t.Fatalf("first call sent with %d calls, want 1 (an idle client sends at once)", n)
	}
	locker.awaitWaiter() // its send time is taken, before the unlock's
	for i, name := range []string{"new", "theirs", "mine"} {
		goTry(t.Context(), c, name, ttl, out)
		if n := h.queued.Await(t, "a queued call"); n != i+1 {
			t.Fatalf("queue length %d, want %d", n, i+1)
		}
	}
	unlocked := time.Now()
	locker.unlock()
	if n := h.sending.Await(t, "the batch"); n != 3 {
		t.Fatalf("batch sent with %d calls, want 3", n)
	}
	got := map[string]tryResult{}
	for range 4 {
		r := <-out
		got[r.name] = r
	}
	margin := ttl / 10 // the default safety margin
	for _, name := range []string{"block", "new", "mine"} {
		r := got[name]
		if r.err != nil {
			t.Fatalf("TryAcquire(%s): %v", name, r.err)
		}
		if name == "block" { // sent before the unlock: its own send time
			if d := r.lease.Deadline(); !d.Before(unlocked.Add(ttl - margin)) {
				t.Fatalf("block: Deadline %v, want before the unlock + TTL - margin %v (it was sent before)", d, unlocked.Add(ttl-margin))
			}
			continue
		}
		if d := r.lease.Deadline(); d.Before(unlocked.Add(ttl-margin)) || d.After(r.returned.Add(ttl-margin)) {
			t.Fatalf("%s: Deadline %v not between the unlock + TTL - margin (%v) and its return + TTL - margin (%v)",
				name, d, unlocked.Add(ttl-margin), r.returned.Add(ttl-margin))
		}
	}
	if f := got["new"].lease.Fence(); f != 1 {
		t.Fatalf("new: fence %d, want 1", f)
	}
	if f := got["block"].lease.Fence(); f != 2 {
		t.Fatalf("block: fence %d, want 2 (after the setup's tenure)", f)
	}
	if f := got["mine"].lease.Fence(); f != mine.Fence() {
		t.Fatalf("mine: fence %d, want the same tenure's %d", f, mine.Fence())
	}
	var held *pglease.HeldError
	if !errors.As(got["theirs"].err, &held) || held.Holder != other.Holder() || held.Fence != 1 {
		t.Fatalf("theirs: got %v, want a *HeldError naming %s at fence 1", got["theirs"].err, other.Holder())
	}

	// Releases coalesce too, and each is decided alone.
	for _, name := range []string{"block", "new", "mine"} {
		if err := got[name].lease.Release(t.Context()); err != nil {
			t.Fatalf("Release(%s): %v", name, err)
		}
	}
	if err := mine.Release(t.Context()); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("second Release of mine (same tenure): got %v, want ErrLeaseLost", err)
	}
}

// TestBatchCallerLeaves: a caller whose context ends while its batch is in
// flight returns ctx.Err(); the batch goes on for the other caller, and
// the lease it granted to the caller who left is released, so nobody holds
// a lease no caller knows about.
func TestBatchCallerLeaves(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	pool := onePool(t, url)
	c := newClient(t, pool, "")
	h := hookBatches(c)
	makeFree(t, c, "block", "slow")
	h.sending.Await(t, "setup")
	h.sending.Await(t, "setup")
	first, second := newRowLocker(t, url), newRowLocker(t, url)
	first.lock("block")
	second.lock("slow")

	out := make(chan tryResult, 3)
	goTry(t.Context(), c, "block", time.Minute, out)
	h.sending.Await(t, "the first call")
	ctx, cancel := context.WithCancel(t.Context())
	goTry(ctx, c, "abandoned", time.Minute, out)
	h.queued.Await(t, "the abandoned call queued")
	goTry(t.Context(), c, "slow", time.Minute, out)
	h.queued.Await(t, "the slow call queued")
	first.unlock()
	if r := <-out; r.name != "block" || r.err != nil {
		t.Fatalf("first call: %+v", r)
	}
	if n := h.sending.Await(t, "the batch"); n != 2 {
		t.Fatalf("batch of %d, want 2", n)
	}
	// The batch waits on "slow" (after granting "abandoned": names are
	// decided in order). Its caller leaves.
	cancel()
	if r := <-out; r.name != "abandoned" || !errors.Is(r.err, context.Canceled) || r.lease != nil {
		t.Fatalf("abandoned call: got %+v, want context.Canceled and no lease", r)
	}
	second.unlock()
	if r := <-out; r.name != "slow" || r.err != nil {
		t.Fatalf("the other caller of the batch: %+v, want its lease", r)
	}
	if name := h.left.Await(t, "the abandoned grant's release"); name != "abandoned" {
		t.Fatalf("released %q for a caller who left, want abandoned", name)
	}
	if s := leaseState(t, pool, "abandoned"); s != pgleaseadmin.Free {
		t.Fatalf("abandoned lease is %v, want free (released for the caller who left)", s)
	}
}

// TestBatchBadInput: a bad name is refused before it is queued, with
// ErrInvalidArgument, and fails no call coalesced with it.
func TestBatchBadInput(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	pool := onePool(t, url)
	c := newClient(t, pool, "")
	h := hookBatches(c)
	makeFree(t, c, "block")
	h.sending.Await(t, "setup")
	locker := newRowLocker(t, url)
	locker.lock("block")
	out := make(chan tryResult, 2)
	goTry(t.Context(), c, "block", time.Minute, out)
	h.sending.Await(t, "the first call")
	goTry(t.Context(), c, "good", time.Minute, out)
	h.queued.Await(t, "the good call queued")
	for _, name := range []string{"", string(make([]byte, pglease.MaxNameLen+1))} {
		if _, err := c.TryAcquire(t.Context(), name, time.Minute); !errors.Is(err, pglease.ErrInvalidArgument) {
			t.Fatalf("TryAcquire(%d-byte name) while a batch queues: got %v, want ErrInvalidArgument", len(name), err)
		}
	}
	if _, err := c.TryAcquire(t.Context(), "good2", 0); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("TryAcquire with TTL 0 while a batch queues: got %v, want ErrInvalidArgument", err)
	}
	locker.unlock()
	for range 2 {
		if r := <-out; r.err != nil {
			t.Fatalf("TryAcquire(%s) coalesced with bad calls: %v", r.name, r.err)
		}
	}
	if n := h.sending.Await(t, "the batch"); n != 1 {
		t.Fatalf("batch of %d, want 1 (the bad calls never queued)", n)
	}
}

// TestBatchFallsBack: when the server refuses a whole batch (here: a
// schema without acquire_batch, as before 0.3.0), its calls are made one
// by one, and each gets its own verdict.
func TestBatchFallsBack(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	pool := onePool(t, url)
	c := newClient(t, pool, "")
	other := newClient(t, pool, "")
	h := hookBatches(c)
	makeFree(t, c, "block")
	h.sending.Await(t, "setup")
	mustAcquire(t, other, "theirs", time.Hour)
	locker := newRowLocker(t, url)
	if _, err := locker.conn.Exec(t.Context(), "DROP FUNCTION pglease.acquire_batch"); err != nil {
		t.Fatal(err)
	}
	locker.lock("block")
	out := make(chan tryResult, 3)
	goTry(t.Context(), c, "block", time.Minute, out)
	h.sending.Await(t, "the first call")
	goTry(t.Context(), c, "new", time.Minute, out)
	h.queued.Await(t, "call 2 queued")
	goTry(t.Context(), c, "theirs", time.Minute, out)
	h.queued.Await(t, "call 3 queued")
	locker.unlock()
	if n := h.sending.Await(t, "the batch"); n != 2 {
		t.Fatalf("batch of %d, want 2", n)
	}
	got := map[string]tryResult{}
	for range 3 {
		r := <-out
		got[r.name] = r
	}
	for _, name := range []string{"block", "new"} {
		if got[name].err != nil {
			t.Fatalf("TryAcquire(%s) without acquire_batch: %v, want its lease (a single call)", name, got[name].err)
		}
	}
	if !errors.Is(got["theirs"].err, pglease.ErrLeaseHeld) {
		t.Fatalf("TryAcquire(theirs) without acquire_batch: %v, want ErrLeaseHeld", got["theirs"].err)
	}
}

// onePool returns a pool of one connection on url: a call made while
// another is in flight queues for the next batch, as on a pool of any size
// whose connections are all busy.
func onePool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return pgtest.Pool(t, url+sep+"pool_max_conns=1")
}
