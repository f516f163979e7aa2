package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// localTimeout bounds each probe of a local server.
	localTimeout = 2 * time.Second
	// checkTimeout bounds the check of a server Find did not merely probe:
	// the one named by Options.EnvVar, or one it started.
	checkTimeout = 10 * time.Second
	// closeTimeout bounds closing a connection.
	closeTimeout = 5 * time.Second
)

// localServer is a place where a server may already be listening.
type localServer struct {
	url    string
	source string
}

// localServers lists the places step 2 of Find probes, in order. Tests
// replace it.
var localServers = []localServer{
	{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "local server 127.0.0.1:5432"},
	{"host=/var/run/postgresql user=postgres dbname=postgres", "local server /var/run/postgresql"},
	{"host=/tmp user=postgres dbname=postgres", "local server /tmp"},
}

// Server is a PostgreSQL server found or started by [Find] or
// [StartCluster].
type Server struct {
	// URL is a connection string for a role that is a superuser or has
	// CREATEDB, to the database "postgres" (or, for a server given by
	// Options.EnvVar, to whichever database that string names). It may
	// hold a password: print it with [MaskURL].
	URL string
	// Source says in words where the server came from, for example
	// "PGLEASE_TEST_DATABASE_URL", "local server 127.0.0.1:5432",
	// "PG* environment (PGHOST, PGPORT)" or "throwaway cluster
	// /usr/lib/postgresql/15/bin (port 40123)".
	Source string
	// Version is the server's version string (server_version).
	Version string

	stop     func(context.Context) error
	stopOnce sync.Once
	stopErr  error
}

// Started reports whether s was started (a throwaway cluster, or what
// [Check] was given a stop function for) rather than found already running, that is, whether
// [Server.Stop] has anything to do.
func (s *Server) Started() bool {
	return s.stop != nil
}

// Stop stops and removes what was started for s: it stops a throwaway cluster
// and deletes its directory, or calls the stop function given to [Check]. It does nothing for
// a server that was merely found. Calls after the first return the first
// call's result.
func (s *Server) Stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		if s.stop != nil {
			s.stopErr = s.stop(ctx)
		}
	})
	return s.stopErr
}

// Options configures [Find]. The zero value tries the PG* environment, the
// local servers, then a throwaway cluster from binaries found on the machine.
type Options struct {
	// EnvVar names an environment variable that may hold the connection
	// string of the server to use, for example
	// "PGLEASE_TEST_DATABASE_URL". When the variable is set and not empty,
	// Find uses that server or fails; it tries nothing else. Defaults to
	// no variable.
	EnvVar string
	// BinDir is the directory holding initdb and pg_ctl for the throwaway
	// cluster. When set, a failure to start that cluster is final. Defaults
	// to searching PATH, pg_config --bindir and the usual install
	// directories.
	BinDir string
	// ForceThrowaway skips EnvVar, the PG* environment and the local
	// servers: Find starts a throwaway cluster or fails.
	ForceThrowaway bool
}

// Attempt is one way [Find] tried to get a server, and why it failed.
type Attempt struct {
	// Source says what was tried, in the words of [Server.Source].
	Source string
	// Err is why it failed.
	Err error
}

// NoServerError is returned by [Find] when every way to get a server failed.
type NoServerError struct {
	// Attempts lists what was tried, in order.
	Attempts []Attempt
	// EnvVar is Options.EnvVar, named in the advice of the message.
	EnvVar string
	// Hints are more ways to provide a server, one line each, added by a
	// caller that tries more than Find (a container, for the tests).
	Hints []string
}

// Error lists the attempts and says how to provide a server.
func (e *NoServerError) Error() string {
	var b strings.Builder
	b.WriteString("no PostgreSQL server available; tried:")
	for _, a := range e.Attempts {
		fmt.Fprintf(&b, "\n  - %s: %v", a.Source, a.Err)
	}
	b.WriteString("\nto provide one, do any of:")
	if e.EnvVar != "" {
		fmt.Fprintf(&b, "\n  - set %s=postgres://user@host:port/db (a role that can CREATE DATABASE)", e.EnvVar)
	}
	b.WriteString("\n  - set PGHOST, PGPORT, PGUSER (and PGPASSWORD) to a server where that role can CREATE DATABASE")
	b.WriteString("\n  - start a local server on 127.0.0.1:5432 that user postgres can reach without a password (or set PGPASSWORD)")
	b.WriteString("\n  - install the PostgreSQL server binaries, initdb and pg_ctl (Debian: apt-get install postgresql)")
	for _, h := range e.Hints {
		b.WriteString("\n  - " + h)
	}
	return b.String()
}

// Unwrap returns the errors of the attempts.
func (e *NoServerError) Unwrap() []error {
	errs := make([]error, len(e.Attempts))
	for i, a := range e.Attempts {
		errs[i] = a.Err
	}
	return errs
}

// errNotSet records that Options.EnvVar was not set.
var errNotSet = errors.New("not set")

// libpqServerVars are the libpq environment variables that choose a server,
// a role or a database. When any is set, Find uses libpq's defaults.
var libpqServerVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGUSER", "PGDATABASE", "PGSERVICE"}

// LibpqEnv returns the names of the libpq environment variables that are set
// and choose a server, a role or a database (PGHOST, PGHOSTADDR, PGPORT,
// PGUSER, PGDATABASE, PGSERVICE), in that order; none means libpq's
// defaults were not asked for.
func LibpqEnv() []string {
	var set []string
	for _, name := range libpqServerVars {
		if os.Getenv(name) != "" {
			set = append(set, name)
		}
	}
	return set
}

// Find returns a PostgreSQL server, trying in turn the one named by
// opts.EnvVar, the one the PG* environment names, one already running
// locally and a throwaway cluster (see the package documentation). The caller
// must call [Server.Stop] when done. On cancellation Find returns ctx.Err().
func Find(ctx context.Context, opts Options) (*Server, error) {
	var attempts []Attempt
	if !opts.ForceThrowaway {
		if opts.EnvVar != "" {
			if connString := os.Getenv(opts.EnvVar); connString != "" {
				return final(ctx, connString, opts.EnvVar, "unset it to look for another")
			}
			attempts = append(attempts, Attempt{Source: opts.EnvVar, Err: errNotSet})
		}
		if set := LibpqEnv(); len(set) > 0 {
			return final(ctx, "", "PG* environment ("+strings.Join(set, ", ")+")", "unset them to look for another")
		}
		for _, l := range localServers {
			s, err := probe(ctx, l.url, l.source, localTimeout)
			if err == nil {
				return s, nil
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			attempts = append(attempts, Attempt{Source: l.source, Err: err})
		}
	}

	s, err := StartCluster(ctx, opts.BinDir)
	if err == nil {
		return s, nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, ctxErr
	}
	if opts.BinDir != "" {
		return nil, err
	}
	attempts = append(attempts, Attempt{Source: "throwaway cluster", Err: err})
	return nil, &NoServerError{Attempts: attempts, EnvVar: opts.EnvVar}
}

// final uses the server that the caller named (connString from source), or
// fails without looking for another: the tests and the demo never silently
// run somewhere other than where they were told.
func final(ctx context.Context, connString, source, advice string) (*Server, error) {
	s, err := probe(ctx, connString, source, checkTimeout)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		where := MaskURL(connString)
		if connString == "" {
			where = "libpq's defaults"
		}
		return nil, fmt.Errorf("%s names a server that cannot be used (%s): %s: %w", source, advice, where, err)
	}
	return s, nil
}

// Check connects to connString within a few seconds and checks that its role
// can create databases. It returns a Server described by source whose
// [Server.Stop] calls stop (nil: nothing to stop). A starter of servers other
// than Find's (a container, in the tests) builds its Server with it.
func Check(ctx context.Context, connString, source string, stop func(context.Context) error) (*Server, error) {
	s, err := probe(ctx, connString, source, checkTimeout)
	if err != nil {
		return nil, err
	}
	s.stop = stop
	return s, nil
}

// probe connects to connString within timeout and checks that the role can
// create databases. It returns a Server with no stop function.
func probe(ctx context.Context, connString, source string, timeout time.Duration) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	cfg.ConnectTimeout = timeout
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer closeConn(ctx, conn)

	var (
		user, version string
		canCreate     bool
	)
	err = conn.QueryRow(ctx, `
		SELECT current_user, current_setting('server_version'), r.rolsuper OR r.rolcreatedb
		FROM pg_catalog.pg_roles AS r
		WHERE r.rolname = current_user`).Scan(&user, &version, &canCreate)
	if err != nil {
		return nil, fmt.Errorf("check role: %w", err)
	}
	if !canCreate {
		return nil, fmt.Errorf("role %q can neither create databases nor is a superuser", user)
	}
	return &Server{URL: connString, Source: source, Version: version}, nil
}
