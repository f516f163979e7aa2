package contract

// The migration tests are not parallel: pglease's down migration drops the
// cluster-wide role pglease_client when no database uses it any more, which
// must not happen under the feet of a test that is creating its database.

import (
	"bytes"
	"net"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
)

// createAppSchema gives a database what an application migrated with
// golang-migrate has: its own history in public.schema_migrations and a table.
func createAppSchema(t testing.TB, q querier) {
	t.Helper()
	mustExec(t, q, `CREATE TABLE public.schema_migrations (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)`)
	mustExec(t, q, `INSERT INTO public.schema_migrations VALUES (20240101, false)`)
	mustExec(t, q, `CREATE TABLE public.orders (id bigint PRIMARY KEY, note text NOT NULL)`)
	mustExec(t, q, `INSERT INTO public.orders VALUES (1, 'first'), (2, 'it''s second')`)
}

// appSnapshot returns the application's tables as text.
func appSnapshot(t testing.TB, q querier) string {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var s string
	err := q.QueryRow(ctx, `SELECT concat_ws(E'\n',
		(SELECT jsonb_agg(to_jsonb(m) ORDER BY m.version) FROM public.schema_migrations AS m),
		(SELECT jsonb_agg(to_jsonb(o) ORDER BY o.id) FROM public.orders AS o))`).Scan(&s)
	if err != nil {
		t.Fatalf("snapshot application tables: %v", err)
	}
	return s
}

// catalogSnapshot lists the database's schemas, relations (with pg_toast),
// functions and types, one line each.
func catalogSnapshot(t testing.TB, q querier) []string {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	rows, err := q.Query(ctx, `
		SELECT 'namespace ' || n.nspname FROM pg_catalog.pg_namespace AS n
		WHERE n.nspname !~ '^pg_(toast_)?temp_'
		UNION ALL
		SELECT 'class ' || n.nspname || '.' || c.relname || ' ' || c.relkind::text
		FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace
		WHERE n.nspname !~ '^pg_(toast_)?temp_'
		UNION ALL
		SELECT 'proc ' || n.nspname || '.' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
		FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
		UNION ALL
		SELECT 'type ' || n.nspname || '.' || ty.typname
		FROM pg_catalog.pg_type AS ty JOIN pg_catalog.pg_namespace AS n ON n.oid = ty.typnamespace
		WHERE n.nspname !~ '^pg_(toast_)?temp_'
		ORDER BY 1`)
	if err != nil {
		t.Fatalf("snapshot catalog: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("snapshot catalog: %v", err)
	}
	return lines
}

// diff returns the lines only in a and the lines only in b.
func diff(a, b []string) (onlyA, onlyB []string) {
	inA := map[string]bool{}
	for _, s := range a {
		inA[s] = true
	}
	inB := map[string]bool{}
	for _, s := range b {
		inB[s] = true
		if !inA[s] {
			onlyB = append(onlyB, s)
		}
	}
	for _, s := range a {
		if !inB[s] {
			onlyA = append(onlyA, s)
		}
	}
	return onlyA, onlyB
}

// withoutPglease drops the lines of schema pglease and of pg_toast (where the
// toast tables of pglease's tables live).
func withoutPglease(lines []string) []string {
	return slices.DeleteFunc(slices.Clone(lines), func(s string) bool {
		return s == "namespace pglease" || strings.Contains(s, " pglease.") || strings.Contains(s, " pg_toast.")
	})
}

// withoutExtension drops the lines of the objects of extension ext.
func withoutExtension(t testing.TB, q querier, ext string, lines []string) []string {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	rows, err := q.Query(ctx, `
		SELECT 'proc ' || n.nspname || '.' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
		FROM pg_catalog.pg_depend AS d
		JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid AND d.refclassid = 'pg_catalog.pg_extension'::regclass
		JOIN pg_catalog.pg_proc AS p ON p.oid = d.objid AND d.classid = 'pg_catalog.pg_proc'::regclass
		JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace
		WHERE d.deptype = 'e' AND e.extname = $1
		UNION ALL
		SELECT 'type ' || n.nspname || '.' || ty.typname
		FROM pg_catalog.pg_depend AS d
		JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid AND d.refclassid = 'pg_catalog.pg_extension'::regclass
		JOIN pg_catalog.pg_type AS ty ON ty.oid = d.objid AND d.classid = 'pg_catalog.pg_type'::regclass
		JOIN pg_catalog.pg_namespace AS n ON n.oid = ty.typnamespace
		WHERE d.deptype = 'e' AND e.extname = $1
		UNION ALL
		SELECT 'type ' || n.nspname || '.' || arr.typname
		FROM pg_catalog.pg_depend AS d
		JOIN pg_catalog.pg_extension AS e ON e.oid = d.refobjid AND d.refclassid = 'pg_catalog.pg_extension'::regclass
		JOIN pg_catalog.pg_type AS ty ON ty.oid = d.objid AND d.classid = 'pg_catalog.pg_type'::regclass
		JOIN pg_catalog.pg_type AS arr ON arr.oid = ty.typarray
		JOIN pg_catalog.pg_namespace AS n ON n.oid = arr.typnamespace
		WHERE d.deptype = 'e' AND e.extname = $1`, ext)
	if err != nil {
		t.Fatalf("objects of extension %s: %v", ext, err)
	}
	members, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("objects of extension %s: %v", ext, err)
	}
	return slices.DeleteFunc(slices.Clone(lines), func(s string) bool { return slices.Contains(members, s) })
}

// migrationsTableLines is what golang-migrate's own table adds to the catalog.
var migrationsTableLines = []string{
	"class public." + schema.TableName + " r",
	"class public." + schema.TableName + "_pkey i",
	"type public._" + schema.TableName,
	"type public." + schema.TableName,
}

func requireMigrationsTableOnly(t testing.TB, what string, before, after []string) {
	t.Helper()
	removed, added := diff(before, after)
	slices.Sort(added)
	if len(removed) != 0 || !slices.Equal(added, migrationsTableLines) {
		t.Fatalf("%s: catalog removed %q and added %q, want nothing removed and only %q added",
			what, removed, added, migrationsTableLines)
	}
}

type migrationRow struct {
	Version int64
	Dirty   bool
}

func pgleaseHistory(t testing.TB, q querier) []migrationRow {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	rows, err := q.Query(ctx, `SELECT version, dirty FROM public.`+schema.TableName+` ORDER BY version`)
	if err != nil {
		t.Fatalf("read %s: %v", schema.TableName, err)
	}
	history, err := pgx.CollectRows(rows, pgx.RowToStructByPos[migrationRow])
	if err != nil {
		t.Fatalf("read %s: %v", schema.TableName, err)
	}
	return history
}

func requirePgleaseGone(t testing.TB, q querier) {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var namespaces, grants int
	err := q.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM pg_catalog.pg_namespace WHERE nspname = 'pglease'),
		(SELECT count(*) FROM pg_catalog.pg_shdepend AS d
		 JOIN pg_catalog.pg_roles AS r ON r.oid = d.refobjid AND d.refclassid = 'pg_catalog.pg_authid'::regclass
		 WHERE r.rolname = 'pglease_client'
		   AND d.dbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()))`).
		Scan(&namespaces, &grants)
	if err != nil {
		t.Fatal(err)
	}
	if namespaces != 0 || grants != 0 {
		t.Fatalf("after down: got %d pglease schemas and %d grants to pglease_client in this database, want 0, 0",
			namespaces, grants)
	}
}

// TestMigrationsBesideAppHistory applies pglease with internal/schema to a
// database that has an application's own golang-migrate history: up, down,
// up, down, each leaving the application's tables alone and down leaving
// nothing of pglease but its migrations table.
func TestMigrationsBesideAppHistory(t *testing.T) {
	url := pgtest.NewDatabase(t)
	pool := newPool(t, url, 2)
	pgtest.LockRoleDrops(t) // down drops the role where it can
	ctx := testContext(t)

	createAppSchema(t, pool)
	app := appSnapshot(t, pool)
	fresh := catalogSnapshot(t, pool)

	if err := schema.Up(ctx, url); err != nil {
		t.Fatalf("up: %v", err)
	}
	if got := appSnapshot(t, pool); got != app {
		t.Fatalf("application tables after up:\ngot  %s\nwant %s", got, app)
	}
	if got, want := pgleaseHistory(t, pool), []migrationRow{{int64(schema.Latest()), false}}; !slices.Equal(got, want) {
		t.Fatalf("%s after up: got %v, want %v", schema.TableName, got, want)
	}
	if v, dirty, err := schema.Version(ctx, url); err != nil || v != schema.Latest() || dirty {
		t.Fatalf("schema.Version after up: got %d, %v, %v, want %d, false, nil", v, dirty, err, schema.Latest())
	}
	// btree_gist (0.4.0, the tenure history's constraint) is created where
	// it was missing: its objects are the only others up adds, and down
	// drops them again (below).
	requireMigrationsTableOnly(t, "up, outside schema pglease", withoutPglease(fresh),
		withoutExtension(t, pool, "btree_gist", withoutPglease(catalogSnapshot(t, pool))))
	mustAcquire(t, pool, "after-up", "h", time.Minute, 1)

	// Up again is a no-op.
	if err := schema.Up(ctx, url); err != nil {
		t.Fatalf("second up: %v", err)
	}

	if err := schema.Down(ctx, url); err != nil {
		t.Fatalf("down: %v", err)
	}
	requireMigrationsTableOnly(t, "up then down", fresh, catalogSnapshot(t, pool))
	requirePgleaseGone(t, pool)
	if got := appSnapshot(t, pool); got != app {
		t.Fatalf("application tables after down:\ngot  %s\nwant %s", got, app)
	}
	if v, dirty, err := schema.Version(ctx, url); err != nil || v != 0 || dirty {
		t.Fatalf("schema.Version after down: got %d, %v, %v, want 0, false, nil", v, dirty, err)
	}

	// And up again: a fresh start, fences from 1.
	if err := schema.Up(ctx, url); err != nil {
		t.Fatalf("up after down: %v", err)
	}
	mustAcquire(t, pool, "after-up", "h", time.Minute, 1)
	if err := schema.Down(ctx, url); err != nil {
		t.Fatalf("second down: %v", err)
	}
	requireMigrationsTableOnly(t, "up, down, up, down", fresh, catalogSnapshot(t, pool))
	if got := appSnapshot(t, pool); got != app {
		t.Fatalf("application tables after the second down:\ngot  %s\nwant %s", got, app)
	}
}

// repoRoot is the module root, three directories up from this package.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil || !bytes.HasPrefix(mod, []byte("module github.com/pglease/pglease\n")) {
		t.Fatalf("module root %s: go.mod is not pglease's (%v)", root, err)
	}
	return root
}

// migrateCLIURL turns a connection string into the URL the migrate CLI
// takes: scheme pgx5 and pglease's own migrations table.
func migrateCLIURL(t testing.TB, connString string) string {
	t.Helper()
	u, err := neturl.Parse(connString)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		cfg, err := pgx.ParseConfig(connString)
		if err != nil {
			t.Fatalf("parse connection string: %v", err)
		}
		u = &neturl.URL{Path: "/" + cfg.Database, User: neturl.UserPassword(cfg.User, cfg.Password)}
		q := neturl.Values{}
		if strings.HasPrefix(cfg.Host, "/") {
			q.Set("host", cfg.Host)
			q.Set("port", strconv.Itoa(int(cfg.Port)))
		} else {
			u.Host = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
		}
		if cfg.TLSConfig == nil {
			q.Set("sslmode", "disable")
		}
		u.RawQuery = q.Encode()
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", schema.TableName)
	u.RawQuery = q.Encode()
	return u.String()
}

// TestMigrateCLI applies and reverts pglease with the stock golang-migrate
// CLI, built from the version pinned in tools/go.mod, beside an
// application's own history.
func TestMigrateCLI(t *testing.T) {
	root := repoRoot(t)
	ctx := testContext(t)

	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go must be on PATH to build the migrate CLI: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "migrate")
	build := exec.CommandContext(ctx, goBin, "build", "-modfile="+filepath.Join(root, "tools", "go.mod"),
		"-tags", "pgx5", "-o", bin, "github.com/golang-migrate/migrate/v4/cmd/migrate")
	build.Dir = root
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the migrate CLI: %v\n%s", err, out)
	}

	url := pgtest.NewDatabase(t)
	pool := newPool(t, url, 2)
	pgtest.LockRoleDrops(t) // down drops the role where it can
	createAppSchema(t, pool)
	app := appSnapshot(t, pool)
	dbURL := migrateCLIURL(t, url)
	migrate := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"-path", filepath.Join(root, "migrations"), "-database", dbURL}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("migrate %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}

	migrate("up")
	if got, want := pgleaseHistory(t, pool), []migrationRow{{int64(schema.Latest()), false}}; !slices.Equal(got, want) {
		t.Fatalf("%s after migrate up: got %v, want %v", schema.TableName, got, want)
	}
	if got := appSnapshot(t, pool); got != app {
		t.Fatalf("application tables after migrate up:\ngot  %s\nwant %s", got, app)
	}
	if out, want := migrate("version"), strconv.Itoa(int(schema.Latest())); strings.TrimSpace(out) != want {
		t.Fatalf("migrate version: got %q, want %s", out, want)
	}
	if v, dirty, err := schema.Version(ctx, url); err != nil || v != schema.Latest() || dirty {
		t.Fatalf("schema.Version after migrate up: got %d, %v, %v, want %d, false, nil", v, dirty, err, schema.Latest())
	}
	mustAcquire(t, pool, "cli", "h", time.Minute, 1)
	if r := renew(t, pool, "cli", "h", 1, time.Minute); !r.Renewed {
		t.Fatalf("renew after migrate up: got false, want true")
	}

	migrate("down", "-all")
	requirePgleaseGone(t, pool)
	if got := pgleaseHistory(t, pool); len(got) != 0 {
		t.Fatalf("%s after migrate down -all: got %v, want no rows", schema.TableName, got)
	}
	if got := appSnapshot(t, pool); got != app {
		t.Fatalf("application tables after migrate down -all:\ngot  %s\nwant %s", got, app)
	}
}
