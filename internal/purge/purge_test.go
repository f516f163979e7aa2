package purge

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLoopPurges runs the loop against a real database: its first call
// purges at once, and it returns when its context ends.
func TestLoopPurges(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, `SELECT pglease.acquire('gone', 'h', '1 microsecond')`); err != nil {
		t.Fatal(err)
	}
	loopCtx, stop := context.WithCancel(ctx)
	logger, purged := pgtest.LogSignal("removed")
	done := make(chan struct{})
	go func() {
		defer close(done)
		Loop(loopCtx, pool, time.Hour, 0, logger)
	}()
	select {
	case n := <-purged:
		if n != 1 {
			t.Fatalf("the first purge removed %d rows, want 1 (the expired lease)", n)
		}
	case <-ctx.Done():
		t.Fatal("the loop did not purge at once")
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pglease.lease_status WHERE name = 'gone'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("lease 'gone' after the purge: %d rows (%v), want none", n, err)
	}
	stop()
	<-done
}

// fakeDB answers purge_due calls, recording when each came, or fails them.
type fakeDB struct {
	mu    sync.Mutex
	calls []time.Time
	fail  bool
}

func (f *fakeDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("unexpected Exec")
}

func (f *fakeDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	return nil, errors.New("unexpected Query")
}

func (f *fakeDB) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, time.Now())
	if !strings.Contains(sql, "pglease.purge_due") {
		return row{err: errors.New("unexpected query: " + sql)}
	}
	if f.fail {
		return row{err: errors.New("function pglease.purge_due does not exist")}
	}
	return row{n: 1}
}

type row struct {
	n   int64
	err error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	*dest[0].(*int64) = r.n
	return nil
}

// countingHandler counts log records at warn.
type countingHandler struct {
	mu    sync.Mutex
	warns int
}

func (h *countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *countingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		h.warns++
	}
	return nil
}
func (h *countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *countingHandler) WithGroup(string) slog.Handler      { return h }

// TestLoopTiming checks on a fake clock that the loop calls purge_due at
// once and then exactly every interval, and that failures warn once.
func TestLoopTiming(t *testing.T) {
	for _, fail := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			db := &fakeDB{fail: fail}
			h := &countingHandler{}
			ctx, cancel := context.WithCancel(t.Context())
			start := time.Now()
			done := make(chan struct{})
			go func() {
				defer close(done)
				Loop(ctx, db, time.Hour, DefaultFreeFor, slog.New(h))
			}()
			time.Sleep(3*time.Hour + time.Minute)
			cancel()
			<-done
			var got []time.Duration
			for _, c := range db.calls {
				got = append(got, c.Sub(start))
			}
			want := []time.Duration{0, time.Hour, 2 * time.Hour, 3 * time.Hour}
			if len(got) != len(want) {
				t.Fatalf("fail=%v: purge_due called at %v, want at %v", fail, got, want)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("fail=%v: purge_due called at %v, want at %v", fail, got, want)
				}
			}
			if wantWarns := map[bool]int{false: 0, true: 1}[fail]; h.warns != wantWarns {
				t.Fatalf("fail=%v: %d warnings, want %d", fail, h.warns, wantWarns)
			}
		})
	}
}

// recordingHandler records the messages of log records at warn.
type recordingHandler struct {
	mu    sync.Mutex
	warns []string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r.Level >= slog.LevelWarn {
		h.warns = append(h.warns, r.Message)
	}
	return nil
}
func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// TestFailureWarningNamesTheDocs checks that the warning of a failed purge
// names a page that exists and tells how to schedule a purge (pg_cron).
func TestFailureWarningNamesTheDocs(t *testing.T) {
	const page, section = "docs/upgrading.md", "## Bounded tables: purge"
	var h recordingHandler
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			Loop(ctx, &fakeDB{fail: true}, time.Hour, DefaultFreeFor, slog.New(&h))
		}()
		synctest.Wait()
		cancel()
		<-done
	})
	if len(h.warns) != 1 || !strings.Contains(h.warns[0], page+"#bounded-tables-purge") {
		t.Fatalf("warnings: got %q, want one naming %s#bounded-tables-purge", h.warns, page)
	}
	doc, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(doc), "\n"+section+"\n")
	body, _, _ := strings.Cut(after, "\n## ")
	if !ok || !strings.Contains(body, "pg_cron") || !strings.Contains(body, "pglease purge") {
		t.Fatalf("%s: want a section %q that shows pg_cron and pglease purge", page, section)
	}
}
