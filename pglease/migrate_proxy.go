package pglease

import (
	"context"
	"database/sql"

	"github.com/golang-migrate/migrate/v4"

	"github.com/pglease/pglease/internal/schema"
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
	set := schema.Set{FS: proxy.FS, Table: ProxyMigrationsTable, Kind: "proxy "}
	return schema.Run(ctx, connString, set, func(m *migrate.Migrate, _ *sql.DB) error { return step(m) })
}
