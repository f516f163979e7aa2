package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

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
           " (dirty)" when a migration failed half-way.
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
				t, err := a.parseTarget(&db, "migrate")
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
					return a.migrateError(ctx, "migrate "+args[0]+" --proxy", err)
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
		return usagef("migrate", "unknown action %q: want up, down or version", action)
	}
	t, err := a.parseTarget(db, "migrate")
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
		return a.migrateError(ctx, "read the migration version", err)
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
			return a.migrateError(ctx, "migrate up", err)
		}
		after, _, err := schema.Version(ctx, connString)
		if err != nil {
			return a.migrateError(ctx, "read the migration version", err)
		}
		if after == version {
			fmt.Fprintf(a.stdout, "pglease schema is up to date at version %d in %s\n", after, t)
		} else {
			fmt.Fprintf(a.stdout, "migrated pglease schema from version %d to %d in %s\n", version, after, t)
		}
		return nil
	default: // down
		if err := pgleasemigrate.Down(ctx, connString); err != nil {
			return a.migrateError(ctx, "migrate down", err)
		}
		fmt.Fprintf(a.stdout, "reverted pglease schema from version %d to 0 in %s: schema pglease is gone\n", version, t)
		return nil
	}
}

// migrateTo migrates the database up or down to version.
func (a *app) migrateTo(ctx context.Context, db *dbFlag, version uint) error {
	t, err := a.parseTarget(db, "migrate")
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
		return a.migrateError(ctx, "read the migration version", err)
	}
	if err := schema.Goto(ctx, t.connString, version); err != nil {
		return a.migrateError(ctx, fmt.Sprintf("migrate to version %d", version), err)
	}
	if before == version {
		fmt.Fprintf(a.stdout, "pglease schema is at version %d in %s already\n", version, t)
	} else {
		fmt.Fprintf(a.stdout, "migrated pglease schema from version %d to %d in %s\n", before, version, t)
	}
	return nil
}

// migrateError explains a failed migration step in one line: golang-migrate
// errors may quote the whole migration.
func (a *app) migrateError(ctx context.Context, what string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	msg, _, _ := strings.Cut(detail(err), "\n")
	const maxLen = 1500
	if len(msg) > maxLen {
		msg = msg[:maxLen] + "..."
	}
	if strings.Contains(msg, "Dirty database") || strings.Contains(msg, "dirty") {
		msg += "; hint: a migration failed half-way: fix the schema by hand, then set the version in table " + pgleasemigrate.Table
	}
	return failf("%s: %s", what, msg)
}
