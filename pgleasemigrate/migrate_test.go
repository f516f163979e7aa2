package pgleasemigrate_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pgleasemigrate"
)

// TestUpDown: Up installs the schema and records it in Table, again does
// nothing, and Down removes it.
func TestUpDown(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	pgtest.LockRoleDrops(t) // Down drops the role where it can
	for range 2 {
		if err := pgleasemigrate.Up(ctx, url); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var version int64
	var dirty bool
	if err := conn.QueryRow(ctx, "SELECT version, dirty FROM "+pgleasemigrate.Table).Scan(&version, &dirty); err != nil {
		t.Fatal(err)
	}
	if version != int64(schema.Latest()) || dirty {
		t.Fatalf("%s after Up: version %d, dirty %v; want %d, clean", pgleasemigrate.Table, version, dirty, schema.Latest())
	}
	if err := pgleasemigrate.Down(ctx, url); err != nil {
		t.Fatal(err)
	}
	var present bool
	if err := conn.QueryRow(ctx, "SELECT to_regnamespace('pglease') IS NOT NULL").Scan(&present); err != nil || present {
		t.Fatalf("schema pglease after Down: present %v, %v; want gone", present, err)
	}
}

// TestUpRefusesChangedSchema: an upgrade of a schema changed by hand is
// refused naming the difference, changes nothing, and says "pglease:"
// once although the SQL's message and the Go wrapping both start with it.
func TestUpRefusesChangedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	before := schema.Latest() - 1
	if err := schema.Goto(ctx, url, before); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE INDEX my_index ON pglease.leases (expires_at)`); err != nil {
		t.Fatal(err)
	}
	err = pgleasemigrate.Up(ctx, url)
	for _, want := range []string{"not applied (nothing changed)", "cannot upgrade schema pglease", "index my_index", "hint: "} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("Up on a changed schema = %v, want an error saying %q", err, want)
		}
	}
	if n := strings.Count(err.Error(), "pglease:"); n != 1 {
		t.Fatalf("Up on a changed schema = %q: says %q %d times, want once", err, "pglease:", n)
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || !strings.HasPrefix(pgErr.Message, "pglease: cannot upgrade") {
		t.Fatalf("Up on a changed schema: errors.As finds %v, want the guard's *pgconn.PgError", pgErr)
	}
	if v, dirty, err := schema.Version(ctx, url); err != nil || v != before || dirty {
		t.Fatalf("version after the refused upgrade: %d, dirty %v, %v; want %d, clean", v, dirty, err, before)
	}
}

// TestUpGivesUpOnALockedView: while another session holds a lock on a
// pglease view (LOCK TABLE ... IN ACCESS SHARE MODE, as any client that may
// read it can), the upgrade gives up after its lock_timeout instead of
// queueing every pglease call behind it; it changes nothing, leaves the
// history clean, says to run it again, and the next Up applies it.
func TestUpGivesUpOnALockedView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	before := schema.Latest() - 1
	if err := schema.Goto(ctx, url, before); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE pglease.lease_status IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	err = pgleasemigrate.Up(ctx, url)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "55P03" {
		t.Fatalf("Up while a view is locked = %v, want SQLSTATE 55P03 (lock_timeout)", err)
	}
	for _, want := range []string{"not applied (nothing changed)", "run it again"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("Up while a view is locked = %q, want it to say %q", err, want)
		}
	}
	if v, dirty, err := schema.Version(ctx, url); err != nil || v != before || dirty {
		t.Fatalf("version after the refused upgrade: %d, dirty %v, %v; want %d, clean", v, dirty, err, before)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgleasemigrate.Up(ctx, url); err != nil {
		t.Fatalf("Up once the lock is gone: %v", err)
	}
	if v, dirty, err := schema.Version(ctx, url); err != nil || v != schema.Latest() || dirty {
		t.Fatalf("version after the upgrade: %d, dirty %v, %v; want %d, clean", v, dirty, err, schema.Latest())
	}
}
