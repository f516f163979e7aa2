//go:build proof

package proof

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/history"
	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// callTimeout bounds each database call of the tests, so that a call that
// wrongly blocks is recorded as an unknown outcome (and fails the test's
// liveness figures) instead of hanging the run.
const callTimeout = 10 * time.Second

// envDuration returns the duration in the environment variable name, or
// def when it is unset. It fails the test on a value it cannot parse.
func envDuration(t testing.TB, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 5m", name, v)
	}
	return d
}

// openPool opens a pool of at most maxConns connections on url whose
// sessions carry application_name app (so that a test can find and
// terminate them) and the settings params, closed when the test ends.
func openPool(t testing.TB, url string, maxConns int32, app string, params ...map[string]string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse pool config: %v", err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	for _, p := range params {
		for k, v := range p {
			cfg.ConnConfig.RuntimeParams[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// auditSQL records the server's own history of the database it runs in:
// every row version of pglease.leases and pglease.slots (an AFTER ROW
// trigger, so after the row lock is held and before the commit), with the
// transaction that wrote it, and the
// log of fenced writes (inserted after assert_held, in the writer's
// transaction). All take their seq from one sequence; see package history
// for why Seq order is commit order where it matters.
const auditSQL = `
CREATE SCHEMA proof;
CREATE SEQUENCE proof.seq;
CREATE TABLE proof.events (
    seq            bigint      PRIMARY KEY DEFAULT nextval('proof.seq'),
    tbl            text        NOT NULL,
    name           text        NOT NULL,
    slot           integer     NOT NULL,
    inserted       boolean     NOT NULL,
    deleted        boolean     NOT NULL DEFAULT false,
    old_holder     text,
    old_fence      bigint,
    old_expires_at timestamptz,
    holder         text,
    fence          bigint      NOT NULL,
    acquired_at    timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    capacity       integer,
    units          integer,
    clock          timestamptz NOT NULL DEFAULT clock_timestamp(),
    xid            bigint      NOT NULL DEFAULT txid_current());
CREATE TABLE proof.writes (
    seq    bigint      PRIMARY KEY DEFAULT nextval('proof.seq'),
    name   text        NOT NULL,
    fence  bigint      NOT NULL,
    holder text        NOT NULL,
    began  timestamptz NOT NULL DEFAULT transaction_timestamp(),
    at     timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION proof.audit_lease() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO proof.events (tbl, name, slot, inserted, deleted, old_holder, old_fence, old_expires_at,
                                  holder, fence, acquired_at, expires_at)
        VALUES ('lease', OLD.name, 0, false, true, OLD.holder, OLD.fence, OLD.expires_at,
                NULL, OLD.fence, OLD.acquired_at, OLD.expires_at);
        RETURN NULL;
    END IF;
    INSERT INTO proof.events (tbl, name, slot, inserted, old_holder, old_fence, old_expires_at,
                              holder, fence, acquired_at, expires_at)
    VALUES ('lease', NEW.name, 0, TG_OP = 'INSERT',
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.holder END,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.fence END,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.expires_at END,
            NEW.holder, NEW.fence, NEW.acquired_at, NEW.expires_at);
    RETURN NULL;
END $$;
CREATE FUNCTION proof.audit_slot() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO proof.events (tbl, name, slot, inserted, deleted, old_holder, old_fence, old_expires_at,
                                  holder, fence, acquired_at, expires_at, capacity, units)
        VALUES ('slot', OLD.scope, OLD.slot, false, true, OLD.holder, OLD.fence, OLD.expires_at,
                NULL, OLD.fence, OLD.acquired_at, OLD.expires_at, OLD.capacity, OLD.units);
        RETURN NULL;
    END IF;
    INSERT INTO proof.events (tbl, name, slot, inserted, old_holder, old_fence, old_expires_at,
                              holder, fence, acquired_at, expires_at, capacity, units)
    VALUES ('slot', NEW.scope, NEW.slot, TG_OP = 'INSERT',
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.holder END,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.fence END,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.expires_at END,
            NEW.holder, NEW.fence, NEW.acquired_at, NEW.expires_at, NEW.capacity, NEW.units);
    RETURN NULL;
END $$;
CREATE TRIGGER proof_audit AFTER INSERT OR UPDATE OR DELETE ON pglease.leases
    FOR EACH ROW EXECUTE FUNCTION proof.audit_lease();
CREATE TRIGGER proof_audit AFTER INSERT OR UPDATE OR DELETE ON pglease.slots
    FOR EACH ROW EXECUTE FUNCTION proof.audit_slot();
`

// writeSQL is the fenced write: one row in the write log, in the
// transaction that pglease.WithFence opened and checked, or in the batch
// that pglease.SendFenced sent behind its check.
const writeSQL = `INSERT INTO proof.writes (name, fence, holder) VALUES ($1, $2, $3)`

// installAudit installs the audit in the migrated database at url (as its
// superuser).
func installAudit(t testing.TB, url string) {
	t.Helper()
	pool := openPool(t, url, 1, "pglease-proof-setup")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, auditSQL); err != nil {
		t.Fatalf("install audit: %v", err)
	}
	pool.Close()
}

// readAudit returns the server's history recorded by the audit. The row
// versions and the write log are read in one snapshot: clients may still
// run, and a write read in a later snapshot than the grant it was made
// under would look like a write under a fence the server never granted.
func readAudit(t testing.TB, pool *pgxpool.Pool) []history.ServerEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatalf("read audit: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var evs []history.ServerEvent
	rows, err := tx.Query(ctx, `
		SELECT seq, tbl, name, slot, inserted, deleted, coalesce(old_holder, ''), coalesce(old_fence, 0),
		       coalesce(old_expires_at, 'epoch'), coalesce(holder, ''), fence, acquired_at, expires_at, clock,
		       coalesce(capacity, 0), coalesce(units, 0), xid
		FROM proof.events`)
	if err != nil {
		t.Fatalf("read audit: %v", err)
	}
	for rows.Next() {
		var (
			e   history.ServerEvent
			tbl string
		)
		if err := rows.Scan(&e.Seq, &tbl, &e.Name, &e.Slot, &e.Inserted, &e.Deleted, &e.OldHolder, &e.OldFence,
			&e.OldExpiresAt, &e.Holder, &e.Fence, &e.AcquiredAt, &e.ExpiresAt, &e.Clock, &e.Capacity, &e.Units, &e.Tx); err != nil {
			t.Fatalf("read audit: %v", err)
		}
		e.Row = history.LeaseRow
		if tbl == "slot" {
			e.Row = history.SlotRow
		}
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read audit: %v", err)
	}
	rows, err = tx.Query(ctx, `SELECT seq, name, fence, holder, began FROM proof.writes`)
	if err != nil {
		t.Fatalf("read write log: %v", err)
	}
	for rows.Next() {
		e := history.ServerEvent{Row: history.WriteRow}
		if err := rows.Scan(&e.Seq, &e.Name, &e.Fence, &e.Holder, &e.Clock); err != nil {
			t.Fatalf("read write log: %v", err)
		}
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read write log: %v", err)
	}
	return evs
}

// maxExpiry returns, per (name, fence) of a lease, the latest expiry the
// server ever gave that tenure, from the audit.
func maxExpiry(evs []history.ServerEvent) map[tenureKey]time.Time {
	out := map[tenureKey]time.Time{}
	for _, e := range evs {
		if e.Row != history.LeaseRow && e.Row != history.SlotRow {
			continue
		}
		k := tenureKey{e.Name, e.Slot, e.Fence}
		if e.Holder != "" && e.ExpiresAt.After(out[k]) {
			out[k] = e.ExpiresAt
		}
	}
	return out
}

// tenureKey names one tenure of a lease (slot 0) or a slot.
type tenureKey struct {
	name  string
	slot  int
	fence int64
}

// failViolations fails the test with the violations, if any.
func failViolations(t testing.TB, what string, vs []history.Violation) {
	t.Helper()
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "\n%s", v)
	}
	t.Errorf("%s: %d violations:%s", what, len(vs), b.String())
}

// quiet is a logger that drops everything.
var quiet = slog.New(slog.DiscardHandler)

// historyOn turns the tenure history (#52) on for the names under
// prefixes in the migrated database at url.
func historyOn(t testing.TB, url string, prefixes ...string) {
	t.Helper()
	pool := openPool(t, url, 1, "pglease-proof-setup")
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range prefixes {
		if _, err := pool.Exec(ctx, `SELECT pglease.history_enable($1, '1 day')`, p); err != nil {
			t.Fatalf("turn the tenure history on for %q: %v", p, err)
		}
	}
}

// readTenures returns every row of pglease.tenures, once the clients have
// stopped.
func readTenures(t testing.TB, pool *pgxpool.Pool) []history.Tenure {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rows, err := pool.Query(ctx, `SELECT name, slot, fence, holder, granted_at, coalesce(ended_at, 'epoch'), coalesce(ended_how, '')
		FROM pglease.tenures ORDER BY name, slot, fence`)
	if err != nil {
		t.Fatalf("read pglease.tenures: %v", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (history.Tenure, error) {
		var h history.Tenure
		err := r.Scan(&h.Name, &h.Slot, &h.Fence, &h.Holder, &h.Granted, &h.Ended, &h.How)
		if h.How == "" {
			h.Ended = time.Time{}
		}
		return h, err
	})
	if err != nil {
		t.Fatalf("read pglease.tenures: %v", err)
	}
	return out
}
