package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// EnvSchema names the environment variable that says how [NewMigrated]
	// installs pglease: unset, empty or "migrations" applies the embedded
	// migrations; "extension" runs CREATE EXTENSION pglease, which needs the
	// extension installed on the test server (make install-extension).
	EnvSchema = "PGLEASE_TEST_SCHEMA"
	// SchemaExtension is the value of EnvSchema that selects the extension.
	SchemaExtension = "extension"
	// SchemaMigrations is the value of EnvSchema that selects the
	// migrations, the default.
	SchemaMigrations = "migrations"
)

// UsesExtension reports whether EnvSchema asks for pglease to be installed
// with CREATE EXTENSION rather than the migrations. It fails the test when
// EnvSchema holds anything else than the values it knows.
func UsesExtension(t testing.TB) bool {
	t.Helper()
	switch v := os.Getenv(EnvSchema); v {
	case "", SchemaMigrations:
		return false
	case SchemaExtension:
		return true
	default:
		t.Fatalf("pgtest: %s=%q: want %q, %q or unset", EnvSchema, v, SchemaExtension, SchemaMigrations)
		return false
	}
}

// CreateExtension runs CREATE EXTENSION pglease in the database at url, as
// the role of url (a superuser: the extension is not trusted). It fails the
// test, naming make install-extension, when the test server does not have
// the extension's files.
func CreateExtension(t testing.TB, url string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: connect to create extension pglease: %v", err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "CREATE EXTENSION pglease"); err != nil {
		t.Fatalf("pgtest: %v", extensionError(err, Source(t)))
	}
	t.Logf("pgtest: CREATE EXTENSION pglease")
}

// extensionError explains a failed CREATE EXTENSION.
func extensionError(err error, source string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "58P01" { // undefined_file: no control file
		return fmt.Errorf("CREATE EXTENSION pglease on %s: the server has no extension pglease; "+
			"install it with `make install-extension` (into $(pg_config --sharedir)/extension of that server) "+
			"or unset %s to test the migrations: %w", source, EnvSchema, err)
	}
	return fmt.Errorf("CREATE EXTENSION pglease on %s: %w", source, err)
}
