package pgtest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgserver"
)

func TestMain(m *testing.M) { Main(m) }

func TestNewDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var names []string
	t.Run("use", func(t *testing.T) {
		a, b := NewDatabase(t), NewDatabase(t)
		if a == b {
			t.Fatalf("NewDatabase returned %q twice", pgserver.MaskURL(a))
		}
		connA, connB := connect(ctx, t, a), connect(ctx, t, b)
		for _, conn := range []*pgx.Conn{connA, connB} {
			var name string
			if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatalf("current_database: %v", err)
			}
			if !strings.HasPrefix(name, DatabasePrefix) {
				t.Errorf("database %q lacks the prefix %q", name, DatabasePrefix)
			}
			names = append(names, name)
		}
		if names[0] == names[1] {
			t.Fatalf("both URLs lead to database %q", names[0])
		}

		// The databases are usable and separate.
		if _, err := connA.Exec(ctx, "CREATE TABLE only_in_a (id int)"); err != nil {
			t.Fatalf("create table: %v", err)
		}
		var n int
		err := connB.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_tables WHERE tablename = 'only_in_a'").Scan(&n)
		if err != nil {
			t.Fatalf("query pg_tables: %v", err)
		}
		if n != 0 {
			t.Errorf("table of the first database seen in the second")
		}
		// connA and connB stay open: the drop terminates them.
	})

	if len(names) != 2 {
		t.Fatalf("subtest found %d databases, want 2", len(names))
	}
	admin := connect(ctx, t, AdminURL(t))
	var left []string
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_catalog.pg_database WHERE datname = ANY($1)", names)
	if err != nil {
		t.Fatalf("query pg_database: %v", err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("query pg_database: %v", err)
	}
	if len(left) != 0 {
		t.Errorf("databases %q still exist after the test ended", left)
	}
}

func TestNewDatabaseParallel(t *testing.T) {
	const n = 4
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	for i := range n {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			url := NewDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var name string
			if err := connect(ctx, t, url).QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
				t.Fatalf("current_database: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[name] {
				t.Errorf("database %q given twice", name)
			}
			seen[name] = true
		})
	}
}

func TestAdminURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t.Logf("server: %s", Source(t))
	if Source(t) == "" {
		t.Errorf("Source is empty")
	}
	var canCreate bool
	err := connect(ctx, t, AdminURL(t)).QueryRow(ctx,
		"SELECT rolsuper OR rolcreatedb FROM pg_catalog.pg_roles WHERE rolname = current_user").Scan(&canCreate)
	if err != nil {
		t.Fatalf("query pg_roles: %v", err)
	}
	if !canCreate {
		t.Errorf("the admin role cannot create databases")
	}
}

func TestOptions(t *testing.T) {
	t.Setenv(EnvBinDir, "")
	if got, want := options(), (pgserver.Options{EnvVar: EnvDatabaseURL}); got != want {
		t.Errorf("options() = %+v, want %+v", got, want)
	}
	t.Setenv(EnvBinDir, "/opt/pg13/bin")
	want := pgserver.Options{EnvVar: EnvDatabaseURL, ForceThrowaway: true, BinDir: "/opt/pg13/bin"}
	if got := options(); got != want {
		t.Errorf("options() with %s set = %+v, want %+v", EnvBinDir, got, want)
	}
}

func TestNoServerFails(t *testing.T) {
	noServer := errors.New("no PostgreSQL server available; tried: everything")
	savedFound, savedFind := found, find
	t.Cleanup(func() { found, find = savedFound, savedFind })
	found = &discovery{}
	find = func(context.Context, pgserver.Options) (*pgserver.Server, error) { return nil, noServer }

	for name, f := range map[string]func(testing.TB){
		"NewDatabase": func(tb testing.TB) { NewDatabase(tb) },
		"AdminURL":    func(tb testing.TB) { AdminURL(tb) },
		"Source":      func(tb testing.TB) { Source(tb) },
	} {
		t.Run(name, func(t *testing.T) {
			r := record(f)
			if r.skipped {
				t.Errorf("%s skipped the test, want it failed", name)
			}
			if !r.failed || !strings.Contains(r.msg, noServer.Error()) {
				t.Errorf("%s: failed %v with %q, want a failure showing %q", name, r.failed, r.msg, noServer)
			}
		})
	}
}

func TestMainRequired(t *testing.T) {
	mainCalled.Store(false)
	t.Cleanup(func() { mainCalled.Store(true) })
	r := record(func(tb testing.TB) { NewDatabase(tb) })
	if !r.failed || !strings.Contains(r.msg, "pgtest.Main") {
		t.Errorf("NewDatabase without Main: failed %v with %q, want a failure naming pgtest.Main", r.failed, r.msg)
	}
}

// connect opens a connection closed at the end of the test.
func connect(ctx context.Context, t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect to %s: %v", pgserver.MaskURL(url), err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// recorder is a testing.TB that records how a function ends the test.
type recorder struct {
	testing.TB
	failed, skipped bool
	msg             string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skip(args ...any) {
	r.skipped, r.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

func (r *recorder) SkipNow() {
	r.skipped = true
	runtime.Goexit()
}

// record runs f on its own goroutine with a recorder, and returns the
// recorder once f has returned or ended the test.
func record(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}
