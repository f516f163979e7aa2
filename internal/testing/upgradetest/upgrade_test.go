package upgradetest

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
	"github.com/pglease/pglease/runslots"
	"github.com/pglease/pglease/supervisor"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var update = flag.Bool("update", false, "rewrite sql/releases/VERSION.catalog from fresh installs of each released version")

// renewEvery is how often the live traffic renews during an upgrade.
const renewEvery = 20 * time.Millisecond

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// schemaVersions is sql/versions: every version of the schema, oldest
// first, each with its migration number. The last is head, what sql/
// defines; every other one is released, its files frozen.
type schemaVersions struct {
	names     []string
	migration map[string]uint
}

// head returns the version sql/ defines.
func (v schemaVersions) head() string { return v.names[len(v.names)-1] }

// released returns every released version, oldest first.
func (v schemaVersions) released() []string { return v.names[:len(v.names)-1] }

// next returns the version that follows from.
func (v schemaVersions) next(t *testing.T, from string) string {
	t.Helper()
	i := slices.Index(v.names, from)
	if i < 0 || i == len(v.names)-1 {
		t.Fatalf("sql/versions has no version after %q (%q)", from, v.names)
	}
	return v.names[i+1]
}

// versions reads sql/versions. It needs no migration of head: recording a
// release's catalog comes before generating the new head (sql/versions).
func versions(t *testing.T) schemaVersions {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "sql", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v := schemaVersions{migration: map[string]uint{}}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) != 2 {
			t.Fatalf("sql/versions: bad line %q", sc.Text())
		}
		n, err := strconv.ParseUint(fields[1], 10, 32)
		if err != nil {
			t.Fatalf("sql/versions: bad line %q", sc.Text())
		}
		if len(v.names) > 0 && uint(n) <= v.migration[v.head()] {
			t.Fatalf("sql/versions: migration %d of %s does not follow %d of %s", n, fields[0], v.migration[v.head()], v.head())
		}
		v.names = append(v.names, fields[0])
		v.migration[fields[0]] = uint(n)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(v.names) < 2 {
		t.Fatalf("sql/versions lists %q: want a release and a head", v.names)
	}
	return v
}

// headVersions is versions, for tests that install head: head's migration
// must be the newest this build embeds (make generate).
func headVersions(t *testing.T) schemaVersions {
	t.Helper()
	v := versions(t)
	if v.migration[v.head()] != schema.Latest() {
		t.Fatalf("sql/versions ends with head %s at migration %d, but the newest embedded migration is %d: run make generate",
			v.head(), v.migration[v.head()], schema.Latest())
	}
	return v
}

// catalog returns schema pglease's catalog as sql/catalog.sql describes it,
// one "object<TAB>digest" line per object, plus one line per object's
// privileges (which the release catalogs leave out: every upgrade sets them).
func catalog(ctx context.Context, t *testing.T, conn *pgx.Conn, withACL bool) []string {
	t.Helper()
	query, err := os.ReadFile(filepath.Join(repoRoot(t), "sql", "catalog.sql"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, `SELECT c.object || E'\t' || c.digest FROM (`+string(query)+`) AS c ORDER BY c.object COLLATE "C"`)
	if err != nil {
		t.Fatalf("read the catalog of schema pglease: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the catalog of schema pglease: %v", err)
	}
	if !withACL {
		return lines
	}
	rows, err = conn.Query(ctx, `
		SELECT 'acl ' || c.relname || ' ' || coalesce(c.relacl::text, 'default')
		FROM pg_catalog.pg_class AS c WHERE c.relnamespace = 'pglease'::regnamespace
		UNION ALL
		SELECT 'acl ' || p.oid::regprocedure::text || ' ' || coalesce(p.proacl::text, 'default')
		FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pglease'::regnamespace
		UNION ALL
		SELECT 'acl schema ' || coalesce(n.nspacl::text, 'default')
		FROM pg_catalog.pg_namespace AS n WHERE n.nspname = 'pglease'
		ORDER BY 1`)
	if err != nil {
		t.Fatalf("read the privileges of schema pglease: %v", err)
	}
	acl, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("read the privileges of schema pglease: %v", err)
	}
	return append(lines, acl...)
}

func requireSame(t *testing.T, aName string, a []string, bName string, b []string) {
	t.Helper()
	if slices.Equal(a, b) {
		return
	}
	var msg strings.Builder
	for _, l := range a {
		if !slices.Contains(b, l) {
			fmt.Fprintf(&msg, "\n  only in %s: %s", aName, l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			fmt.Fprintf(&msg, "\n  only in %s: %s", bName, l)
		}
	}
	t.Fatalf("schema pglease differs between %s and %s:%s", aName, bName, msg.String())
}

func connect(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestReleasedCatalogs installs each released version afresh and compares
// its catalog with the one it shipped, which the upgrade's catalog check
// expects: a release's files never change, so neither may this.
func TestReleasedCatalogs(t *testing.T) {
	ctx := testContext(t)
	vs := versions(t)
	for _, v := range vs.released() {
		t.Run(v, func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			if err := schema.Goto(ctx, url, vs.migration[v]); err != nil {
				t.Fatalf("migrate to %d: %v", vs.migration[v], err)
			}
			got := catalog(ctx, t, connect(ctx, t, url), false)
			path := filepath.Join(repoRoot(t), "sql", "releases", v+".catalog")
			if *update {
				if err := os.WriteFile(path, []byte(strings.Join(got, "\n")+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			requireSame(t, "sql/releases/"+v+".catalog", want, "a fresh install of "+v, got)
		})
	}
}

// traffic is what runs against a database during its upgrade: leases and
// slots renewed every renewEvery, and a supervisor renewing every 100 ms.
type traffic struct {
	t      *testing.T
	leases []*pglease.Lease
	slots  []*runslots.Slot
	sup    *supervisor.Supervisor

	// downgrade: the traffic runs across a downgrade from head, which may
	// drop columns a newer version added (0.2.0 -> 0.1.0 does); a call
	// already running the newer code at that instant fails once with
	// SQLSTATE 42703 or 42883 (undefined column or function: the table
	// changed under it) and its retry runs the older code. Those failures, and the supervisor's warnings about them, are
	// counted, not failures of the test; a lost lease still is.
	downgrade bool

	mu        sync.Mutex
	renews    int
	tolerated int
	errs      []error
	events    []supervisor.Event
	stop      context.CancelFunc
	stopped   chan struct{}
	supDone   chan error
}

func startTraffic(ctx context.Context, t *testing.T, pool *pgxpool.Pool, downgrade bool) *traffic {
	t.Helper()
	tr := &traffic{t: t, downgrade: downgrade, stopped: make(chan struct{}), supDone: make(chan error, 1)}
	lc, err := pglease.New(pool, pglease.Config{Holder: "upgrade-leases"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		name := fmt.Sprintf("lease-%d", i)
		// Two tenures first, so that the live one is not the first.
		l, err := lc.TryAcquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		first := l.Fence()
		if l, err = lc.TryAcquire(ctx, name, 10*time.Second); err != nil || l.Fence() != first+1 {
			t.Fatalf("acquire %s again: %v, want fence %d", name, err, first+1)
		}
		tr.leases = append(tr.leases, l)
	}
	sc, err := runslots.New(pool, runslots.Config{Holder: "upgrade-slots"})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []string{"gpu", "tenant"} {
		s, err := sc.TryClaim(ctx, runslots.Want{Scope: scope, Capacity: 3}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tr.slots = append(tr.slots, s)
	}

	acquired := make(chan struct{})
	tr.sup, err = supervisor.NewLease(pool, "upgrade-leader", supervisor.Config{
		TTL:           2 * time.Second,
		RenewInterval: 100 * time.Millisecond,
		Holder:        "upgrade-supervisor",
		// Schema 0.1.0 has no purge_due: its warning would count as a failure.
		PurgeEvery: -1,
		Logger:     slog.New(&warnings{tr: tr}),
		Observer: func(e supervisor.Event) {
			tr.mu.Lock()
			tr.events = append(tr.events, e)
			tr.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	tr.stop = stop
	go func() {
		var once sync.Once // a tenure lost under load starts the workload again
		tr.supDone <- tr.sup.Run(runCtx, func(ctx context.Context) error {
			once.Do(func() { close(acquired) })
			<-ctx.Done()
			return nil
		})
	}()
	select {
	case <-acquired:
	case <-ctx.Done():
		t.Fatal("the supervisor did not take its lease")
	}

	go func() {
		defer close(tr.stopped)
		tick := time.NewTicker(renewEvery)
		defer tick.Stop()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-tick.C:
			}
			for _, l := range tr.leases {
				tr.record(fmt.Sprintf("renew lease %s fence %d", l.Name(), l.Fence()), l.Renew(runCtx), runCtx)
			}
			for _, s := range tr.slots {
				tr.record(fmt.Sprintf("renew slot %s/%d fence %d", s.Scope(), s.Number(), s.Fence()), s.Renew(runCtx), runCtx)
			}
		}
	}()
	return tr
}

// warnings is the supervisor's log handler: a record at level Warn or
// above (a failed renewal, a retry) counts as a failure of the upgrade.
type warnings struct{ tr *traffic }

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.tr.mu.Lock()
	defer w.tr.mu.Unlock()
	if w.tr.downgrade {
		w.tr.tolerated++
		return nil
	}
	w.tr.errs = append(w.tr.errs, fmt.Errorf("supervisor logged %s: %s", r.Level, r.Message))
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

func (tr *traffic) record(what string, err error, ctx context.Context) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		tr.renews++
	case ctx.Err() != nil:
	case tr.downgrade && errors.As(err, &pgErr) && (pgErr.Code == "42703" || pgErr.Code == "42883"):
		tr.tolerated++
	default:
		tr.errs = append(tr.errs, fmt.Errorf("%s: %w", what, err))
	}
}

// check stops the traffic and fails the test if any renewal failed or the
// supervisor lost its lease; then it checks that every tenure still renews
// with its old fence and that the next grant of each gets fence + 1.
func (tr *traffic) check(ctx context.Context, pool *pgxpool.Pool) {
	t := tr.t
	t.Helper()
	if !tr.sup.IsLeader() {
		t.Errorf("the supervisor is no longer leader after the upgrade")
	}
	supFence := tr.sup.Fence()
	tr.stop()
	<-tr.stopped
	if err := <-tr.supDone; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("supervisor: %v", err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, err := range tr.errs {
		t.Errorf("renewal failed during the schema change: %v", err)
	}
	acquired := 0
	for _, e := range tr.events {
		switch e.Kind {
		case supervisor.EventLost, supervisor.EventStuck:
			t.Errorf("supervisor event during the schema change: %s (fence %d): %v", e.Kind, e.Fence, e.Err)
		case supervisor.EventAcquired:
			acquired++
		}
	}
	if acquired != 1 {
		t.Errorf("the supervisor acquired %d times, want once: it lost its lease", acquired)
	}
	if tr.renews == 0 {
		t.Fatalf("no renewal ran during the schema change")
	}
	t.Logf("%d renewals during the schema change, none failed (%d calls cut off by the downgrade's drop of a column, retried); supervisor kept fence %d",
		tr.renews, tr.tolerated, supFence)

	lc, err := pglease.New(pool, pglease.Config{Holder: "upgrade-next"})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range tr.leases {
		if err := l.Renew(ctx); err != nil {
			t.Fatalf("renew %s with its old fence %d after the upgrade: %v", l.Name(), l.Fence(), err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release %s after the upgrade: %v", l.Name(), err)
		}
		next, err := lc.TryAcquire(ctx, l.Name(), time.Minute)
		if err != nil || next.Fence() != l.Fence()+1 {
			t.Fatalf("next acquire of %s: got %v, fence %d, want fence %d", l.Name(), err, fenceOf(next), l.Fence()+1)
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := runslots.New(pool, runslots.Config{Holder: "upgrade-next"})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range tr.slots {
		if err := s.Renew(ctx); err != nil {
			t.Fatalf("renew slot %s/%d with its old fence %d after the upgrade: %v", s.Scope(), s.Number(), s.Fence(), err)
		}
		if err := s.Release(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := sc.TryClaim(ctx, runslots.Want{Scope: s.Scope(), Capacity: 1}, time.Minute)
		if err != nil || next.Number() != s.Number() || next.Fence() != s.Fence()+1 {
			t.Fatalf("next claim of %s: got %v, want slot %d with fence %d", s.Scope(), err, s.Number(), s.Fence()+1)
		}
		if err := next.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func fenceOf(l *pglease.Lease) int64 {
	if l == nil {
		return 0
	}
	return l.Fence()
}

func requireVersion(ctx context.Context, t *testing.T, conn *pgx.Conn, want string) {
	t.Helper()
	var got string
	if err := conn.QueryRow(ctx, `SELECT pglease.version()`).Scan(&got); err != nil || got != want {
		t.Fatalf("pglease.version(): got %q, %v, want %q", got, err, want)
	}
}

// build builds a command of this module (or, with modfile, of tools/) into
// a temporary directory.
func build(ctx context.Context, t *testing.T, out, pkg string, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), out)
	cmd := exec.CommandContext(ctx, "go", append(append([]string{"build"}, args...), "-o", bin, pkg)...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	return bin
}

// migrateCLIURL turns a postgres:// URL into what the migrate CLI takes:
// scheme pgx5 and pglease's own history table.
func migrateCLIURL(t *testing.T, connString string) string {
	t.Helper()
	u, err := url.Parse(connString)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("the test server's URL must be a postgres:// URL for the migrate CLI, got a DSN (%v)", err)
	}
	u.Scheme = "pgx5"
	q := u.Query()
	q.Set("x-migrations-table", schema.TableName)
	u.RawQuery = q.Encode()
	return u.String()
}

func run(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestUpgradeUnderTraffic upgrades a database at each released version to
// head three ways while its tenures renew (the stock migrate CLI, pglease
// migrate up, ALTER EXTENSION pglease UPDATE, which goes through every
// version between), compares the upgraded catalog with a fresh install of
// head, then goes down to the release under traffic (through every version
// between) and up again.
func TestUpgradeUnderTraffic(t *testing.T) {
	ctx := testContext(t)
	vs := headVersions(t)
	head := vs.head()

	// Fresh installs of head to compare with: through the migrations, and
	// as the extension.
	freshURL := pgtest.NewDatabase(t)
	if err := schema.Up(ctx, freshURL); err != nil {
		t.Fatal(err)
	}
	fresh := catalog(ctx, t, connect(ctx, t, freshURL), true)
	pgtest.InstallExtension(t, head)
	freshExtURL := pgtest.NewDatabase(t)
	freshExtConn := connect(ctx, t, freshExtURL)
	if _, err := freshExtConn.Exec(ctx, "CREATE EXTENSION pglease"); err != nil {
		t.Fatal(err)
	}
	freshExt := catalog(ctx, t, freshExtConn, true)

	migrateBin := build(ctx, t, "migrate", "github.com/golang-migrate/migrate/v4/cmd/migrate",
		"-modfile="+filepath.Join(repoRoot(t), "tools", "go.mod"), "-tags", "pgx5")
	pgleaseBin := build(ctx, t, "pglease", "./cmd/pglease")

	migrateTo := func(t *testing.T, url, version string) {
		t.Helper()
		if err := schema.Goto(ctx, url, vs.migration[version]); err != nil {
			t.Fatalf("migrate to %s (migration %d): %v", version, vs.migration[version], err)
		}
	}
	type upgrade struct {
		name    string
		fresh   []string // the catalog of a fresh install of head, the same way
		install func(t *testing.T, url, from string)
		upgrade func(t *testing.T, url, from string)
		down    func(t *testing.T, url, from string)
	}
	upgrades := []upgrade{{
		name:    "migrate CLI",
		fresh:   fresh,
		install: migrateTo,
		upgrade: func(t *testing.T, dbURL, _ string) {
			run(ctx, t, migrateBin, "-path", filepath.Join(repoRoot(t), "migrations"), "-database", migrateCLIURL(t, dbURL), "up")
		},
		down: migrateTo,
	}, {
		name:    "pglease migrate up",
		fresh:   fresh,
		install: migrateTo,
		upgrade: func(t *testing.T, url, from string) {
			out := run(ctx, t, pgleaseBin, "migrate", "up", "--database", url)
			if want := fmt.Sprintf("from version %d to %d", vs.migration[from], schema.Latest()); !strings.Contains(out, want) {
				t.Fatalf("pglease migrate up: got %q, want it to say %q", out, want)
			}
		},
		down: migrateTo,
	}, {
		name:  "ALTER EXTENSION",
		fresh: freshExt,
		install: func(t *testing.T, url, from string) {
			if _, err := connect(ctx, t, url).Exec(ctx, "CREATE EXTENSION pglease VERSION '"+from+"'"); err != nil {
				t.Fatal(err)
			}
		},
		upgrade: func(t *testing.T, url, _ string) {
			// Held open across a few of the supervisor's renewals, which
			// run on the old definitions until the commit.
			conn := connect(ctx, t, url)
			if _, err := conn.Exec(ctx, "BEGIN; ALTER EXTENSION pglease UPDATE; SELECT pg_sleep(0.3); COMMIT"); err != nil {
				t.Fatal(err)
			}
		},
		down: func(t *testing.T, url, from string) {
			if _, err := connect(ctx, t, url).Exec(ctx, "ALTER EXTENSION pglease UPDATE TO '"+from+"'"); err != nil {
				t.Fatal(err)
			}
		},
	}}
	for _, from := range vs.released() {
		for _, u := range upgrades {
			t.Run(from+"/"+u.name, func(t *testing.T) {
				url := pgtest.NewDatabase(t)
				u.install(t, url, from)
				conn := connect(ctx, t, url)
				old := catalog(ctx, t, conn, true)
				pool := pgtest.Pool(t, url)

				endSlotTenures(ctx, t, conn, from)
				tr := startTraffic(ctx, t, pool, false)
				u.upgrade(t, url, from)
				// A few more rounds of renewals on the new schema.
				waitRenewals(ctx, t, tr, 15*(len(tr.leases)+len(tr.slots)))
				requireSlotCounts(ctx, t, conn)
				requireUnits(ctx, t, conn)
				tr.check(ctx, pool)
				requireVersion(ctx, t, conn, head)
				requireSame(t, "a fresh install of "+head, u.fresh, "an upgrade from "+from, catalog(ctx, t, conn, true))

				// Down to the release under traffic again, then up again.
				tr = startTraffic(ctx, t, pool, true)
				u.down(t, url, from)
				waitRenewals(ctx, t, tr, 15*(len(tr.leases)+len(tr.slots)))
				tr.check(ctx, pool)
				requireSame(t, "a fresh install of "+from, old, "a downgrade from "+head, catalog(ctx, t, conn, true))
				u.upgrade(t, url, from)
				requireVersion(ctx, t, conn, head)
				requireSame(t, "a fresh install of "+head, u.fresh, "an upgrade from "+from+" again", catalog(ctx, t, conn, true))
			})
		}
	}
}

// endSlotTenures leaves, on the released schema from, a slot tenure that
// expired in scope "ended-expired" and one that was released in
// "ended-released", and two live ones of capacity 4 in "units" (see
// requireUnits).
func endSlotTenures(ctx context.Context, t *testing.T, conn *pgx.Conn, from string) {
	t.Helper()
	if _, err := conn.Exec(ctx, `SELECT pglease.claim_slot('ended-expired', 'old', 1, interval '1 millisecond');
		SELECT pglease.release_slot('ended-released', r.slot, 'old', r.fence)
		FROM pglease.claim_slot('ended-released', 'old', 1, interval '1 minute') AS r;
		SELECT pglease.claim_slot('units', 'old-' || i, 4, interval '1 hour') FROM generate_series(1, 2) AS i`); err != nil {
		t.Fatalf("end slot tenures on %s: %v", from, err)
	}
}

// requireSlotCounts checks the slot counters the upgrade filled in: each
// scope counts exactly its counted rows and every live tenure is counted, so
// a claim at capacity 1 is refused beside a tenure claimed before the
// upgrade and still live, and granted where the tenure from before expired
// or was released.
func requireSlotCounts(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	var wrong []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(sc.scope ORDER BY sc.scope), '{}')
		FROM pglease.slot_scopes AS sc
		WHERE sc.counted <> (SELECT count(*) FROM pglease.slots AS s WHERE s.scope = sc.scope AND s.counted)
		   OR EXISTS (SELECT 1 FROM pglease.slots AS s
		              WHERE s.scope = sc.scope AND s.expires_at > clock_timestamp() AND NOT s.counted)`).Scan(&wrong); err != nil {
		t.Fatal(err)
	}
	if len(wrong) > 0 {
		t.Errorf("after the upgrade, the slot counters of scopes %v are not their live holders", wrong)
	}
	for _, c := range []struct {
		scope   string
		claimed bool
	}{{"gpu", false}, {"ended-expired", true}, {"ended-released", true}} {
		var claimed bool
		var inUse int32
		if err := conn.QueryRow(ctx, `SELECT claimed, in_use FROM pglease.claim_slot($1, 'upgrade-probe', 1, interval '1 minute')`,
			c.scope).Scan(&claimed, &inUse); err != nil {
			t.Fatal(err)
		}
		if claimed != c.claimed || inUse != 1 {
			t.Errorf("claim at capacity 1 in %s after the upgrade: got claimed %v, in_use %d; want claimed %v, in_use 1",
				c.scope, claimed, inUse, c.claimed)
		}
	}
}

// requireUnits checks that the two tenures claimed in scope "units" before
// the upgrade count one unit each after it: of capacity 4, a claim of 3
// units is refused with 2 in use, one of 2 units is granted (4 in use),
// then a 1-unit claim is refused; the two old tenures renew and release.
func requireUnits(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for _, c := range []struct {
		holder  string
		units   int
		claimed bool
		inUse   int32
	}{{"three", 3, false, 2}, {"two", 2, true, 4}, {"one", 1, false, 4}} {
		var claimed bool
		var inUse int32
		if err := conn.QueryRow(ctx, `SELECT claimed, in_use FROM pglease.claim_slot('units', $1, 4, interval '1 minute', $2)`,
			c.holder, c.units).Scan(&claimed, &inUse); err != nil {
			t.Fatal(err)
		}
		if claimed != c.claimed || inUse != c.inUse {
			t.Errorf("claim of %d units of capacity 4 beside 2 tenures from before the upgrade: got claimed %v, in_use %d; want claimed %v, in_use %d",
				c.units, claimed, inUse, c.claimed, c.inUse)
		}
	}
	var released int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE n.renewed AND r.released)
		FROM pglease.slots AS s,
		LATERAL pglease.renew_slot(s.scope, s.slot, s.holder, s.fence, interval '1 minute') AS n,
		LATERAL pglease.release_slot(s.scope, s.slot, s.holder, s.fence) AS r
		WHERE s.scope = 'units' AND s.holder LIKE 'old-%'`).Scan(&released); err != nil || released != 2 {
		t.Errorf("renew and release of the 2 tenures from before the upgrade: %d of 2 (%v)", released, err)
	}
}

// waitRenewals waits until n more renewals of tr have succeeded.
func waitRenewals(ctx context.Context, t *testing.T, tr *traffic, n int) {
	t.Helper()
	tr.mu.Lock()
	want := tr.renews + n
	tr.mu.Unlock()
	tick := time.NewTicker(renewEvery)
	defer tick.Stop()
	for {
		tr.mu.Lock()
		got, failed := tr.renews, len(tr.errs)
		tr.mu.Unlock()
		if got >= want || failed > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %d renewals after the upgrade: %d so far", n, got-want+n)
		case <-tick.C:
		}
	}
}

// TestUpgradeRefusesHandChangedSchema changes the schema of each released
// version by hand and checks that the upgrade from it stops naming every
// difference and changes nothing, through pglease's migrations (which leave
// the history clean) and through the upgrade script itself (as the stock
// CLI and psql run it).
func TestUpgradeRefusesHandChangedSchema(t *testing.T) {
	ctx := testContext(t)
	vs := headVersions(t)
	for _, from := range vs.released() {
		t.Run(from, func(t *testing.T) {
			next := vs.next(t, from)
			url := pgtest.NewDatabase(t)
			if err := schema.Goto(ctx, url, vs.migration[from]); err != nil {
				t.Fatal(err)
			}
			conn := connect(ctx, t, url)
			for _, change := range []string{
				`CREATE INDEX my_index ON pglease.leases (expires_at)`,
				`ALTER TABLE pglease.slots ADD COLUMN note text`,
				`CREATE OR REPLACE FUNCTION pglease._check_fence(p_func text, p_fence bigint) RETURNS void
					LANGUAGE plpgsql AS $$BEGIN END$$`,
				`DROP VIEW pglease.slot_scope_status`,
			} {
				if _, err := conn.Exec(ctx, change); err != nil {
					t.Fatalf("%s: %v", change, err)
				}
			}
			before := catalog(ctx, t, conn, true)
			wants := []string{
				"cannot upgrade schema pglease from " + from + " to " + next,
				fmt.Sprintf("%d object(s) differ", differing(t, from, catalog(ctx, t, conn, false))),
				"index my_index (not part of pglease " + from + ")",
				"column slots.note (not part of pglease " + from + ")",
				"function _check_fence(p_func text, p_fence bigint) (changed)",
				"relation slot_scope_status (missing)",
			}

			err := schema.Up(ctx, url)
			for _, want := range append(wants, "nothing changed", "hint: The schema was changed by hand") {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("schema.Up on a changed schema: got %v, want an error saying %q", err, want)
				}
			}
			if v, dirty, err := schema.Version(ctx, url); err != nil || v != vs.migration[from] || dirty {
				t.Fatalf("version after the refused upgrade: got %d, dirty %v, %v; want %d, clean", v, dirty, err, vs.migration[from])
			}
			requireSame(t, "the changed schema", before, "after the refused upgrade", catalog(ctx, t, conn, true))

			// The upgrade file itself, as psql or the migrate CLI runs it.
			up, err := filepath.Glob(filepath.Join(repoRoot(t), "migrations", fmt.Sprintf("%06d_*.up.sql", vs.migration[next])))
			if err != nil || len(up) != 1 {
				t.Fatalf("the upgrade from %s: %q, %v", from, up, err)
			}
			script, err := os.ReadFile(up[0])
			if err != nil {
				t.Fatal(err)
			}
			_, err = conn.Exec(ctx, string(script))
			for _, want := range append(wants, "This upgrade changed nothing") {
				var pgErr *pgconn.PgError
				if !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message+" "+pgErr.Hint, want) {
					t.Fatalf("%s on a changed schema: got %v, want an error saying %q", filepath.Base(up[0]), err, want)
				}
			}
			if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil { // the script's own BEGIN failed half-way
				t.Fatal(err)
			}
			requireSame(t, "the changed schema", before, "after the refused upgrade script", catalog(ctx, t, conn, true))
		})
	}
}

// differing counts the objects of a catalog (lines "object<TAB>digest")
// that are missing from, added to or changed from the one version shipped.
func differing(t *testing.T, version string, got []string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "sql", "releases", version+".catalog"))
	if err != nil {
		t.Fatal(err)
	}
	digests := func(lines []string) map[string]string {
		m := map[string]string{}
		for _, l := range lines {
			object, digest, _ := strings.Cut(l, "\t")
			m[object] = digest
		}
		return m
	}
	want, have := digests(strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")), digests(got)
	n := 0
	for object, digest := range want {
		if d, ok := have[object]; !ok || d != digest {
			n++
		}
	}
	for object := range have {
		if _, ok := want[object]; !ok {
			n++
		}
	}
	return n
}

// TestClientOnReleasedSchema runs this build's clients against each
// released schema, as during a rollout that upgrades the clients first:
// what the release had works, what it lacks fails with an error that says
// to migrate.
func TestClientOnReleasedSchema(t *testing.T) {
	ctx := testContext(t)
	vs := versions(t)
	for _, from := range vs.released() {
		t.Run(from, func(t *testing.T) {
			url := pgtest.NewDatabase(t)
			if err := schema.Goto(ctx, url, vs.migration[from]); err != nil {
				t.Fatal(err)
			}
			pool := pgtest.Pool(t, url)
			lc, err := pglease.New(pool, pglease.Config{Holder: "new-client"})
			if err != nil {
				t.Fatal(err)
			}
			l, err := lc.TryAcquire(ctx, "rollout", time.Minute)
			if err != nil {
				t.Fatalf("acquire on schema %s: %v", from, err)
			}
			// A refusal names the holder and how long it has left.
			other, err := pglease.New(pool, pglease.Config{Holder: "other-client"})
			if err != nil {
				t.Fatal(err)
			}
			_, err = other.TryAcquire(ctx, "rollout", time.Minute)
			if held, ok := errors.AsType[*pglease.HeldError](err); !ok || held.Holder != "new-client" || held.Fence != l.Fence() ||
				held.ExpiresIn <= 0 || held.ExpiresIn > time.Minute {
				t.Fatalf("acquire of a held lease on schema %s: got %v, want a *HeldError naming new-client, fence %d, within a minute",
					from, err, l.Fence())
			}
			if err := l.Renew(ctx); err != nil {
				t.Fatalf("renew on schema %s: %v", from, err)
			}
			if err := pglease.WithFence(ctx, pool, l.Name(), l.Fence(), func(pgx.Tx) error { return nil }); err != nil {
				t.Fatalf("fenced write on schema %s: %v", from, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release on schema %s: %v", from, err)
			}
			sc, err := runslots.New(pool, runslots.Config{Holder: "new-client"})
			if err != nil {
				t.Fatal(err)
			}
			s, err := sc.TryClaim(ctx, runslots.Want{Scope: "rollout", Capacity: 2}, time.Minute)
			if err != nil {
				t.Fatalf("claim on schema %s: %v", from, err)
			}
			if err := s.Release(ctx); err != nil {
				t.Fatal(err)
			}
			// pglease.purge is new in 0.2.0.
			_, err = pgleaseadmin.Purge(ctx, pool, time.Hour)
			if from == "0.1.0" {
				if err == nil || !strings.Contains(err.Error(), "apply the migrations") {
					t.Fatalf("purge on schema %s (which has none): got %v, want an error saying to apply the migrations", from, err)
				}
			} else if err != nil {
				t.Fatalf("purge on schema %s: %v", from, err)
			}
		})
	}
}
