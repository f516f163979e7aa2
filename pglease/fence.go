package pglease

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
)

// rollbackTimeout bounds the rollback after a failed fenced write.
const rollbackTimeout = 5 * time.Second

// WithFence runs fn in a transaction on database that first checks, with
// pglease.assert_held, that fence is the current fence of a live tenure of
// lease name, and then commits fn's writes. The check locks the lease row
// until the commit, so no later tenure can begin between the check and the
// commit: the writes are ordered before any takeover. It returns an error
// matching ErrLeaseLost, without calling fn, when the tenure is over; fn's
// own error is returned unchanged after rolling back. A holder passes its
// lease's Name and Fence; a process that only knows the fence (a child
// given PGLEASE_FENCE, a supervisor's workload, a shard) passes that.
//
// Keep the transaction short: while it is open, the lease row is locked, so
// the holder's own renewals and any takeover wait for it. The check bounds
// the transaction's statements and idle time to the tenure's time left
// plus 100 ms (schema 0.2.0 and later), so a client that stalls inside it
// (paused, cut off by the network) keeps a takeover out only that long.
// When pgx gives up on the transaction's connection (a context cancelled
// mid-statement) while its server session is still idle in the
// transaction, WithFence ends that session from another connection of
// database (a pool), in the background, so that the lease row is not left
// locked until that bound.
func WithFence(ctx context.Context, database DB, name string, fence int64, fn func(tx pgx.Tx) error) (err error) {
	if err := tenure.CheckText("name", name); err != nil {
		return err
	}
	if fence < 0 {
		return tenure.Invalidf("fence must be 0 or more, got %d", fence)
	}
	tx, done, err := beginFenced(ctx, database, name, fence)
	if err != nil {
		return err
	}
	defer done()
	sess := sessionOf(tx.Conn().PgConn())
	defer func() {
		if err != nil {
			endFenced(ctx, database, tx, sess)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return interpretError(ctx, err)
	}
	return nil
}

// assertHeldSQL is the statement of the sqlc query LeaseAssertHeld
// (sql/queries/leases.sql), queued in a caller's batch by SendFenced.
const assertHeldSQL = "SELECT pglease.assert_held($1, $2)"

// SendFenced is WithFence in one round trip: it sends
// pglease.assert_held(name, fence) followed by b's statements as one pgx
// batch, which the server runs as one transaction that commits only while
// fence is the current fence of a live tenure of lease name. The check
// locks the lease row until the commit, so no later tenure can begin
// between the check and the commit. WithFence takes three round trips
// and more (BEGIN with the check, each statement of fn, COMMIT);
// SendFenced takes one, two the first time a connection sees a statement
// it must prepare.
//
// b's statements run after the check; their callbacks (QueuedQuery.Exec,
// Query, QueryRow) are called in order with their results. When the tenure
// is over, none of them runs, no callback is called, and SendFenced returns
// an error matching ErrLeaseLost. When a statement fails, the server rolls
// the transaction back and SendFenced returns that error unchanged. The
// callbacks read results the server has already committed (it commits
// before the client reads): a callback's error is returned, but it cannot
// undo the writes, as fn's error does in WithFence. SendFenced does not
// change b: it may be sent again.
//
// Sent on a pgx.Tx, the statements join that transaction, and the lease
// row stays locked until the caller ends it; after an error, the caller
// must roll it back. Otherwise the batch is a transaction of its own
// (an implicit one: b must not hold BEGIN or COMMIT). Every pgx query exec
// mode keeps it one transaction, including those PgBouncer's transaction
// pooling needs (QueryExecModeExec, QueryExecModeSimpleProtocol).
func SendFenced(ctx context.Context, database DB, name string, fence int64, b *pgx.Batch) error {
	if err := tenure.CheckText("name", name); err != nil {
		return err
	}
	if fence < 0 {
		return tenure.Invalidf("fence must be 0 or more, got %d", fence)
	}
	if b == nil || b.Len() == 0 {
		return tenure.Invalidf("the batch has no statements: queue the fenced writes in it")
	}
	fenced := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, b.Len()+1)}
	fenced.Queue(assertHeldSQL, name, fence)
	fenced.QueuedQueries = append(fenced.QueuedQueries, b.QueuedQueries...)
	br := database.SendBatch(ctx, fenced)
	if _, err := br.Exec(); err != nil {
		_ = br.Close() // the same error: the server ran nothing after the check
		// pgx prepares the batch's new statements before it runs any: a
		// statement of b that does not prepare fails here, unchanged.
		if prep, ok := errors.AsType[pgx.ErrPreprocessingBatch](err); ok && prep.SQL() != assertHeldSQL {
			return err
		}
		return interpretError(ctx, err)
	}
	return br.Close()
}

// strandedSessionSQL ends the server session of backend $1 when it is the
// caller's role's, its client's port is $2 (-1: a Unix socket) and it is
// idle in a transaction: a fenced transaction whose connection the client
// gave up on.
const strandedSessionSQL = `SELECT pg_catalog.pg_terminate_backend(a.pid)
	FROM pg_catalog.pg_stat_activity AS a
	WHERE a.pid = $1 AND a.client_port = $2
	  AND a.usename = current_user AND a.backend_type = 'client backend'
	  AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')`

// session names a connection's server session for endStrandedSession: the
// backend PID the server gave the client, and the client's end of the
// connection as the server sees it, the local TCP port (-1 over a Unix
// socket, as pg_stat_activity.client_port says). Through a connection
// pooler the PID is the pooler's own number, which may be a real backend's
// of another client: the port tells them apart (the server sees the
// pooler's port). Behind NAT that rewrites ports nothing matches, and the
// transaction's idle timeout is the bound.
type session struct {
	pid  uint32
	port int
}

// sessionOf returns pc's session.
func sessionOf(pc *pgconn.PgConn) session {
	s := session{pid: pc.PID(), port: -1}
	if a, ok := pc.Conn().LocalAddr().(*net.TCPAddr); ok {
		s.port = a.Port
	}
	return s
}

// endStrandedSession ends the server session of a fenced transaction whose
// connection pgx closed (a context cancelled mid-statement, say) when that
// session is still idle in the transaction. pgx closes such a connection in
// the background, and until the server reads its goodbye the session keeps
// the lease row locked: the holder's release and any takeover wait, for as
// long as the transaction's idle timeout (up to the tenure's end); seen in
// about one handover on request in 300 under load. Best effort, in the
// background and for at most rollbackTimeout, on another connection of
// database (a pool; nothing happens when database was that
// very connection or a transaction on it): only a backend of the caller's
// role that is idle in a transaction, with the connection's PID and port,
// is ended, so that one at work, another client's, or one of another role
// is never mistaken for it. It reports whether it ended one.
func endStrandedSession(ctx context.Context, database DB, s session) (ended bool) {
	if s.pid == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, rollbackTimeout)
	defer cancel()
	tag, err := database.Exec(ctx, strandedSessionSQL, int64(s.pid), s.port)
	return err == nil && tag.RowsAffected() > 0
}

// endFenced rolls back the fenced transaction tx after an error, and ends
// its server session (endStrandedSession) when pgx gave up on its
// connection.
func endFenced(ctx context.Context, database DB, tx pgx.Tx, sess session) {
	// A failed rollback leaves nothing to undo: the connection is gone or
	// the transaction already ended.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	// Read before the rollback: a pool's transaction gives its connection
	// back to the pool then.
	stranded := tx.Conn().IsClosed()
	_ = tx.Rollback(rctx)
	if stranded {
		// In the background: the workload returns at once (with the
		// network cut, the call itself would wait).
		go endStrandedSession(context.WithoutCancel(ctx), database, sess)
	}
}

// beginFenced begins the fenced transaction on database and checks the
// tenure in it. On a pool or a connection, BEGIN and the check go to the
// server as one message, so a fenced write takes the round trips of the
// same transaction without the check; in a pgx.Tx (a savepoint), or when
// the connection's client_encoding is not UTF8, the check is a statement
// of its own. done gives back a connection beginFenced took
// from a pool; call it once the transaction has ended. A refused check is
// rolled back before beginFenced returns, and the connection is kept.
func beginFenced(ctx context.Context, database DB, name string, fence int64) (tx pgx.Tx, done func(), err error) {
	done = func() {}
	var conn *pgx.Conn
	switch d := database.(type) {
	case *pgxpool.Pool:
		c, err := d.Acquire(ctx)
		if err != nil {
			return nil, nil, interpretError(ctx, err)
		}
		conn, done = c.Conn(), c.Release
	case *pgxpool.Conn:
		conn = d.Conn()
	case *pgx.Conn:
		conn = d
	default:
		tx, err := beginThenCheck(ctx, database, database, name, fence)
		return tx, done, err
	}
	if conn.PgConn().ParameterStatus("client_encoding") != "UTF8" {
		// The literal is safe in UTF-8 only: in a client encoding whose
		// characters may end in a backslash's byte (SJIS, BIG5, GBK...),
		// it could be read otherwise. pgx refuses its own literals there.
		if tx, err = beginThenCheck(ctx, database, conn, name, fence); err != nil {
			done()
			return nil, nil, err
		}
		return tx, done, nil
	}
	sess := sessionOf(conn.PgConn())
	tx, err = conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: beginFencedSQL(name, fence)})
	if err == nil {
		return tx, done, nil
	}
	switch {
	case conn.IsClosed() && !pgconn.SafeToRetry(err):
		// pgx gave up once the message was sent: the server may hold the
		// lock, idle in the transaction.
		go endStrandedSession(context.WithoutCancel(ctx), database, sess)
	case conn.PgConn().TxStatus() != 'I':
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		_, _ = conn.Exec(rctx, "ROLLBACK")
		cancel()
	}
	done()
	return nil, nil, interpretError(ctx, err)
}

// beginFencedSQL is BEGIN and the check of sql/queries/leases.sql's
// LeaseAssertHeld as one simple-protocol message, the arguments written as
// literals.
func beginFencedSQL(name string, fence int64) string {
	var b strings.Builder
	b.WriteString("BEGIN; SELECT pglease.assert_held(")
	writeLiteral(&b, name)
	b.WriteString(", ")
	b.WriteString(strconv.FormatInt(fence, 10))
	b.WriteString("::pg_catalog.int8)")
	return b.String()
}

// writeLiteral writes s to b as an SQL string literal that reads as s
// whatever standard_conforming_strings says: an escape string (E'...')
// with quotes and backslashes doubled. s is valid UTF-8 without NUL bytes
// (tenure.CheckText).
func writeLiteral(b *strings.Builder, s string) {
	b.WriteString("E'")
	for i := range len(s) {
		switch s[i] {
		case '\\':
			b.WriteString(`\\`)
		case '\'':
			b.WriteString("''")
		default:
			b.WriteByte(s[i])
		}
	}
	b.WriteByte('\'')
}

// beginThenCheck is beginFenced's other way: it begins on conn (database
// itself, or a connection beginFenced took from it), then checks in a
// statement of its own; after a refusal, database serves
// endStrandedSession.
func beginThenCheck(ctx context.Context, database, conn DB, name string, fence int64) (pgx.Tx, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	if err := db.New(tx).LeaseAssertHeld(ctx, db.LeaseAssertHeldParams{Name: name, Fence: fence}); err != nil {
		endFenced(ctx, database, tx, sessionOf(tx.Conn().PgConn()))
		return nil, interpretError(ctx, err)
	}
	return tx, nil
}
