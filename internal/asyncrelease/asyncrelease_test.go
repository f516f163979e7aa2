package asyncrelease

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestOK(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if !OK(pool) {
		t.Errorf("a pool: got false, want true")
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	if !OK(pc) {
		t.Errorf("an idle pool connection: got false, want true")
	}
	conn := pc.Conn()
	if !OK(conn) {
		t.Errorf("an idle connection: got false, want true")
	}
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if OK(conn) || OK(pc) {
		t.Errorf("a connection inside BEGIN: got true, want false: the block's own writes would commit asynchronously")
	}
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if OK(tx) {
		t.Errorf("a pgx.Tx: got true, want false")
	}
	var db pgx.Tx
	if OK(db) {
		t.Errorf("a nil interface: got true, want false")
	}
}
