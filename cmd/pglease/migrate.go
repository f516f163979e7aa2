package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/pgleasemigrate"
)

// migrateTimeout bounds one migrate command.
const migrateTimeout = 5 * time.Minute

var migrateCommand = &command{
	name:    "migrate",
	summary: "Apply (up), revert (down) or show (version) the pglease schema",
	usage: `
Usage: pglease migrate up|down|version|goto N [--database URL] [--yes]
       pglease migrate up|down --proxy [--database URL]

  up       applies the pending migrations, each in its own transaction:
           schema pglease, its functions and views, and role pglease_client
           when missing and allowed; on a database at an older version, the
           upgrades to this build's version. Leases renew through an
           upgrade, and keep their fences. An upgrade refuses a schema
           changed by hand, naming what differs, and changes nothing.
           Applying an up-to-date database does nothing.
  down     reverts them all: drops schema pglease with every lease, slot and
           fence. Refused without --yes.
  version  prints the applied migration version (0: none), followed by
           " (dirty)" when the history records a migration that was
           interrupted. Reading it needs a role that may read the history
           table, or create it where it is missing (CREATE on the schema
           it goes in): the owner of schema pglease has both.
  goto N   migrates up or down to version N (1 is pglease 0.1.0, 2 is
           0.2.0, 3 is 0.3.0), keeping leases and fences; N = 0 is down
           (needs --yes).

The history is kept in table pglease_schema_migrations, apart from an
application's own schema_migrations (the same table as pgleasemigrate.Up).
A database where pglease was installed with CREATE EXTENSION pglease has no
migrations: up does nothing, down is refused (use DROP EXTENSION).

With --proxy, up installs (down removes) the schema of a PL/Proxy proxy
database instead: the same functions and views, each run on the partition
database that owns its name (history in pglease_proxy_schema_migrations;
needs a superuser for CREATE EXTENSION plproxy; docs/scaling.md). down
loses no lease: they live on the partitions.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db    dbFlag
			yes   bool
			proxy bool
		)
		db.register(fs)
		fs.BoolVar(&yes, "yes", false, "confirm down: delete every lease, slot and fence")
		fs.BoolVar(&proxy, "proxy", false, "migrate a PL/Proxy proxy database (docs/scaling.md)")
		return func(ctx context.Context, args []string) error {
			switch {
			case proxy:
				if len(args) != 1 || (args[0] != "up" && args[0] != "down") {
					return usagef("migrate", "--proxy takes up or down")
				}
				t, err := a.migrateTarget(&db)
				if err != nil {
					return err
				}
				ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
				defer cancel()
				step, done := pgleasemigrate.ProxyUp, "installed (or kept up to date)"
				if args[0] == "down" {
					step, done = pgleasemigrate.ProxyDown, "removed"
				}
				if err := step(ctx, t.connString); err != nil {
					return a.migrateError(ctx, t, pgleasemigrate.ProxyTable, "migrate "+args[0]+" --proxy", err)
				}
				fmt.Fprintf(a.stdout, "pglease proxy schema %s in %s\n", done, t)
				return nil
			case len(args) == 2 && args[0] == "goto":
				n, err := strconv.ParseUint(args[1], 10, 32)
				if err != nil || uint(n) > schema.Latest() {
					return usagef("migrate", "goto takes a version from 0 to %d, got %q", schema.Latest(), args[1])
				}
				if n == 0 {
					return a.migrate(ctx, &db, "down", yes)
				}
				return a.migrateTo(ctx, &db, uint(n))
			case len(args) != 1:
				return usagef("migrate", "want one of up, down, version or goto N")
			}
			return a.migrate(ctx, &db, args[0], yes)
		}
	},
}

func (a *app) migrate(ctx context.Context, db *dbFlag, action string, yes bool) error {
	switch action {
	case "up", "version":
	case "down":
		if !yes {
			return usagef("migrate", "down deletes schema pglease with every lease, slot and fence: add --yes to confirm")
		}
	default:
		return usagef("migrate", "unknown action %q: want up, down, version or goto N", action)
	}
	t, err := a.migrateTarget(db)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	pool, err := a.connect(ctx, t)
	if err != nil {
		return err
	}
	st, err := inspectSchema(ctx, pool)
	pool.Close()
	if err != nil {
		return a.queryError(ctx, "inspect schema pglease", err)
	}
	// The server answered above, so schema's own connection needs no
	// connect timeout beyond ctx.
	connString := t.connString

	if st.extension != "" {
		switch action {
		case "up":
			fmt.Fprintf(a.stdout, "pglease is installed as extension pglease %s in %s: nothing to migrate (upgrade it with ALTER EXTENSION pglease UPDATE)\n", st.extension, t)
			return nil
		case "down":
			return failf("pglease is installed as extension pglease %s in %s: remove it with DROP EXTENSION pglease, then DROP SCHEMA pglease", st.extension, t)
		}
	}
	version, dirty, err := schema.Version(ctx, connString)
	if err != nil {
		return a.migrateError(ctx, t, pgleasemigrate.Table, "read the migration version", err)
	}
	switch action {
	case "version":
		if st.extension != "" {
			fmt.Fprintf(a.stdout, "0 (extension pglease %s)\n", st.extension)
			return nil
		}
		if dirty {
			fmt.Fprintf(a.stdout, "%d (dirty)\n", version)
			return nil
		}
		fmt.Fprintf(a.stdout, "%d\n", version)
		return nil
	case "up":
		if st.schema && version == 0 {
			return failf("schema pglease already exists in %s but has no migration history (made by hand, or left by DROP EXTENSION?): drop it or use it as it is", t)
		}
		if err := pgleasemigrate.Up(ctx, connString); err != nil {
			return a.migrateError(ctx, t, pgleasemigrate.Table, "migrate up", err)
		}
		after, _, err := schema.Version(ctx, connString)
		if err != nil {
			return a.migrateError(ctx, t, pgleasemigrate.Table, "read the migration version", err)
		}
		if after == version {
			fmt.Fprintf(a.stdout, "pglease schema is up to date at version %d in %s\n", after, t)
		} else {
			fmt.Fprintf(a.stdout, "migrated pglease schema from version %d to %d in %s\n", version, after, t)
		}
		return nil
	default: // down
		if err := pgleasemigrate.Down(ctx, connString); err != nil {
			return a.migrateError(ctx, t, pgleasemigrate.Table, "migrate down", err)
		}
		fmt.Fprintf(a.stdout, "reverted pglease schema from version %d to 0 in %s: schema pglease is gone\n", version, t)
		return nil
	}
}

// migrateTo migrates the database up or down to version.
func (a *app) migrateTo(ctx context.Context, db *dbFlag, version uint) error {
	t, err := a.migrateTarget(db)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	pool, err := a.connect(ctx, t)
	if err != nil {
		return err
	}
	st, err := inspectSchema(ctx, pool)
	pool.Close()
	if err != nil {
		return a.queryError(ctx, "inspect schema pglease", err)
	}
	if st.extension != "" {
		return failf("pglease is installed as extension pglease %s in %s: change its version with ALTER EXTENSION pglease UPDATE TO 'VERSION'", st.extension, t)
	}
	before, _, err := schema.Version(ctx, t.connString)
	if err != nil {
		return a.migrateError(ctx, t, pgleasemigrate.Table, "read the migration version", err)
	}
	if err := schema.Goto(ctx, t.connString, version); err != nil {
		return a.migrateError(ctx, t, pgleasemigrate.Table, fmt.Sprintf("migrate to version %d", version), err)
	}
	if before == version {
		fmt.Fprintf(a.stdout, "pglease schema is at version %d in %s already\n", version, t)
	} else {
		fmt.Fprintf(a.stdout, "migrated pglease schema from version %d to %d in %s\n", before, version, t)
	}
	return nil
}

// migrateTarget parses the target of a migrate command, and says on
// standard error when no database was named: migrate then works on libpq's
// default database, named after the user, which is seldom the one meant.
func (a *app) migrateTarget(db *dbFlag) (*target, error) {
	t, err := a.parseTarget(db, "migrate")
	if err == nil && t.unnamed() {
		fmt.Fprintf(a.stderr, "pglease: note: no database named: migrate works on %s; %s\n", t, nameHint)
	}
	return t, err
}

// migrateError explains a failed migration step in one line: golang-migrate
// errors may quote the whole migration. table is the history table of the
// step.
func (a *app) migrateError(ctx context.Context, t *target, table, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if dirty, ok := errors.AsType[migrate.ErrDirty](err); ok {
		// Every migration is one transaction, and one the server refused
		// leaves a clean history (internal/schema): a dirty one was cut off
		// with its outcome unknown, such as by a lost connection at COMMIT.
		return failf("%s: the history (table %s) records migration %d as dirty: it was interrupted, and may or may not be in place, "+
			"so nothing was done; hint: see which version schema pglease is at (SELECT pglease.version(): %s is migration %d), "+
			"record it by hand (UPDATE %s SET version = N, dirty = false), then run the command again",
			what, table, dirty.Version, schemaRelease(schema.Latest()), schema.Latest(), table)
	}
	if msg, ok := historyDenied(ctx, t, table, err); ok {
		return failf("%s: %s", what, msg)
	}
	msg, _, _ := strings.Cut(detail(err), "\n")
	const maxLen = 1500
	if len(msg) > maxLen {
		msg = msg[:maxLen] + "..."
	}
	return failf("%s: %s", what, msg)
}

// historyDenied explains err when it is the server refusing the connecting
// role the migration history table: reading it (migrate version needs
// that) or creating it where it is missing. Nothing failed half-way then.
func historyDenied(ctx context.Context, t *target, table string, err error) (string, bool) {
	dbErr, ok := errors.AsType[*database.Error](err)
	if !ok || !strings.Contains(string(dbErr.Query), table) {
		return "", false
	}
	pgErr, ok := errors.AsType[*pgconn.PgError](dbErr.OrigErr)
	if !ok || pgErr.Code != "42501" {
		return "", false
	}
	const runAsOwner = "run pglease migrate as the owner of schema pglease (the role that ran migrate up)"
	user, nsp, exists, err := historyTable(ctx, t, table)
	switch {
	case err != nil:
		return fmt.Sprintf("%s: the connecting role may not create or read the migration history table %s, "+
			"so the migration version can be neither read nor recorded; nothing was changed; hint: %s", pgErr.Message, table, runAsOwner), true
	case exists:
		return fmt.Sprintf("role %s may not read or write %s.%s, the migration history (%s), "+
			"so the migration version can be neither read nor recorded; nothing was changed; hint: %s, "+
			"or GRANT SELECT ON %s.%s TO %s to let it read the version",
			user, nsp, table, pgErr.Message, runAsOwner, nsp, table, user), true
	default:
		return fmt.Sprintf("role %s may not create %s, the migration history, in schema %s (%s), "+
			"so the migration version can be neither read nor recorded; nothing was changed; hint: %s, "+
			"or GRANT CREATE ON SCHEMA %s TO %s", user, table, nsp, pgErr.Message, runAsOwner, nsp, user), true
	}
}

// historyTable reports the connecting role, the schema golang-migrate keeps
// table in (the current schema) and whether table exists there, whatever
// the role may do with it.
func historyTable(ctx context.Context, t *target, table string) (user, nsp string, exists bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, t.cfg.ConnConfig.Copy())
	if err != nil {
		return "", "", false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `
		SELECT current_user, s.name,
		       pg_catalog.to_regclass(pg_catalog.format('%I.%I', s.name, $1::text)) IS NOT NULL
		FROM (SELECT pg_catalog.current_schema() AS name) AS s
		WHERE s.name IS NOT NULL`, table).Scan(&user, &nsp, &exists)
	return user, nsp, exists, err
}
