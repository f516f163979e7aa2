//go:build unix

package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/runslots"
)

// The cases of this file are a new user's first hour (issue #50): what
// the help says, and what the errors of a first try say.

// testHelp: every page of help names documents that exist, with sections
// that exist; says each flag's default once, and never a zero default;
// spells every flag --name (-v only beside --verbose); and the parse error
// of a duration without a unit says which unit to add.
func testHelp(t *testing.T, c cli) {
	pages := map[string]string{"help": c.mustRun(0, "help").stdout}
	for _, cmd := range commands {
		pages["help "+cmd.name] = c.mustRun(0, "help", cmd.name).stdout
	}
	for what, text := range pages {
		requireDocLinks(t, what, text)
		if strings.Contains(text, "README") {
			t.Errorf("%s cites the README, which has neither the database rule nor pg_cron: %q", what, text)
		}
		for line := range strings.Lines(text) {
			if strings.Count(line, "(default") > 1 || regexp.MustCompile(`\(default (0s|0|false)\)`).MatchString(line) {
				t.Errorf("%s: a default said twice or a zero default: %q", what, line)
			}
			if trimmed := strings.TrimSpace(line); strings.HasPrefix(trimmed, "-") && !strings.HasPrefix(trimmed, "--") &&
				!strings.HasPrefix(trimmed, "-v, --verbose") {
				t.Errorf("%s: a flag spelt with one dash: %q", what, line)
			}
		}
	}
	requireContains(t, "help release", pages["help release"], "with --to: how long the next grant is reserved for it (default 10s)\n")
	requireContains(t, "help run", pages["help run"], "at most TTL/2 (default TTL/4, at most 10s)\n", "-v, --verbose", "(default 30s)")
	requireContains(t, "help purge", pages["help purge"], "pg_cron", "docs/upgrading.md#bounded-tables-purge", "(default 24h)")
	requireContains(t, "help", pages["help"], "CONTRIBUTING.md#which-database", "--version", "[--database URL] <command>")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--lease", "x", "--ttl", "30", "--", "true"}, "run: --ttl 30: a duration needs a unit, e.g. 30s"},
		{[]string{"run", "--lease", "x", "--grace", "1.5", "--", "true"}, "--grace 1.5: a duration needs a unit, e.g. 1.5s"},
		{[]string{"purge", "--free-for", "soon"}, "--free-for soon: not a duration"},
		{[]string{"history", "x", "--limit", "many"}, "--limit many: not a whole number"},
		{[]string{"status", "--bogus"}, "unknown flag --bogus"},
		{[]string{"migrate", "sideways"}, `unknown action "sideways": want up, down, version or goto N`},
		{[]string{"--lease", "x", "run", "--", "true"}, "--lease before the command"},
	} {
		r := c.mustRun(2, tc.args...)
		requireOneLine(t, "stderr of pglease "+strings.Join(tc.args, " "), r.stderr)
		requireContains(t, "stderr of pglease "+strings.Join(tc.args, " "), r.stderr, tc.want)
		if strings.Contains(r.stderr, "parse error") {
			t.Errorf("pglease %s: says %q without saying what is wrong", strings.Join(tc.args, " "), r.stderr)
		}
	}
}

// docLinkRE matches a document path in the help, with its section.
var docLinkRE = regexp.MustCompile(`\b((?:docs/)?[\w-]+\.md)(?:#([\w-]+))?`)

// requireDocLinks fails unless every document text names (docs/cron.md,
// CONTRIBUTING.md#which-database) is a file of the repository with that
// section.
func requireDocLinks(t *testing.T, what, text string) {
	t.Helper()
	for _, m := range docLinkRE.FindAllStringSubmatch(text, -1) {
		path, anchor := m[1], m[2]
		doc, err := os.ReadFile(filepath.Join("..", "..", path))
		if err != nil {
			t.Errorf("%s names %s, which does not open: %v", what, m[0], err)
			continue
		}
		if anchor == "" {
			continue
		}
		found := false
		for line := range strings.Lines(string(doc)) {
			if heading, ok := strings.CutPrefix(line, "#"); ok && slug(strings.TrimLeft(heading, "#")) == anchor {
				found = true
			}
		}
		if !found {
			t.Errorf("%s names %s: %s has no section %q", what, m[0], path, anchor)
		}
	}
}

// slug returns the anchor GitHub gives a heading: lower case, spaces to
// hyphens, punctuation dropped.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// testVersion: pglease --version and pglease version print the build and
// the schema version that migrate up installs.
func testVersion(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	var installed string
	if err := pgtest.Pool(t, url).QueryRow(t.Context(), `SELECT pglease.version()`).Scan(&installed); err != nil {
		t.Fatal(err)
	}
	r := c.mustRun(0, "--version")
	want := "schema " + installed + " (migration " + strconv.Itoa(int(schema.Latest())) + ";"
	requireContains(t, "pglease --version", r.stdout, "pglease ", want)
	if r2 := c.mustRun(0, "version"); r2.stdout != r.stdout {
		t.Fatalf("pglease version: got %q, want what --version says, %q", r2.stdout, r.stdout)
	}
	if r2 := c.mustRun(0, "--database", url, "--version"); r2.stdout != r.stdout {
		t.Fatalf("pglease --database URL --version: got %q, want %q", r2.stdout, r.stdout)
	}
	c.mustRun(2, "version", "extra")
}

// testGlobalFlags: --database may come before the command, with a space
// or an "=", and -v and --verbose both make run log.
func testGlobalFlags(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	latest := strconv.Itoa(int(schema.Latest())) + "\n"
	if r := c.mustRun(0, "--database", url, "migrate", "version"); r.stdout != latest {
		t.Fatalf("pglease --database URL migrate version: got %q, want %q", r.stdout, latest)
	}
	if r := c.mustRun(0, "--database="+url, "migrate", "version"); r.stdout != latest {
		t.Fatalf("pglease --database=URL migrate version: got %q, want %q", r.stdout, latest)
	}
	c.mustRun(0, "--database", url, "status")
	c.mustRun(0, "--database", url, "run", "--lease", "global", "--", "true")
	r := c.mustRun(2, "--database")
	requireContains(t, "pglease --database", r.stderr, "--database needs a URL")
	for _, flag := range []string{"-v", "--verbose"} {
		r := c.mustRun(0, "run", flag, "--database", url, "--lease", "verbose", "--", "true")
		requireContains(t, "run "+flag, r.stderr, "acquired")
	}
}

// testMigratePrivileges: migrate as a role that may neither create nor read
// the history table says so, and what to grant, and never suggests fixing
// the schema by hand; a history that is really dirty does.
func testMigratePrivileges(t *testing.T, c cli) {
	url := pgtest.NewDatabase(t)
	admin := pgtest.Pool(t, url)
	// PostgreSQL 15's default; older majors let PUBLIC create in public.
	if _, err := admin.Exec(t.Context(), `REVOKE CREATE ON SCHEMA public FROM PUBLIC`); err != nil {
		t.Fatal(err)
	}
	login := c.with("PGLEASE_DATABASE_URL=" + loginURL(t, url, true))
	owner := c.with("PGLEASE_DATABASE_URL=" + url)
	requireHealthy := func(what, stderr string) {
		t.Helper()
		requireOneLine(t, what, stderr)
		for _, bad := range []string{"half-way", "by hand", "dirty"} {
			if strings.Contains(stderr, bad) {
				t.Fatalf("%s: got %q, which says %q of a healthy history", what, stderr, bad)
			}
		}
	}

	r := login.mustRun(1, "migrate", "version")
	requireHealthy("migrate version as a role without CREATE, no history", r.stderr)
	requireContains(t, "migrate version as a role without CREATE, no history", r.stderr,
		"may not create pglease_schema_migrations", "in schema public", "neither read nor recorded",
		"owner of schema pglease", "GRANT CREATE ON SCHEMA public TO ")

	owner.mustRun(0, "migrate", "up")
	r = login.mustRun(1, "migrate", "version")
	requireHealthy("migrate version as a role that may not read the history", r.stderr)
	requireContains(t, "migrate version as a role that may not read the history", r.stderr,
		"may not read or write public.pglease_schema_migrations", "owner of schema pglease",
		"GRANT SELECT ON public.pglease_schema_migrations TO ")
	r = login.mustRun(1, "migrate", "up")
	requireHealthy("migrate up as a role that may not read the history", r.stderr)

	// A history that really is dirty.
	if _, err := admin.Exec(t.Context(), `UPDATE pglease_schema_migrations SET dirty = true`); err != nil {
		t.Fatal(err)
	}
	latest := strconv.Itoa(int(schema.Latest()))
	if r := owner.mustRun(0, "migrate", "version"); r.stdout != latest+" (dirty)\n" {
		t.Fatalf("migrate version of a dirty history: got %q, want %q", r.stdout, latest+" (dirty)\n")
	}
	r = owner.mustRun(1, "migrate", "up")
	requireOneLine(t, "migrate up of a dirty history", r.stderr)
	requireContains(t, "migrate up of a dirty history", r.stderr, "records migration "+latest+" as dirty", "by hand",
		"UPDATE pglease_schema_migrations SET version = N, dirty = false")
}

// testNoDatabaseNamed: with nothing naming a database, the errors say so
// and how to name one, and neither blame the PG* variables nor suggest
// installing pglease where libpq happens to connect; with PG* variables
// set, they name them.
func testNoDatabaseNamed(t *testing.T, c cli) {
	r := c.run("status")
	if r.code == 0 {
		t.Fatalf("status with no database named succeeded: libpq's default database has schema pglease, so this test cannot see the error; drop that schema or run the tests as a user whose default database has none\n%s", r)
	}
	if r.code != 1 {
		t.Fatalf("status with no database named: got exit %d, want 1\n%s", r.code, r)
	}
	requireOneLine(t, "status with no database named", r.stderr)
	requireContains(t, "status with no database named", r.stderr, "no database named", "--database URL", "PGLEASE_DATABASE_URL")
	for _, bad := range []string{"PG*", "PGHOST", "migrate up"} {
		if strings.Contains(r.stderr, bad) {
			t.Fatalf("status with no database named: got %q, which says %q", r.stderr, bad)
		}
	}

	_, port, _ := net.SplitHostPort(closedPort(t))
	r = c.with("PGHOST=127.0.0.1", "PGPORT="+port).mustRun(1, "status")
	requireContains(t, "status with PGHOST and PGPORT", r.stderr, "cannot connect to host=127.0.0.1 port="+port, "(from PGHOST, PGPORT)")
	if strings.Contains(r.stderr, "no database named") {
		t.Fatalf("status with PGHOST and PGPORT: got %q, which says no database was named", r.stderr)
	}
	cfg, err := pgx.ParseConfig(pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	r = c.with("PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)), "PGUSER="+cfg.User, "PGPASSWORD="+cfg.Password,
		"PGDATABASE="+cfg.Database, "PGSSLMODE=disable").mustRun(1, "status")
	requireContains(t, "status with PG* naming a database without pglease", r.stderr,
		"schema pglease not found in host="+cfg.Host, "dbname="+cfg.Database, "(from PGHOST, PGPORT, PGUSER, PGDATABASE)", "pglease migrate up")
}

// testScopeFullCapacity: a claim refused by a scope whose live holders
// claimed it with a smaller capacity says the capacity in force.
func testScopeFullCapacity(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	for _, holder := range []string{"a", "b"} {
		slots, err := runslots.New(pool, runslots.Config{Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := slots.TryClaim(t.Context(), runslots.Want{Scope: "gpu", Capacity: 2}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	r := c.mustRun(75, "run", "--slot", "gpu:8", "--", "true")
	requireOneLine(t, "run --slot gpu:8 on a scope claimed with capacity 2", r.stderr)
	requireContains(t, "run --slot gpu:8 on a scope claimed with capacity 2", r.stderr,
		`scope "gpu" is full: 2 holders with capacity 2 in force (8 asked`)
	r = c.mustRun(75, "run", "--slot", "gpu:2", "--", "true")
	requireContains(t, "run --slot gpu:2 on a full scope", r.stderr, `scope "gpu" is full: 2 holders for capacity 2,`)
}
