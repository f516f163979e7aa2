package pglease_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
)

// TestSendFenced: a batch sent behind the fence commits while the tenure is
// current, runs none of its statements once it is over, and is one
// transaction: a failing statement takes the others with it, and sent on a
// pgx.Tx it keeps the lease row locked until the caller commits.
func TestSendFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, `CREATE TABLE public.orders (id int, fence bigint)`); err != nil {
		t.Fatal(err)
	}
	a := newClient(t, pool, "a")
	b := newClient(t, pool, "b")
	la := mustAcquire(t, a, "orders", 10*time.Second)

	// insert is a batch of one fenced insert, whose callback counts calls.
	calls := 0
	insert := func(id int, fence int64) *pgx.Batch {
		var batch pgx.Batch
		batch.Queue(`INSERT INTO public.orders VALUES ($1, $2)`, id, fence).Exec(func(ct pgconn.CommandTag) error {
			calls++
			if ct.RowsAffected() != 1 {
				t.Errorf("insert affected %d rows, want 1", ct.RowsAffected())
			}
			return nil
		})
		return &batch
	}
	batch := insert(1, la.Fence())
	if err := pglease.SendFenced(ctx, pool, la.Name(), la.Fence(), batch); err != nil {
		t.Fatalf("SendFenced while held: %v", err)
	}
	if err := pglease.SendFenced(ctx, pool, la.Name(), la.Fence(), batch); err != nil { // the same batch again
		t.Fatalf("SendFenced of the same batch again: %v", err)
	}
	if calls != 2 {
		t.Fatalf("the insert's callback ran %d times, want 2", calls)
	}

	// Over: nothing runs, no callback is called.
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	lb := mustAcquire(t, b, "orders", 10*time.Second)
	if err := pglease.SendFenced(ctx, pool, la.Name(), la.Fence(), insert(2, la.Fence())); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("SendFenced with an ended tenure = %v, want ErrLeaseLost", err)
	}
	if calls != 2 {
		t.Fatalf("an ended tenure's batch called its callback (%d calls, want 2)", calls)
	}

	// A failing statement, when prepared or when run: its error unchanged,
	// the statements before it rolled back with it.
	var pgErr *pgconn.PgError
	for _, f := range []struct {
		sql  string
		args []any
		code string
	}{
		{`INSERT INTO public.no_such_table VALUES (1)`, nil, "42P01"},
		{`SELECT 1 / $1::int`, []any{0}, "22012"},
	} {
		failing := insert(3, lb.Fence())
		failing.Queue(f.sql, f.args...)
		if err := pglease.SendFenced(ctx, pool, lb.Name(), lb.Fence(), failing); !errors.As(err, &pgErr) || pgErr.Code != f.code || errors.Is(err, pglease.ErrNotMigrated) {
			t.Fatalf("SendFenced with a failing %q = %v, want its *pgconn.PgError %s unchanged", f.sql, err, f.code)
		}
	}

	// On a transaction: the lease row stays locked until its commit, so a
	// takeover waits for it.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := pglease.SendFenced(ctx, tx, "orders", lb.Fence(), insert(4, lb.Fence())); err != nil {
		t.Fatalf("SendFenced on a transaction: %v", err)
	}
	lockedErr := func() error {
		_, err := pool.Exec(ctx, `SELECT 1 FROM pglease.leases WHERE name = 'orders' FOR UPDATE NOWAIT`)
		return err
	}
	if err := lockedErr(); !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("locking the lease row during the caller's transaction = %v, want 55P03 (lock_not_available)", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lockedErr(); err != nil {
		t.Fatalf("locking the lease row after the commit: %v", err)
	}

	rows, _ := pool.Query(ctx, `SELECT format('%s/%s', id, fence) FROM public.orders ORDER BY id`)
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("1/%d", la.Fence()), fmt.Sprintf("1/%d", la.Fence()), fmt.Sprintf("4/%d", lb.Fence())}
	if !slices.Equal(got, want) {
		t.Fatalf("orders id/fence = %v, want %v: the ended tenure's and the failed batches' writes rolled back", got, want)
	}
}

// TestSendFencedInvalidArguments: bad input is refused before any round
// trip, naming what was wrong.
func TestSendFencedInvalidArguments(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var one pgx.Batch
	one.Queue(`SELECT 1`)
	for _, tc := range []struct {
		name  string
		fence int64
		batch *pgx.Batch
		want  string
	}{
		{"", 1, &one, "name must be 1 to 256 bytes"},
		{"ok", -1, &one, "fence must be 0 or more"},
		{"ok", 1, nil, "the batch has no statements"},
		{"ok", 1, &pgx.Batch{}, "the batch has no statements"},
	} {
		err := pglease.SendFenced(context.Background(), pool, tc.name, tc.fence, tc.batch)
		if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SendFenced(%q, %d) = %v, want ErrInvalidArgument saying %q", tc.name, tc.fence, err, tc.want)
		}
	}
}

// TestWithFenceEndsStrandedSession: when the client gives up on a fenced
// transaction's connection while the server session lives on, idle in the
// transaction and holding the lease row (pgx closing a connection in the
// background after a context was cancelled mid-statement; here the
// connection is hijacked and left open), WithFence ends that session, so
// that the holder's release does not wait for the transaction's idle
// timeout (the tenure's end).
func TestWithFenceEndsStrandedSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	// Through a pooler in transaction mode (make test-pgbouncer) the
	// client's PID is the pooler's, not a server backend's: WithFence cannot
	// find the session, and the transaction's idle timeout (the tenure's
	// time left + 100 ms) is the bound. Then the tenure is short and a
	// takeover must get through after it.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var serverPID int64
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&serverPID); err != nil {
		t.Fatal(err)
	}
	pooled := uint32(serverPID) != conn.Conn().PgConn().PID()
	conn.Release()
	ttl := time.Minute
	if pooled {
		ttl = 2 * time.Second
	}
	a := newClient(t, pool, "a")
	l := mustAcquire(t, a, "stranded", ttl)
	errWorkload := errors.New("workload cancelled")
	var pid uint32
	err = pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(tx pgx.Tx) error {
		pc := tx.Conn().PgConn()
		if err := pc.SyncConn(ctx); err != nil {
			return err
		}
		hc, err := pc.Hijack()
		if err != nil {
			return err
		}
		pid = hc.PID
		t.Cleanup(func() { _ = hc.Conn.Close() })
		return errWorkload
	})
	if !errors.Is(err, errWorkload) {
		t.Fatalf("WithFence: got %v, want the workload's error", err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if pooled {
		b := newClient(t, pool, "b")
		if _, err := b.Acquire(rctx, "stranded", time.Minute); err != nil {
			t.Fatalf("takeover after the stranded transaction's idle timeout, through a pooler: %v", err)
		}
		return
	}
	// The release goes through at once: the stranded session is gone.
	if err := l.Release(rctx); err != nil {
		t.Fatalf("release after the stranded fenced transaction: %v (the session kept the lease row locked)", err)
	}
	var alive bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
		WHERE pid = $1 AND state LIKE 'idle in transaction%')`, int64(pid)).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if alive {
		t.Fatalf("backend %d is still idle in the fenced transaction", pid)
	}
}

// sqlRecorder is a pgx query tracer that records each message's SQL.
type sqlRecorder struct{ sql []string }

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.sql = append(r.sql, data.SQL)
	return ctx
}

func (r *sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestWithFenceOneMessage: on a connection, WithFence sends BEGIN and the
// check as one message, so a fenced write costs the round trips of the
// same transaction without the check. The lease's name travels as a
// literal: quotes and backslashes in it are read back exactly, whatever
// standard_conforming_strings says.
func TestWithFenceOneMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewMigrated(t)
	for _, conforming := range []string{"on", "off"} {
		t.Run("standard_conforming_strings="+conforming, func(t *testing.T) {
			cfg, err := pgx.ParseConfig(url)
			if err != nil {
				t.Fatal(err)
			}
			rec := &sqlRecorder{}
			cfg.Tracer = rec
			conn, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close(ctx) })
			if _, err := conn.Exec(ctx, "SET standard_conforming_strings = "+conforming); err != nil {
				t.Fatal(err)
			}
			c := newClient(t, conn, "a")
			name := `it's a \'quoted\\ name ` + conforming
			l := mustAcquire(t, c, name, time.Minute)
			rec.sql = nil
			var got string
			err = pglease.WithFence(ctx, conn, l.Name(), l.Fence(), func(tx pgx.Tx) error {
				return tx.QueryRow(ctx, `SELECT name FROM pglease.lease_status WHERE name = $1`, name).Scan(&got)
			})
			if err != nil {
				t.Fatalf("WithFence on lease %q: %v", name, err)
			}
			if got != name {
				t.Fatalf("the fenced transaction read lease %q, want %q", got, name)
			}
			if len(rec.sql) != 3 || !strings.HasPrefix(rec.sql[0], "BEGIN; SELECT pglease.assert_held(") || rec.sql[2] != "commit" {
				t.Fatalf("WithFence sent %q, want BEGIN and the check in one message, the workload's statement, commit", rec.sql)
			}
		})
	}
}

// TestWithFenceRefusedKeepsConnection: a refused check is rolled back on
// the connection it ran on, which stays in the pool and in use, and a
// refusal on a dedicated connection leaves it ready for the next
// statement.
func TestWithFenceRefusedKeepsConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c := newClient(t, pool, "a")
	l := mustAcquire(t, c, "kept", time.Minute)
	if err := pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("WithFence while held: %v", err)
	}
	opened := pool.Stat().NewConnsCount()
	for range 3 {
		err := pglease.WithFence(ctx, pool, "kept", l.Fence()+1, func(pgx.Tx) error {
			t.Error("fn ran behind a refused check")
			return nil
		})
		if !errors.Is(err, pglease.ErrLeaseLost) {
			t.Fatalf("WithFence with another fence = %v, want ErrLeaseLost", err)
		}
	}
	if err := pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("WithFence after refusals: %v", err)
	}
	if n := pool.Stat().NewConnsCount(); n != opened {
		t.Fatalf("the pool opened %d connections after refusals, want none (a refused check must not cost a connection)", n-opened)
	}

	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	err = pglease.WithFence(ctx, pc, "never-acquired", 1, func(pgx.Tx) error { return nil })
	if !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("WithFence on a connection, lease never acquired = %v, want ErrLeaseLost", err)
	}
	if s := pc.Conn().PgConn().TxStatus(); s != 'I' {
		t.Fatalf("connection after a refused check: transaction status %q, want idle", s)
	}
	var one int
	if err := pc.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("statement on the connection after a refused check: %v", err)
	}
}

// TestWithFenceOtherClientEncoding: in a client encoding other than UTF-8
// (where a character's last byte may be a backslash's, as in SJIS), the
// name is never written as a literal: WithFence begins, then checks in a
// statement of its own, with the name as a parameter.
func TestWithFenceOtherClientEncoding(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(pgtest.NewMigrated(t))
	if err != nil {
		t.Fatal(err)
	}
	rec := &sqlRecorder{}
	cfg.Tracer = rec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	c := newClient(t, conn, "a")
	const name = `sjis \' name`
	l := mustAcquire(t, c, name, time.Minute)
	if _, err := conn.Exec(ctx, "SET client_encoding = 'SJIS'"); err != nil {
		t.Fatal(err)
	}
	rec.sql = nil
	if err := pglease.WithFence(ctx, conn, l.Name(), l.Fence(), func(pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("WithFence in SJIS: %v", err)
	}
	for _, q := range rec.sql {
		if strings.Contains(q, name) || strings.Contains(q, "BEGIN;") {
			t.Fatalf("WithFence in SJIS sent %q: the name as a literal", rec.sql)
		}
	}
	if len(rec.sql) != 3 || rec.sql[0] != "begin" {
		t.Fatalf("WithFence in SJIS sent %q, want begin, the check, commit", rec.sql)
	}
}

// TestEndStrandedSessionNeedsItsPort: the session a stranded fenced
// transaction left is ended only when its backend PID and its client's
// port both match, so that a pooler's PID that happens to be another
// client's backend never ends that client's transaction.
func TestEndStrandedSessionNeedsItsPort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDirectPool(t) // PIDs and ports are the server's own
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release()
	var pid int64
	var port int
	if err := other.QueryRow(ctx, `SELECT pg_backend_pid(), coalesce(inet_client_port(), -1)`).Scan(&pid, &port); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	idle := func() bool {
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity
			WHERE pid = $1 AND state = 'idle in transaction')`, pid).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !idle() {
		t.Fatal("the other session is not idle in its transaction")
	}
	if pglease.EndStrandedSession(ctx, pool, uint32(pid), port+1) {
		t.Fatal("a session with the same PID and another client port was ended")
	}
	if !idle() {
		t.Fatal("the session with the same PID and another client port is gone")
	}
	if !pglease.EndStrandedSession(ctx, pool, uint32(pid), port) {
		t.Fatal("the session with the PID and the port was not ended")
	}
	// The server says goodbye on the ended session's connection.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := other.Conn().PgConn().WaitForNotification(wctx); err == nil || wctx.Err() != nil {
		t.Fatalf("the ended session's connection: %v, want it closed by the server", err)
	}
}
