// Package schema applies pglease's embedded migrations with golang-migrate.
//
// It uses its own migrations table, TableName, so it coexists with an
// application's own golang-migrate history in schema_migrations.
package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pglease/pglease/internal/sqlerr"
	"github.com/pglease/pglease/migrations"
)

// TableName is the golang-migrate history table pglease uses, in the
// connection's current schema. Pass the same name to the migrate CLI with
// x-migrations-table=pglease_schema_migrations.
const TableName = "pglease_schema_migrations"

// Up applies every pending migration to the database at connString (a
// postgres:// URL or a key=value DSN), each in its own transaction.
// Applying an up-to-date database is a no-op. Before the first pending
// migration it runs that migration's catalog check alone and rolls it back:
// a schema changed by hand is refused with an error naming what differs,
// and the history is left as it was (not dirty).
func Up(ctx context.Context, connString string) error {
	return run(ctx, connString, func(m *migrate.Migrate, db *sql.DB) error {
		v, dirty, err := m.Version()
		if err == nil && !dirty && v < Latest() {
			if err := preflight(ctx, db, v+1); err != nil {
				return err
			}
		}
		return m.Up()
	})
}

// Guard markers: the part of a generated upgrade that checks the schema it
// upgrades (scripts/gen-schema.sh).
const (
	guardBegin = "-- pglease:guard-begin\n"
	guardEnd   = "-- pglease:guard-end\n"
)

// preflight runs the catalog check of migration version, if it has one, in
// a transaction it rolls back.
func preflight(ctx context.Context, db *sql.DB, version uint) error {
	names, _ := fs.Glob(migrations.FS, fmt.Sprintf("%06d_*.up.sql", version)) // the pattern is valid
	if len(names) != 1 {
		return nil
	}
	b, err := fs.ReadFile(migrations.FS, names[0])
	if err != nil {
		return fmt.Errorf("pglease: read embedded migration %s: %w", names[0], err)
	}
	_, rest, ok := strings.Cut(string(b), guardBegin)
	guard, _, ok2 := strings.Cut(rest, guardEnd)
	if !ok || !ok2 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("pglease: check the schema before migration %d: %w", version, err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, guard); err != nil {
		// The guard's messages start with "pglease: ", as Run's wrapping
		// does: said once.
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Hint != "" {
			return fmt.Errorf("migration %d not applied (nothing changed): %w; hint: %s", version, sqlerr.Trim(err), pgErr.Hint)
		}
		return fmt.Errorf("migration %d not applied (nothing changed): %w", version, sqlerr.Trim(err))
	}
	return nil
}

// Goto migrates up or down to version, one migration at a time, each in its
// own transaction. Version 0 removes the pglease schema.
func Goto(ctx context.Context, connString string, version uint) error {
	if version > Latest() {
		return fmt.Errorf("pglease: no migration %d: the newest this build knows is %d", version, Latest())
	}
	if version == 0 {
		return Down(ctx, connString)
	}
	return run(ctx, connString, func(m *migrate.Migrate, _ *sql.DB) error { return m.Migrate(version) })
}

// Latest returns the newest migration version this build embeds.
func Latest() uint {
	versions := setVersions(migrations.FS)
	if len(versions) == 0 {
		return 0
	}
	return versions[len(versions)-1]
}

// Down reverts every applied migration, removing the pglease schema.
func Down(ctx context.Context, connString string) error {
	return run(ctx, connString, func(m *migrate.Migrate, _ *sql.DB) error { return m.Down() })
}

// Version reports the applied migration version; version 0 and dirty false
// mean none is applied.
func Version(ctx context.Context, connString string) (version uint, dirty bool, err error) {
	err = run(ctx, connString, func(m *migrate.Migrate, _ *sql.DB) error {
		var verr error
		version, dirty, verr = m.Version()
		if errors.Is(verr, migrate.ErrNilVersion) {
			return nil
		}
		return verr
	})
	return version, dirty, err
}

func run(ctx context.Context, connString string, step func(*migrate.Migrate, *sql.DB) error) error {
	return Run(ctx, connString, Set{FS: migrations.FS, Table: TableName}, step)
}

// Set is one line of embedded golang-migrate migrations with its own
// history table.
type Set struct {
	FS    fs.FS
	Table string
	// Kind names the set in messages before "migration", such as
	// "proxy "; empty for pglease's own.
	Kind string
}

// Run applies step to the migrations of set on the database at connString,
// on a connection of its own, stopping between migrations when ctx ends.
// ErrNoChange is not an error.
func Run(ctx context.Context, connString string, set Set, step func(*migrate.Migrate, *sql.DB) error) error {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return fmt.Errorf("pglease: parse connection string: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("pglease: connect for %smigration: %w", set.Kind, err)
	}
	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: set.Table})
	if err != nil {
		return fmt.Errorf("pglease: prepare %smigration: %w", set.Kind, err)
	}
	src, err := iofs.New(set.FS, ".")
	if err != nil {
		return fmt.Errorf("pglease: read embedded %smigrations: %w", set.Kind, err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return fmt.Errorf("pglease: prepare %smigration: %w", set.Kind, err)
	}
	defer m.Close()
	// golang-migrate has no context support: stop between migrations when
	// ctx ends.
	stop := context.AfterFunc(ctx, func() {
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()
	before, _, _ := m.Version()
	if err := step(m, db); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pglease: migrate%s: %w", strings.TrimRight(" "+set.Kind, " "), refused(driver, set, before, err))
	}
	return ctx.Err()
}

// refused turns the error of a migration the server refused into one that
// says so, and leaves the history clean. Every pglease migration is one
// transaction (BEGIN ... COMMIT, scripts/gen-schema.sh), so a migration
// the server answered with an error changed nothing, whatever
// golang-migrate's dirty flag says: the flag is set back to the version
// the database is at, so that running the migration again is all it takes.
// before is the version before the step (0: none). Any other error (a lost
// connection, when the COMMIT may have gone through) is returned as it is,
// with the history dirty, for a person to look at. golang-migrate leaves its
// connection in the failed transaction block, holding its advisory lock:
// both are ended here, on the driver.
func refused(driver database.Driver, set Set, before uint, err error) error {
	var dbErr database.Error
	if !errors.As(err, &dbErr) {
		return err
	}
	pgErr, ok := errors.AsType[*pgconn.PgError](dbErr.OrigErr)
	if !ok {
		return err
	}
	if rerr := driver.Run(strings.NewReader("ROLLBACK")); rerr != nil {
		return errors.Join(err, rerr)
	}
	_ = driver.Unlock() // not locked when the failure was the lock's own
	if lerr := driver.Lock(); lerr != nil {
		return errors.Join(err, lerr)
	}
	defer func() { _ = driver.Unlock() }()
	v, dirty, verr := driver.Version()
	if verr != nil || !dirty || v < 0 {
		return err
	}
	failed := uint(v)
	// Going up, the dirty version is the migration that failed: the
	// database is at the one before it. Going down, it is the target of
	// the migration that failed: the database is at the one after it.
	versions := setVersions(set.FS)
	at := -1
	for _, v := range versions {
		if failed > before && v < failed || failed <= before && v > failed && at == -1 {
			at = int(v)
		}
	}
	if failed <= before && at == -1 {
		return err
	}
	if ferr := driver.SetVersion(at, false); ferr != nil {
		return errors.Join(err, ferr)
	}
	msg := fmt.Errorf("%smigration %d not applied (nothing changed): %w", set.Kind, failed, sqlerr.Trim(pgErr))
	if pgErr.Code == "55P03" {
		return fmt.Errorf("%w; hint: another session holds a lock the migration needs (a long query or an open transaction on a pglease view); run it again, or end that session", msg)
	}
	if pgErr.Hint != "" {
		return fmt.Errorf("%w; hint: %s", msg, pgErr.Hint)
	}
	return msg
}

// setVersions returns the versions of the up migrations in fsys, in order.
func setVersions(fsys fs.FS) []uint {
	names, _ := fs.Glob(fsys, "*.up.sql") // the pattern is valid
	var versions []uint
	for _, name := range names {
		num, _, _ := strings.Cut(name, "_")
		if v, err := strconv.ParseUint(num, 10, 32); err == nil {
			versions = append(versions, uint(v))
		}
	}
	slices.Sort(versions)
	return versions
}
