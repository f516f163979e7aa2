package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// CreateDatabase creates the database name on the server that adminURL points
// to and returns the URL of the new database: adminURL with the database
// name replaced (see [DatabaseURL]). The database is created from template0,
// so it is empty whatever the server's template1 holds. The role of adminURL
// must be a superuser or have CREATEDB.
func CreateDatabase(ctx context.Context, adminURL, name string) (string, error) {
	dbURL, err := DatabaseURL(adminURL, name)
	if err != nil {
		return "", err
	}
	if err := execAdmin(ctx, adminURL, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dbURL, nil
}

// roleDropLock is the key of the advisory lock, in the database adminURL
// names, that orders dropping the role pglease_client against dropping
// databases. DROP ROLE describes every database that still depends on the
// role; one dropped at that moment makes it fail with "cache lookup failed
// for database" (XX000) instead of the dependent_objects_still_exist that
// pglease's down migration handles. [DropDatabase] holds the lock shared,
// [LockRoleDrops] exclusively.
const roleDropLock int64 = 0x70676c65617365 // "pglease"

// DropDatabase drops the database name on the server that adminURL points to,
// terminating the sessions still connected to it (DROP DATABASE ... WITH
// (FORCE), PostgreSQL 13 or later). Dropping a database that does not exist
// is not an error. It waits while a [LockRoleDrops] lock is held.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	defer closeConn(ctx, conn) // releases the lock
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock_shared($1)", roleDropLock); err != nil {
		return fmt.Errorf("drop database %s: wait for role drops: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// LockRoleDrops keeps [DropDatabase] from dropping databases on the server
// that adminURL points to until unlock is called, so that a down migration
// run meanwhile can drop the role pglease_client (or be refused cleanly
// while other databases use it). It waits for drops under way to finish.
func LockRoleDrops(ctx context.Context, adminURL string) (unlock func(), err error) {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("lock out database drops: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock($1)", roleDropLock); err != nil {
		closeConn(ctx, conn)
		return nil, fmt.Errorf("lock out database drops: %w", err)
	}
	return func() { closeConn(context.Background(), conn) }, nil
}

// execAdmin runs one utility statement on a connection of its own.
func execAdmin(ctx context.Context, adminURL, sql string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer closeConn(ctx, conn)
	_, err = conn.Exec(ctx, sql)
	return err
}

// closeConn closes conn, even when ctx is already done, waiting at most
// closeTimeout.
func closeConn(ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
	defer cancel()
	_ = conn.Close(ctx)
}

// DatabaseURL returns connString with its database replaced by dbname,
// keeping everything else (hosts, user, password, parameters). connString may
// be a postgres:// URL or a keyword/value string. The result is checked with
// pgconn.ParseConfig.
func DatabaseURL(connString, dbname string) (string, error) {
	if dbname == "" {
		return "", fmt.Errorf("database url: empty database name")
	}
	var out string
	if isURL(connString) {
		u, err := url.Parse(connString)
		if err != nil {
			// A *url.Error repeats the URL, password included.
			if uerr, ok := errors.AsType[*url.Error](err); ok {
				err = uerr.Err
			}
			return "", fmt.Errorf("database url: parse %s: %w", MaskURL(connString), err)
		}
		u.Path = "/" + dbname
		u.RawPath = "/" + url.PathEscape(dbname)
		if q := u.Query(); q.Has("dbname") {
			q.Del("dbname")
			u.RawQuery = q.Encode()
		}
		out = u.String()
	} else {
		// In a keyword/value string a later keyword overrides an earlier one.
		out = strings.TrimSpace(connString) + " dbname=" + quoteDSNValue(dbname)
	}
	cfg, err := pgconn.ParseConfig(out)
	if err != nil {
		return "", fmt.Errorf("database url: %w", err)
	}
	if cfg.Database != dbname {
		return "", fmt.Errorf("database url: %s names database %q, want %q", MaskURL(out), cfg.Database, dbname)
	}
	return out, nil
}

// quoteDSNValue quotes v for a keyword/value connection string.
func quoteDSNValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}
