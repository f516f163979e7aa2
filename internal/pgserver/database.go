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

// DropDatabase drops the database name on the server that adminURL points to,
// terminating the sessions still connected to it (DROP DATABASE ... WITH
// (FORCE), PostgreSQL 13 or later). Dropping a database that does not exist
// is not an error.
func DropDatabase(ctx context.Context, adminURL, name string) error {
	if err := execAdmin(ctx, adminURL, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
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
