package pglease

import (
	"context"
	"errors"
	"fmt"

	"github.com/golang-migrate/migrate/v4"
	pgxmigrate "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pglease/pglease/migrations/proxy"
)

// ProxyMigrationsTable is the golang-migrate history table of a proxy
// database's migrations (migrations/proxy/).
const ProxyMigrationsTable = "pglease_proxy_schema_migrations"

// MigrateProxy applies the embedded proxy migrations to the database at
// connString: extension plproxy (which needs a superuser), and schema
// pglease with the same functions and views as a pglease database, each run
// by PL/Proxy on the partition database that owns its lease name or slot
// scope. The partitions themselves get [Migrate]; the cluster of partitions
// is the foreign server pglease, created by the operator (docs/scaling.md).
// Applying an up-to-date database does nothing.
func MigrateProxy(ctx context.Context, connString string) error {
	return runProxyMigration(ctx, connString, (*migrate.Migrate).Up)
}

// MigrateProxyDown removes what [MigrateProxy] made but extension plproxy,
// the foreign server pglease and its user mappings. No lease is lost: they
// live on the partitions.
func MigrateProxyDown(ctx context.Context, connString string) error {
	return runProxyMigration(ctx, connString, (*migrate.Migrate).Down)
}

func runProxyMigration(ctx context.Context, connString string, step func(*migrate.Migrate) error) error {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return fmt.Errorf("pglease: parse the proxy's connection string: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("pglease: connect to the proxy database for migration: %w", err)
	}
	driver, err := pgxmigrate.WithInstance(db, &pgxmigrate.Config{MigrationsTable: ProxyMigrationsTable})
	if err != nil {
		return fmt.Errorf("pglease: prepare proxy migration: %w", err)
	}
	src, err := iofs.New(proxy.FS, ".")
	if err != nil {
		return fmt.Errorf("pglease: read embedded proxy migrations: %w", err)
	}
	m, err := migrate.NewWithInstance("iofs", src, "pgx5", driver)
	if err != nil {
		return fmt.Errorf("pglease: prepare proxy migration: %w", err)
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
	if err := step(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("pglease: migrate proxy: %w", err)
	}
	return ctx.Err()
}
