package supervisor_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/supervisor"
)

// scriptDB grants the lease once (fence 1; later acquires are refused, the
// holder's expiry an hour away), answers renewals with renew, and
// releases. The timer logic under test runs on a synctest bubble's clock.
type scriptDB struct {
	renew func(ctx context.Context) (bool, error)

	mu      sync.Mutex
	granted bool
}

var errScript = errors.New("scriptDB: query not scripted")

func (d *scriptDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errScript
}
func (d *scriptDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errScript }
func (d *scriptDB) Begin(context.Context) (pgx.Tx, error)                   { return nil, errScript }
func (d *scriptDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	panic("scriptDB: SendBatch not scripted")
}

func (d *scriptDB) QueryRow(ctx context.Context, sql string, _ ...any) pgx.Row {
	switch {
	case strings.Contains(sql, "name: LeaseAcquire "), strings.Contains(sql, "name: LeaseAcquireValue "):
		d.mu.Lock()
		defer d.mu.Unlock()
		first := !d.granted
		d.granted = true
		return row(func(dest []any) {
			*dest[0].(*bool), *dest[1].(*int64) = first, 1
			*dest[2].(*string), *dest[4].(*time.Duration) = "other", time.Hour
		})
	case strings.Contains(sql, "name: LeaseRenew "), strings.Contains(sql, "name: LeaseRenewAsked "):
		ok, err := d.renew(ctx)
		if err != nil {
			return errRow{err}
		}
		return row(func(dest []any) { *dest[0].(*bool) = ok })
	case strings.Contains(sql, "name: LeaseRelease"):
		return row(func(dest []any) { *dest[0].(*bool) = true })
	}
	return errRow{errScript}
}

// row scans by calling its function with the destinations.
type row func(dest []any)

func (r row) Scan(dest ...any) error { r(dest); return nil }

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// stuckRun runs a supervisor (TTL 1s: renewals every 333ms, the local
// deadline 900ms after each) on d whose workload ignores its context until
// the returned release is called; started closes when the workload starts.
// Call stop to end Run once the workload has been released.
func stuckRun(t *testing.T, d *scriptDB) (s *supervisor.Supervisor, started <-chan struct{}, release, stop func()) {
	s = newSupervisor(t, d, "stuck", supervisor.Config{TTL: time.Second, PurgeEvery: -1})
	start, free := make(chan struct{}), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.Run(ctx, func(context.Context) error {
			close(start)
			<-free // ignores its context
			return nil
		})
	}()
	return s, start, func() { close(free) }, func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	}
}

// healthz returns what s.HealthHandler(grace) answers.
func healthz(s *supervisor.Supervisor, grace time.Duration) (int, string) {
	w := httptest.NewRecorder()
	s.HealthHandler(grace).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	return w.Code, w.Body.String()
}

// TestHealthyStuckPastDeadline: renewals hang, so the local deadline
// (900ms) passes and the workload is cancelled; it does not return.
// Healthy stays nil for grace after the deadline, then reports it, until
// the workload returns.
func TestHealthyStuckPastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptDB{renew: func(ctx context.Context) (bool, error) {
			<-ctx.Done()
			return false, ctx.Err()
		}}
		s, started, release, stop := stuckRun(t, d)
		<-started
		const grace = 200 * time.Millisecond
		if err := s.Healthy(grace); err != nil {
			t.Fatalf("Healthy while leading on time = %v, want nil", err)
		}
		time.Sleep(900*time.Millisecond + grace)
		if err := s.Healthy(grace); err != nil {
			t.Fatalf("Healthy at the deadline + grace = %v, want nil", err)
		}
		if code, body := healthz(s, grace); code != http.StatusOK || body != "ok\n" {
			t.Fatalf("HealthHandler at the deadline + grace = %d %q, want 200 \"ok\\n\"", code, body)
		}
		time.Sleep(time.Millisecond)
		err := s.Healthy(grace)
		const want = `supervisor: the workload of lease "stuck" (fence 1) has not returned 201ms after its tenure ended: `
		if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "local deadline passed") {
			t.Fatalf("Healthy 1ms after the deadline + grace = %v, want %q and the deadline as the cause", err, want)
		}
		code, body := healthz(s, grace)
		if code != http.StatusServiceUnavailable || body != err.Error()+"\n" || strings.Count(body, "\n") != 1 {
			t.Fatalf("HealthHandler = %d %q, want 503 and Healthy's error on one line", code, body)
		}
		release()
		synctest.Wait()
		if err := s.Healthy(0); err != nil {
			t.Fatalf("Healthy once the workload returned = %v, want nil (standing by)", err)
		}
		stop()
	})
}

// TestHealthyStuckAfterRefusal: the first renewal (at 333ms) is refused,
// so the tenure is over before its deadline; a workload still running
// grace later is reported.
func TestHealthyStuckAfterRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptDB{renew: func(context.Context) (bool, error) { return false, nil }}
		s, started, release, stop := stuckRun(t, d)
		<-started
		const grace = 100 * time.Millisecond
		time.Sleep(333*time.Millisecond + grace)
		synctest.Wait()
		if err := s.Healthy(grace); err != nil {
			t.Fatalf("Healthy at the refusal + grace = %v, want nil", err)
		}
		time.Sleep(time.Millisecond)
		if err := s.Healthy(grace); err == nil || !strings.Contains(err.Error(), "101ms after its tenure ended") ||
			!strings.Contains(err.Error(), "renewal refused") {
			t.Fatalf("Healthy 1ms after the refusal + grace = %v, want the refusal 101ms ago", err)
		}
		release()
		synctest.Wait()
		if err := s.Healthy(0); err != nil {
			t.Fatalf("Healthy once the workload returned = %v, want nil", err)
		}
		stop()
	})
}

// TestHealthyOnShutdown: a workload winding down after Run's context
// ended is healthy, however long it takes: the lease is renewed meanwhile.
func TestHealthyOnShutdown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := &scriptDB{renew: func(context.Context) (bool, error) { return true, nil }}
		s := newSupervisor(t, d, "slow", supervisor.Config{TTL: time.Second, PurgeEvery: -1})
		started, free := make(chan struct{}), make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- s.Run(ctx, func(context.Context) error {
				close(started)
				<-free
				return nil
			})
		}()
		<-started
		cancel()
		time.Sleep(10 * time.Second)
		if err := s.Healthy(0); err != nil {
			t.Fatalf("Healthy while the workload winds down on shutdown = %v, want nil", err)
		}
		close(free)
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	})
}
