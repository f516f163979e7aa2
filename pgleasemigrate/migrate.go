package pgleasemigrate

import (
	"context"
	"database/sql"

	"github.com/golang-migrate/migrate/v4"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/migrations/proxy"
)

// Table is the golang-migrate history table of pglease's migrations, in the
// connection's current schema, kept apart from an application's own
// schema_migrations. To apply the migrations with the migrate CLI, pass
// x-migrations-table=pglease_schema_migrations.
const Table = schema.TableName

// ProxyTable is the golang-migrate history table of a proxy database's
// migrations (migrations/proxy/).
const ProxyTable = "pglease_proxy_schema_migrations"

// Up applies pglease's embedded migrations to the database at connString
// (a postgres:// URL or a key=value DSN): it creates schema pglease, its
// functions and views, and role pglease_client when missing and allowed,
// or upgrades an older schema to this build's version. It touches nothing
// else but Table. Applying an up-to-date database does nothing.
func Up(ctx context.Context, connString string) error {
	return schema.Up(ctx, connString)
}

// Down removes everything Up made, including every lease and slot with its
// fence: run it only when no client uses the database.
func Down(ctx context.Context, connString string) error {
	return schema.Down(ctx, connString)
}

// ProxyUp applies the embedded proxy migrations to the database at
// connString: extension plproxy (which needs a superuser), and schema
// pglease with the same functions and views as a pglease database, each
// run by PL/Proxy on the partition database that owns its lease name or
// slot scope. The partitions themselves get [Up]; the cluster of
// partitions is the foreign server pglease, created by the operator
// (docs/scaling.md). Applying an up-to-date database does nothing.
func ProxyUp(ctx context.Context, connString string) error {
	return runProxy(ctx, connString, (*migrate.Migrate).Up)
}

// ProxyDown removes what [ProxyUp] made but extension plproxy, the foreign
// server pglease and its user mappings. No lease is lost: they live on the
// partitions.
func ProxyDown(ctx context.Context, connString string) error {
	return runProxy(ctx, connString, (*migrate.Migrate).Down)
}

// runProxy runs step on the proxy migrations.
func runProxy(ctx context.Context, connString string, step func(*migrate.Migrate) error) error {
	set := schema.Set{FS: proxy.FS, Table: ProxyTable, Kind: "proxy "}
	return schema.Run(ctx, connString, set, func(m *migrate.Migrate, _ *sql.DB) error { return step(m) })
}
