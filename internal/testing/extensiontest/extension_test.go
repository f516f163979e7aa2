package extensiontest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// version is the head extension version, and releases every released one,
// oldest first: sql/versions, which TestExtension checks them against.
const version = "0.4.0"

var releases = []string{"0.1.0", "0.2.0", "0.3.0"}

// callTimeout bounds each database call.
const callTimeout = 30 * time.Second

// repoRoot is the module root, three directories up from this package.
func repoRoot(t *testing.T) string {
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

// serverConfig reads settings of the test server's installation from its
// pg_config view (superusers only).
func serverConfig(t *testing.T, admin *pgx.Conn, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	var v string
	if err := admin.QueryRow(ctx, `SELECT setting FROM pg_catalog.pg_config WHERE name = $1`, name).Scan(&v); err != nil {
		t.Fatalf("read %s from the pg_config view of %s (needs a superuser): %v", name, pgtest.Source(t), err)
	}
	return v
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", pgserver.MaskURL(url), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// catalog lists what schema pglease holds, one line per object with what
// matters for its behaviour and safety (arguments, SECURITY DEFINER, its
// settings, privileges).
func catalog(t *testing.T, q *pgx.Conn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	rows, err := q.Query(ctx, `
		SELECT 'function ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')'
		       || ' returns ' || pg_catalog.pg_get_function_result(p.oid)
		       || ' security_definer=' || p.prosecdef || ' volatile=' || p.provolatile::text
		       || ' config=' || coalesce(pg_catalog.array_to_string(p.proconfig, ','), '')
		       || ' acl=' || coalesce(p.proacl::text, 'default')
		       || ' body=' || pg_catalog.md5(p.prosrc)
		FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pglease'::regnamespace
		UNION ALL
		SELECT 'relation ' || c.relname || ' kind=' || c.relkind::text
		       || ' acl=' || coalesce(c.relacl::text, 'default')
		       || ' options=' || coalesce(pg_catalog.array_to_string(c.reloptions, ','), '')
		FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'pglease'::regnamespace
		UNION ALL
		SELECT 'column ' || c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
		       || ' not_null=' || a.attnotnull
		FROM pg_catalog.pg_attribute AS a JOIN pg_catalog.pg_class AS c ON c.oid = a.attrelid
		WHERE c.relnamespace = 'pglease'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL
		SELECT 'constraint ' || c.conname || ' ' || pg_catalog.pg_get_constraintdef(c.oid)
		FROM pg_catalog.pg_constraint AS c WHERE c.connamespace = 'pglease'::regnamespace
		UNION ALL
		SELECT 'schema acl=' || coalesce(n.nspacl::text, 'default')
		       || ' comment=' || coalesce(pg_catalog.obj_description(n.oid, 'pg_namespace'), '')
		FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pglease'
		ORDER BY 1`)
	if err != nil {
		t.Fatalf("list schema pglease: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("list schema pglease: %v", err)
	}
	return lines
}

func TestExtension(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "sql", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			listed = append(listed, f[0])
		}
	}
	if want := append(slices.Clone(releases), version); !slices.Equal(listed, want) {
		t.Fatalf("sql/versions lists %q, this test knows %q: update version and releases", listed, want)
	}
	pgtest.InstallExtension(t, version)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	url := pgtest.NewDatabase(t)
	pgtest.CreateExtension(t, url)
	conn := connect(t, url)

	t.Run("installed", func(t *testing.T) {
		var (
			ver, schema string
			config      []string
		)
		err := conn.QueryRow(ctx, `SELECT e.extversion, e.extnamespace::regnamespace::text,
				(SELECT pg_catalog.array_agg(c::regclass::text ORDER BY c::regclass::text) FROM pg_catalog.unnest(e.extconfig) AS c)
			FROM pg_catalog.pg_extension AS e WHERE e.extname = 'pglease'`).Scan(&ver, &schema, &config)
		if err != nil {
			t.Fatal(err)
		}
		// Every logged table but the partitioned archive (its months are
		// tables of their own, dumped whole), so that pg_dump keeps its rows: the run
		// ledger's and the shard groups' too (0.3.0), and the sequences
		// of the fence floors and the purge clock (0.3.0); the UNLOGGED
		// tables (waiters, observers, candidates) are rebuilt by the
		// clients.
		want := []string{"pglease.group_members", "pglease.group_shards", "pglease.groups",
			"pglease.history_prefixes", "pglease.history_settings", // 0.4.0
			"pglease.lease_fence_floor", "pglease.leases",
			"pglease.limit_reservations", "pglease.limit_state", "pglease.limits", // 0.4.0
			"pglease.prefixes", "pglease.purge_lock",
			"pglease.purge_turns", "pglease.purged_rows", "pglease.quotas", "pglease.runs", "pglease.slot_fence_floor", "pglease.slot_scopes", "pglease.slots",
			// The tenure history and its counters (0.4.0).
			"pglease.tenures", "pglease.tenures_expired", "pglease.tenures_forced", "pglease.tenures_handed_over",
			"pglease.tenures_purged", "pglease.tenures_released", "pglease.tenures_taken_over"}
		if ver != version || schema != "pglease" || !slices.Equal(config, want) {
			t.Fatalf("pg_extension: got version %q, schema %q, dumped tables %q; want %q, pglease, %q", ver, schema, config, version, want)
		}
		// Every function, table and view belongs to the extension.
		var strays []string
		rows, err := conn.Query(ctx, `
			SELECT o.kind || ' ' || o.name FROM (
				SELECT 'function' AS kind, p.oid::regprocedure::text AS name, 'pg_catalog.pg_proc'::regclass AS classid, p.oid
				FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pglease'::regnamespace
				UNION ALL
				SELECT 'relation', c.oid::regclass::text, 'pg_catalog.pg_class'::regclass, c.oid
				FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'pglease'::regnamespace AND c.relkind IN ('r', 'v')
			) AS o
			WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend AS d
				WHERE d.classid = o.classid AND d.objid = o.oid AND d.deptype = 'e'
				  AND d.refobjid = (SELECT oid FROM pg_catalog.pg_extension WHERE extname = 'pglease'))`)
		if err != nil {
			t.Fatal(err)
		}
		if strays, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(strays) != 0 {
			t.Fatalf("objects of schema pglease outside the extension: %q", strays)
		}
	})

	t.Run("same objects as the migrations", func(t *testing.T) {
		// The migrations themselves, whatever PGLEASE_TEST_SCHEMA says.
		murl := pgtest.NewDatabase(t)
		if err := schema.Up(ctx, murl); err != nil {
			t.Fatalf("migrate up: %v", err)
		}
		migrated := connect(t, murl)
		ext, mig := catalog(t, conn), catalog(t, migrated)
		requireSameCatalog(t, "CREATE EXTENSION pglease", ext, "the migrations", mig)
		if len(ext) < 20 {
			t.Fatalf("schema pglease lists %d objects, want the whole schema:\n%s", len(ext), strings.Join(ext, "\n"))
		}
	})

	for _, released := range releases {
		t.Run("updated from "+released+" equals a fresh install", func(t *testing.T) {
			fresh := catalog(t, conn)
			uurl := pgtest.NewDatabase(t)
			up := connect(t, uurl)
			// As pgtest.CreateExtension does for the fresh install: the
			// update cannot create btree_gist (docs/tenure-history.md).
			mustExec(ctx, t, up, "CREATE EXTENSION IF NOT EXISTS btree_gist")
			mustExec(ctx, t, up, "CREATE EXTENSION pglease VERSION '"+released+"'")
			old := catalog(t, up)
			mustExec(ctx, t, up, "ALTER EXTENSION pglease UPDATE")
			requireSameCatalog(t, "CREATE EXTENSION pglease", fresh, "ALTER EXTENSION pglease UPDATE from "+released, catalog(t, up))

			// Down to the release and up again.
			mustExec(ctx, t, up, "ALTER EXTENSION pglease UPDATE TO '"+released+"'")
			requireSameCatalog(t, "CREATE EXTENSION pglease VERSION '"+released+"'", old, "ALTER EXTENSION pglease UPDATE TO '"+released+"'", catalog(t, up))
			mustExec(ctx, t, up, "ALTER EXTENSION pglease UPDATE")
			requireSameCatalog(t, "CREATE EXTENSION pglease", fresh, "ALTER EXTENSION pglease UPDATE again", catalog(t, up))
		})
	}

	t.Run("leases and slots work", func(t *testing.T) {
		pool := pgtest.Pool(t, url)
		useLeasesAndSlots(ctx, t, pool)
	})

	t.Run("pg_dump keeps the fences", func(t *testing.T) {
		pool := pgtest.Pool(t, url)
		c, err := pglease.New(pool, pglease.Config{Holder: "dumper"})
		if err != nil {
			t.Fatal(err)
		}
		for fence := int64(1); fence <= 2; fence++ {
			l, err := c.TryAcquire(ctx, "dumped", time.Minute)
			if err != nil || l.Fence() != fence {
				t.Fatalf("acquire: got %v, want fence %d", err, fence)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// A history with its archive on, a month archived and a tenure
		// open: the setting's row, the month's partition and the open
		// tenure (written again by the restored lease row) come back too.
		owner := connect(t, url)
		mustExec(ctx, t, owner, `SELECT pglease.history_enable('dumped/', '1 microsecond')`)
		mustExec(ctx, t, owner, `SELECT pglease.history_archive(true)`)
		for fence := int64(1); fence <= 2; fence++ {
			l, err := c.TryAcquire(ctx, "dumped/h", time.Minute)
			if err != nil || l.Fence() != fence {
				t.Fatalf("acquire dumped/h: got %v, want fence %d", err, fence)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		mustExec(ctx, t, owner, `SELECT pglease.purge('1 hour')`)
		if _, err := c.TryAcquire(ctx, "dumped/live", time.Minute); err != nil {
			t.Fatalf("acquire dumped/live: %v", err)
		}
		var archived int
		if err := owner.QueryRow(ctx, `SELECT count(*) FROM pglease.tenures_archive`).Scan(&archived); err != nil || archived != 2 {
			t.Fatalf("archived tenures before the dump: got %d (%v), want 2", archived, err)
		}
		bindir := serverConfig(t, connect(t, pgtest.AdminURL(t)), "BINDIR")
		dump, err := exec.CommandContext(ctx, filepath.Join(bindir, "pg_dump"), "--no-password", "-d", url).Output()
		if err != nil {
			t.Fatalf("%s/pg_dump: %v", bindir, stderrOf(err))
		}
		if !bytes.Contains(dump, []byte("CREATE EXTENSION IF NOT EXISTS pglease")) || !bytes.Contains(dump, []byte("COPY pglease.leases")) {
			t.Fatalf("pg_dump output lacks CREATE EXTENSION pglease or the rows of pglease.leases:\n%s", dump)
		}
		restored := pgtest.NewDatabase(t)
		psql := exec.CommandContext(ctx, filepath.Join(bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "--no-password", "-d", restored)
		psql.Stdin = bytes.NewReader(dump)
		if out, err := psql.CombinedOutput(); err != nil {
			t.Fatalf("restore with psql: %v\n%s", err, out)
		}
		rpool := pgtest.Pool(t, restored)
		rc, err := pglease.New(rpool, pglease.Config{Holder: "restorer"})
		if err != nil {
			t.Fatal(err)
		}
		l, err := rc.TryAcquire(ctx, "dumped", time.Minute)
		if err != nil || l.Fence() != 3 {
			t.Fatalf("acquire after restore: got %v, fence %d, want fence 3 (fences survive the dump)", err, fenceOf(l))
		}
		var tenures, open int
		var wasOn bool
		err = rpool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pglease.tenures('dumped/h', NULL)),
			(SELECT count(*) FROM pglease.tenures('dumped/live', NULL) AS t WHERE t.ended_at IS NULL AND t.holder = 'dumper'),
			(SELECT previous FROM pglease.history_archive(true))`).Scan(&tenures, &open, &wasOn)
		if err != nil || tenures != 2 || open != 1 || !wasOn {
			t.Fatalf("history after restore: got %d archived tenures, %d open, archive on %v (%v); want 2, 1, true",
				tenures, open, wasOn, err)
		}
	})

	t.Run("pglease command", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "pglease")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/pglease")
		build.Dir = repoRoot(t)
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build cmd/pglease: %v\n%s", err, out)
		}
		for _, tc := range []struct {
			args []string
			code int
			want string
		}{
			{[]string{"migrate", "up"}, 0, "installed as extension pglease " + version},
			{[]string{"migrate", "version"}, 0, "0 (extension pglease " + version + ")"},
			{[]string{"migrate", "down", "--yes"}, 1, "DROP EXTENSION pglease"},
			{[]string{"status"}, 0, "job"},
			{[]string{"run", "--lease", "cli", "--", "sh", "-c", `echo "fence=$PGLEASE_FENCE"`}, 0, "fence=1"},
		} {
			cmd := exec.CommandContext(ctx, bin, append(tc.args, "--database", url)...)
			if tc.args[0] == "run" {
				cmd = exec.CommandContext(ctx, bin, append([]string{"run", "--database", url}, tc.args[1:]...)...)
			}
			out, err := cmd.CombinedOutput()
			code := 0
			if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
				code = exitErr.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.code || !strings.Contains(string(out), tc.want) {
				t.Fatalf("pglease %s: got exit %d with %q, want exit %d with %q", strings.Join(tc.args, " "), code, out, tc.code, tc.want)
			}
		}
	})

	t.Run("DROP EXTENSION leaves the empty schema", func(t *testing.T) {
		scratch := pgtest.NewDatabase(t)
		pgtest.CreateExtension(t, scratch)
		sc := connect(t, scratch)
		if _, err := sc.Exec(ctx, `DROP EXTENSION pglease`); err != nil {
			t.Fatal(err)
		}
		var objects int
		if err := sc.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_class WHERE relnamespace = 'pglease'::regnamespace`).Scan(&objects); err != nil {
			t.Fatalf("schema pglease after DROP EXTENSION: %v", err)
		}
		if objects != 0 {
			t.Fatalf("schema pglease after DROP EXTENSION: got %d relations, want 0", objects)
		}
		if _, err := sc.Exec(ctx, `DROP SCHEMA pglease`); err != nil {
			t.Fatalf("DROP SCHEMA pglease after DROP EXTENSION: %v", err)
		}
	})
}

func mustExec(ctx context.Context, t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// requireSameCatalog fails the test, listing the differences, unless the
// catalogs a and b (described by aName and bName) are equal.
func requireSameCatalog(t *testing.T, aName string, a []string, bName string, b []string) {
	t.Helper()
	if slices.Equal(a, b) {
		return
	}
	var msg strings.Builder
	for _, l := range a {
		if !slices.Contains(b, l) {
			fmt.Fprintf(&msg, "\n  only after %s: %s", aName, l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			fmt.Fprintf(&msg, "\n  only after %s: %s", bName, l)
		}
	}
	t.Fatalf("schema pglease differs:%s", msg.String())
}

func fenceOf(l *pglease.Lease) int64 {
	if l == nil {
		return 0
	}
	return l.Fence()
}

// stderrOf adds a failed command's standard error to err.
func stderrOf(err error) error {
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return fmt.Errorf("%w: %s", err, exitErr.Stderr)
	}
	return err
}

// useLeasesAndSlots drives the Go clients through a lease's and a slot's
// life on pool.
func useLeasesAndSlots(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	a, err := pglease.New(pool, pglease.Config{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := pglease.New(pool, pglease.Config{Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := a.TryAcquire(ctx, "job", time.Minute)
	if err != nil || l.Fence() != 1 {
		t.Fatalf("a acquires: got %v, fence %d, want fence 1", err, fenceOf(l))
	}
	var held *pglease.HeldError
	if _, err := b.TryAcquire(ctx, "job", time.Minute); !errors.As(err, &held) || held.Holder != "a" {
		t.Fatalf("b acquires a's lease: got %v, want held by a", err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("renew: %v", err)
	}
	if err := pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(tx pgx.Tx) error { return nil }); err != nil {
		t.Fatalf("fenced write: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	l2, err := b.TryAcquire(ctx, "job", time.Minute)
	if err != nil || l2.Fence() != 2 {
		t.Fatalf("b acquires after the release: got %v, fence %d, want fence 2", err, fenceOf(l2))
	}
	if err := pglease.WithFence(ctx, pool, "job", 1, func(pgx.Tx) error { return nil }); !errors.Is(err, pglease.ErrLeaseLost) {
		t.Fatalf("fenced write with the old fence: got %v, want ErrLeaseLost", err)
	}
	st, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil || len(st) != 1 || st[0].Holder != "b" || st[0].State != pgleaseadmin.Held {
		t.Fatalf("lease status: got %+v, %v, want job held by b", st, err)
	}

	sa, err := runslots.New(pool, runslots.Config{Holder: "a"})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := runslots.New(pool, runslots.Config{Holder: "b"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := sa.TryClaim(ctx, runslots.Want{Scope: "gpu", Capacity: 1}, time.Minute)
	if err != nil || s.Number() != 1 || s.Fence() != 1 {
		t.Fatalf("a claims: got %v, want slot 1 fence 1", err)
	}
	if _, err := sb.TryClaim(ctx, runslots.Want{Scope: "gpu", Capacity: 1}, time.Minute); !errors.Is(err, runslots.ErrFull) {
		t.Fatalf("b claims a full scope: got %v, want ErrFull", err)
	}
	if err := s.Renew(ctx); err != nil {
		t.Fatalf("renew slot: %v", err)
	}
	if err := s.Release(ctx); err != nil {
		t.Fatalf("release slot: %v", err)
	}
	s2, err := sb.TryClaim(ctx, runslots.Want{Scope: "gpu", Capacity: 1}, time.Minute)
	if err != nil || s2.Fence() != 2 {
		t.Fatalf("b claims after the release: got %v, want fence 2", err)
	}
	scopes, err := pgleaseadmin.Scopes(ctx, pool)
	if err != nil || len(scopes) != 1 || scopes[0].InUse != 1 {
		t.Fatalf("scopes: got %+v, %v, want gpu with 1 in use", scopes, err)
	}
}
