package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/pgleasemigrate"
)

// settingNames are the server settings that decide what a write costs.
var settingNames = []string{
	"fsync", "synchronous_commit", "wal_sync_method", "full_page_writes",
	"commit_delay", "shared_buffers", "max_connections",
}

// Server describes the Postgres server measured.
type Server struct {
	Version  string            `json:"version"`
	Settings map[string]string `json:"settings"`
}

// scratch is a database created for one run and dropped at its end.
type scratch struct {
	serverURL string // where it was created from
	name      string
	url       string // connection string of the scratch database
}

// readServer reads the version and settings of the server at serverURL.
func readServer(ctx context.Context, serverURL string) (Server, error) {
	srv := Server{Settings: make(map[string]string, len(settingNames))}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return srv, fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.version()").Scan(&srv.Version); err != nil {
		return srv, fmt.Errorf("read server version: %w", err)
	}
	for _, name := range settingNames {
		var v string
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting($1)", name).Scan(&v); err != nil {
			return srv, fmt.Errorf("read setting %s: %w", name, err)
		}
		srv.Settings[name] = v
	}
	return srv, nil
}

// scratchName returns a database name unique to this run, with suffix.
func scratchName(suffix string) string {
	return fmt.Sprintf("pglease_bench_%d_%d%s", time.Now().Unix(), os.Getpid(), suffix)
}

// createScratch creates database name on the server at serverURL and
// applies pglease's migrations to it.
func createScratch(ctx context.Context, serverURL, name string) (*scratch, error) {
	s := &scratch{serverURL: serverURL, name: name}
	var err error
	if s.url, err = withDatabase(serverURL, name); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the server: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create scratch database %s: %w", name, err)
	}
	if err := pgleasemigrate.Up(ctx, s.url); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate scratch database %s: %w", name, err), s.drop(ctx))
	}
	return s, nil
}

// drop removes the scratch database, disconnecting whoever still uses it.
func (s *scratch) drop(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.serverURL)
	if err != nil {
		return fmt.Errorf("connect to drop scratch database %s: %w", s.name, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{s.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop scratch database %s: %w", s.name, err)
	}
	return nil
}

// withDatabase returns connString (a postgres:// URL or a key=value DSN)
// pointing at database name instead.
func withDatabase(connString, name string) (string, error) {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", fmt.Errorf("parse server URL: %w", err)
		}
		u.Path = "/" + name
		return u.String(), nil
	}
	return connString + " dbname=" + name, nil
}

// redact hides a password in a postgres:// URL for messages.
func redact(connString string) string {
	u, err := url.Parse(connString)
	if err != nil || u.User == nil {
		return connString
	}
	return u.Redacted()
}
