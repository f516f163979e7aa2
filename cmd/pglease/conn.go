package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/pglease"
)

// Environment variables naming the database, in order of precedence after
// the --database flag.
const (
	envDatabaseURL = "PGLEASE_DATABASE_URL"
	envFallbackURL = "DATABASE_URL"
)

const (
	// defaultConnectTimeout bounds connecting when the connection string
	// sets no connect_timeout.
	defaultConnectTimeout = 10 * time.Second
	// checkTimeout bounds the first round trips: ping and schema check.
	checkTimeout = 30 * time.Second
)

// dbFlag is the --database flag of a command.
type dbFlag struct {
	value string
}

func (d *dbFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&d.value, "database", "",
		"connection `URL` (postgres://... or key=value); defaults to $"+envDatabaseURL+", else $"+envFallbackURL+", else the PG* environment")
}

// target is the database a command connects to.
type target struct {
	connString string // may be empty: libpq's environment defaults
	from       string // where connString came from, for messages
	cfg        *pgxpool.Config
	// pgEnv are the PG* variables set that choose a server, a role or a
	// database (pgserver.LibpqEnv), when connString is empty.
	pgEnv []string
}

// unnamed reports whether nothing named the database: no connection
// string and no PG* variable, so libpq's defaults (the local socket, a
// database named after the user) are in force.
func (t *target) unnamed() bool { return t.connString == "" && len(t.pgEnv) == 0 }

// String describes the target for messages, without any password.
func (t *target) String() string {
	if t.connString != "" {
		return pgserver.MaskURL(t.connString)
	}
	c := t.cfg.ConnConfig
	dbname := cmp.Or(c.Database, c.User) // the server's default: the user name
	if t.unnamed() {
		return fmt.Sprintf("libpq's default database %q (user %q, %s port %d)", dbname, c.User, c.Host, c.Port)
	}
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s (from %s)", c.Host, c.Port, c.User, dbname, strings.Join(t.pgEnv, ", "))
}

// nameHint says how to name the database, for messages when none was.
const nameHint = "name the database with --database URL or " + envDatabaseURL + " (such as postgres://user@host:5432/dbname)"

// connString returns the connection string in force and where it came from:
// the flag, then the environment variables; "" means libpq's defaults.
func (a *app) connString(d *dbFlag) (connString, from string) {
	switch {
	case d.value != "":
		return d.value, "--database"
	case a.getenv(envDatabaseURL) != "":
		return a.getenv(envDatabaseURL), envDatabaseURL
	case a.getenv(envFallbackURL) != "":
		return a.getenv(envFallbackURL), envFallbackURL
	}
	return "", "the PG* environment"
}

// parseTarget parses the connection string in force for command cmd, and
// names it as application_name unless the string sets one.
func (a *app) parseTarget(d *dbFlag, cmd string) (*target, error) {
	s, from := a.connString(d)
	a.rememberPassword(s)
	if from == "--database" && hasPassword(s) && !a.warnedPassword {
		a.warnedPassword = true
		fmt.Fprintf(a.stderr, "pglease: warning: the password in --database can be read by other local users (ps); "+
			"set %s or use a .pgpass file instead\n", envDatabaseURL)
	}
	cfg, err := pgxpool.ParseConfig(s)
	if err != nil {
		return nil, &exitError{code: exitUsage, msg: fmt.Sprintf(
			"invalid connection string %s (from %s): %s; hint: use postgres://user@host:port/dbname or key=value pairs such as host=... dbname=...",
			quoteMasked(s), from, parseReason(err))}
	}
	a.addSecret(cfg.ConnConfig.Password, cfg.ConnConfig.User)
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = defaultConnectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "pglease " + cmd
	}
	t := &target{connString: s, from: from, cfg: cfg}
	if s == "" {
		t.pgEnv = pgserver.LibpqEnv()
	}
	return t, nil
}

// dsnPasswordKey matches the password keyword of a key=value connection
// string.
var dsnPasswordKey = regexp.MustCompile(`(?i)(^|\s)password\s*=`)

// hasPassword reports whether connString carries a password, parsed or not.
func hasPassword(connString string) bool {
	scheme, rest, isURL := strings.Cut(connString, "://")
	if !isURL || scheme != "postgres" && scheme != "postgresql" {
		return dsnPasswordKey.MatchString(connString)
	}
	if u, err := url.Parse(connString); err == nil {
		_, ok := u.User.Password()
		return ok || u.Query().Has("password")
	}
	userinfo, _, hasAt := strings.Cut(rest, "@")
	return hasAt && strings.Contains(userinfo, ":") || strings.Contains(rest, "password=")
}

// rememberPassword records the password of connString as a secret, as far as
// it can be found without a successful parse.
func (a *app) rememberPassword(connString string) {
	if u, err := url.Parse(connString); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			a.addSecret(pw, u.User.Username())
			a.addSecret(url.QueryEscape(pw), u.User.Username())
			a.addSecret(url.PathEscape(pw), u.User.Username())
		}
	}
}

// minSecretLen is the length below which a password is not scrubbed from
// messages: replacing every "pw" in a message would garble it and hide
// nothing.
const minSecretLen = 4

// addSecret records password as a string never to print, unless it is too
// short to matter or is the user name, which messages show anyway.
func (a *app) addSecret(password, user string) {
	if len(password) >= minSecretLen && password != user && !slices.Contains(a.secrets, password) {
		a.secrets = append(a.secrets, password)
	}
}

// quoteMasked quotes a masked connection string for a message.
func quoteMasked(s string) string {
	return "\"" + pgserver.MaskURL(s) + "\""
}

// parseReason returns why pgx could not parse a connection string, without
// repeating the string.
func parseReason(err error) string {
	msg := err.Error()
	if pe, ok := errors.AsType[*pgconn.ParseConfigError](err); ok {
		msg = pe.Error()
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			msg = msg[i+len("`: "):]
		}
	}
	return msg
}

// connect opens a pool on t and checks that the server answers.
func (a *app) connect(ctx context.Context, t *target) (*pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, t.cfg)
	if err != nil {
		return nil, a.connectError(t, err)
	}
	pctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, a.connectError(t, err)
	}
	return pool, nil
}

// connectError explains a failure to connect to t, with a hint.
func (a *app) connectError(t *target, err error) error {
	reason := err.Error()
	if ce, ok := errors.AsType[*pgconn.ConnectError](err); ok && errors.Unwrap(ce) != nil {
		reason = errors.Unwrap(ce).Error()
	}
	// pgx tries each address and TLS mode in turn, often failing the same
	// way each time: say each reason once.
	var reasons []string
	for _, r := range strings.Split(reason, "\n") {
		if r = strings.TrimSpace(r); r != "" && !slices.Contains(reasons, r) {
			reasons = append(reasons, r)
		}
	}
	reason = strings.Join(reasons, "; ")
	hint := "is the server running and reachable? set --database or " + envDatabaseURL
	if t.unnamed() {
		return failf("no database named, and cannot connect to %s: %s; hint: %s", t, reason, nameHint)
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch {
		case pgErr.Code == "28P01" || pgErr.Code == "28000":
			hint = "check the user and password (the password is never printed)"
		case pgErr.Code == "3D000":
			hint = "the database does not exist: create it, or name another one"
		case strings.HasPrefix(pgErr.Code, "53"):
			hint = "the server is out of resources (too many connections?)"
		}
	}
	return failf("cannot connect to %s: %s; hint: %s", t, reason, hint)
}

// schemaState is what a database has of pglease.
type schemaState struct {
	schema    bool   // schema pglease exists
	objects   bool   // and holds pglease's views
	extension string // version of extension pglease, or ""
}

// inspectSchema reports what the database has of pglease.
func inspectSchema(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (schemaState, error) {
	var (
		st  schemaState
		ext *string
	)
	err := db.QueryRow(ctx, `
		SELECT n.oid IS NOT NULL,
		       EXISTS (SELECT 1 FROM pg_catalog.pg_class AS c
		               WHERE c.relnamespace = n.oid AND c.relname = 'lease_status'),
		       (SELECT e.extversion FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pglease')
		FROM (SELECT 1) AS one
		LEFT JOIN pg_catalog.pg_namespace AS n ON n.nspname = 'pglease'`).Scan(&st.schema, &st.objects, &ext)
	if err != nil {
		return st, err
	}
	if ext != nil {
		st.extension = *ext
	}
	return st, nil
}

// requireSchema fails with a hint unless the database at pool has pglease.
func (a *app) requireSchema(ctx context.Context, pool *pgxpool.Pool, t *target) error {
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	st, err := inspectSchema(cctx, pool)
	if err != nil {
		return a.queryError(ctx, "inspect schema pglease", err)
	}
	switch {
	case !st.schema && t.unnamed():
		return failf("no database named, and %s has no schema pglease; hint: %s", t, nameHint)
	case !st.schema:
		return failf("schema pglease not found in %s; hint: run `pglease migrate up` (or CREATE EXTENSION pglease)", t)
	case !st.objects:
		return failf("schema pglease in %s holds no pglease objects (left behind by DROP EXTENSION pglease?); "+
			"hint: DROP SCHEMA pglease, then run `pglease migrate up` or CREATE EXTENSION pglease", t)
	}
	return nil
}

// queryError explains a failed database call made to do what.
func (a *app) queryError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	pgErr, _ := errors.AsType[*pgconn.PgError](err)
	msg := err.Error()
	if pgErr != nil {
		msg = pgErr.Message
	}
	switch {
	case errors.Is(err, pglease.ErrPermissionDenied):
		return failf("%s: permission denied: %s; hint: the connecting role needs role pglease_client (GRANT pglease_client TO ...); "+
			"force release needs the owner of schema pglease", what, msg)
	case errors.Is(err, pglease.ErrNotMigrated):
		return failf("%s: %s; hint: schema pglease is missing or incomplete: run `pglease migrate up`", what, msg)
	}
	return failf("%s: %s", what, detail(err))
}

// open connects to the database of db for command cmd and checks that it
// has the schema: the start of every command that reads or changes it.
// The caller closes the pool.
func (a *app) open(ctx context.Context, db *dbFlag, cmd string) (*pgxpool.Pool, error) {
	t, err := a.parseTarget(db, cmd)
	if err != nil {
		return nil, err
	}
	pool, err := a.connect(ctx, t)
	if err != nil {
		return nil, err
	}
	if err := a.requireSchema(ctx, pool, t); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
