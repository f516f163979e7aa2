package pgserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestDatabaseURL(t *testing.T) {
	tests := []struct {
		name, in, db, want string
	}{
		{"url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "app", "postgres://postgres@127.0.0.1:5432/app?sslmode=disable"},
		{"url without path", "postgres://alice:pw@db:6432", "app", "postgres://alice:pw@db:6432/app"},
		{"url with dbname parameter", "postgresql://db/postgres?dbname=other&application_name=x", "app", "postgresql://db/app?application_name=x"},
		{"url escapes the name", "postgres://db/postgres", "a b/c", "postgres://db/a%20b%2Fc"},
		{"dsn", "host=/var/run/postgresql user=postgres dbname=postgres", "app", "host=/var/run/postgresql user=postgres dbname=postgres dbname='app'"},
		{"dsn without dbname", "host=db user=alice", "app", "host=db user=alice dbname='app'"},
		{"dsn quotes the name", "host=db", `it's a\b`, `host=db dbname='it\'s a\\b'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DatabaseURL(tt.in, tt.db)
			if err != nil {
				t.Fatalf("DatabaseURL(%q, %q): %v", tt.in, tt.db, err)
			}
			if got != tt.want {
				t.Errorf("DatabaseURL(%q, %q)\n got %q\nwant %q", tt.in, tt.db, got, tt.want)
			}
			cfg, err := pgconn.ParseConfig(got)
			if err != nil {
				t.Fatalf("parse result: %v", err)
			}
			if cfg.Database != tt.db {
				t.Errorf("result names database %q, want %q", cfg.Database, tt.db)
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		for _, in := range []struct{ conn, db string }{
			{"postgres://db/postgres", ""},
			{"postgres://alice:s3cret@db:notaport/postgres", "app"},
			{"host=db port=notaport password=s3cret", "app"},
		} {
			_, err := DatabaseURL(in.conn, in.db)
			if err == nil {
				t.Errorf("DatabaseURL(%q, %q) succeeded, want an error", in.conn, in.db)
				continue
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("DatabaseURL(%q, %q) error shows the password: %v", in.conn, in.db, err)
			}
		}
	})
}

func TestCreateDropDatabase(t *testing.T) {
	admin := adminURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A name that needs quoting.
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	name := `pgserver test "Quoted" ` + hex.EncodeToString(suffix)

	dbURL, err := CreateDatabase(ctx, admin, name)
	if err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	t.Cleanup(func() { _ = DropDatabase(context.Background(), admin, name) })

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect to new database: %v", err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&got); err != nil {
		t.Fatalf("current_database: %v", err)
	}
	if got != name {
		t.Fatalf("current_database() = %q, want %q", got, name)
	}

	if _, err := CreateDatabase(ctx, admin, name); err == nil {
		t.Errorf("CreateDatabase of an existing database succeeded, want an error")
	}

	// The connection still open does not stop the drop: it is terminated.
	if err := DropDatabase(ctx, admin, name); err != nil {
		t.Fatalf("DropDatabase: %v", err)
	}
	if err := conn.Ping(ctx); err == nil {
		t.Errorf("connection to the dropped database still works")
	}
	if exists := databaseExists(ctx, t, admin, name); exists {
		t.Errorf("database %q still exists after DropDatabase", name)
	}
	if err := DropDatabase(ctx, admin, name); err != nil {
		t.Errorf("DropDatabase of a missing database: %v, want nil", err)
	}
}

func TestCreateDatabaseBadServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := CreateDatabase(ctx, "postgres://alice:s3cret@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2", "x")
	var connectErr *pgconn.ConnectError
	if !errors.As(err, &connectErr) {
		t.Fatalf("CreateDatabase on a closed port: %v, want a *pgconn.ConnectError", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error shows the password: %v", err)
	}
}

// databaseExists reports whether the server of admin has a database name.
func databaseExists(ctx context.Context, t testing.TB, admin, name string) bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_catalog.pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatalf("query pg_database: %v", err)
	}
	return exists
}
