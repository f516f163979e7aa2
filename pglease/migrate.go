package pglease

import (
	"context"

	"github.com/pglease/pglease/internal/schema"
)

// MigrationsTable is the golang-migrate history table pglease's migrations
// use, kept apart from an application's own schema_migrations. To apply the
// migrations with the migrate CLI, pass x-migrations-table=pglease_schema_migrations.
const MigrationsTable = schema.TableName

// Migrate applies pglease's embedded migrations to the database at
// connString (a postgres:// URL or a key=value DSN): it creates schema
// pglease, its functions, and role pglease_client when missing and allowed.
// It touches nothing else but MigrationsTable. Applying an up-to-date
// database does nothing.
func Migrate(ctx context.Context, connString string) error {
	return schema.Up(ctx, connString)
}

// MigrateDown removes everything Migrate made, including every lease and
// its fence: run it only when no client uses the database.
func MigrateDown(ctx context.Context, connString string) error {
	return schema.Down(ctx, connString)
}
