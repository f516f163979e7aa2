package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	// btree_gist first, as docs/tenure-history.md says: CREATE EXTENSION
	// pglease cannot create it (no nested CREATE EXTENSION), and without
	// it the tenure history stays off (pglease.history_enable: 55000).
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS btree_gist"); err != nil {
		t.Logf("pgtest: no btree_gist (the tenure history's tests will fail): %v", err)
	}
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

// InstallExtension copies the extension's files (extension/ in the
// repository) into the test server's extension directory, as `make
// install-extension` does, and checks that the server then offers
// extension pglease at version. It fails the test, saying what to do, when
// the directory is not on this machine or not writable.
func InstallExtension(t testing.TB, version string) {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	files, err := filepath.Glob(filepath.Join(root, "extension", "pglease*"))
	if err != nil || len(files) < 2 {
		t.Fatalf("pgtest: %s holds %q (%v), want pglease.control and its scripts", filepath.Join(root, "extension"), files, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL(t))
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", Source(t), err)
	}
	defer func() { _ = admin.Close(context.Background()) }()
	var shareDir string
	if err := admin.QueryRow(ctx, `SELECT setting FROM pg_catalog.pg_config WHERE name = 'SHAREDIR'`).Scan(&shareDir); err != nil {
		t.Fatalf("pgtest: read SHAREDIR from the pg_config view of %s (needs a superuser): %v", Source(t), err)
	}
	dir := filepath.Join(shareDir, "extension")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("pgtest: the extension directory %s of %s is not on this machine (%v): "+
			"the extension tests need a server installed here (not a container or a remote server)", dir, Source(t), err)
	}
	for _, file := range files {
		if err := installFile(dir, file); err != nil {
			t.Fatalf("pgtest: cannot install the extension into %s: %v; run the tests as a user who can write there "+
				"(root, or the owner of the PostgreSQL installation), as `make install-extension` must be", dir, err)
		}
	}
	var got string
	err = admin.QueryRow(ctx, `SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'pglease'`).Scan(&got)
	if err != nil || got != version {
		t.Fatalf("pgtest: after installing into %s, %s offers extension pglease version %q (%v), want %q: does the server read another SHAREDIR?",
			dir, Source(t), got, err, version)
	}
}

// installFile copies file into dir by writing beside the target and
// renaming, so that a CREATE EXTENSION running elsewhere never reads half a
// file.
func installFile(dir, file string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".pglease-install-*")
	if err != nil {
		return err
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644), os.Rename(tmp.Name(), filepath.Join(dir, filepath.Base(file)))); err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	return nil
}

// repoRoot finds the module root from the working directory, which for a
// test is its package's directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		mod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(mod, []byte("module github.com/pglease/pglease\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no pglease module root above the working directory")
		}
		dir = parent
	}
}
