package supervisor_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// trackingListener is a pool that keeps the backend PIDs of the LISTEN
// connections it opened: whether they are open is asked of the server,
// not of the connections, which their readers use meanwhile.
type trackingListener struct {
	*pgxpool.Pool
	mu   sync.Mutex
	pids []uint32
}

func (l *trackingListener) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.Config().ConnConfig.Copy())
	if err == nil {
		l.mu.Lock()
		l.pids = append(l.pids, conn.PgConn().PID())
		l.mu.Unlock()
	}
	return conn, err
}

// open returns how many of the connections the server still has, waiting
// up to 10s for it to become want (a closed connection's backend exits
// after the client closed it); open < 0 asks for no wait.
func (l *trackingListener) open(t *testing.T, want int) (open, all int) {
	t.Helper()
	l.mu.Lock()
	pids := append([]uint32(nil), l.pids...)
	l.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := l.QueryRow(context.Background(),
			`SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if want < 0 || open == want || time.Now().After(deadline) {
			return open, len(pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListenConnectionClosed: a leader listens on at most one connection
// (the standby's: its tenure listens for release requests from before
// the grant), and its LISTEN connection is closed when Run returns,
// leading or standing by, instead of lingering for DefaultNotifyLinger.
func TestListenConnectionClosed(t *testing.T) {
	t.Parallel()
	db := &trackingListener{Pool: pgtest.NewDirectPool(t)}
	owner, err := pglease.New(db.Pool, pglease.Config{Holder: "owner", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, leads := range []bool{true, false} {
		name := fmt.Sprintf("closed/%v", leads)
		held, err := owner.TryAcquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		seen := make(chan struct{}, 1)
		s := newSupervisor(t, db, name, supervisor.Config{Observer: func(e supervisor.Event) {
			if e.Kind == supervisor.EventLeaderSeen {
				seen <- struct{}{}
			}
		}})
		rctx, stop := context.WithCancel(ctx)
		leading := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- s.Run(rctx, func(wctx context.Context) error {
				// A leader of a lease listens for release requests
				// (docs/leadership.md), on the standby's connection.
				if open, all := db.open(t, -1); open > 1 {
					t.Errorf("leading with %d of %d LISTEN connections open, want at most 1", open, all)
				}
				close(leading)
				<-wctx.Done()
				return nil
			})
		}()
		select {
		case <-seen:
		case <-time.After(30 * time.Second):
			t.Fatal("the supervisor did not stand by within 30s")
		}
		if open, _ := db.open(t, 1); open != 1 {
			t.Fatalf("standing by with %d LISTEN connections open, want 1", open)
		}
		if leads {
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-leading:
			case <-time.After(30 * time.Second):
				t.Fatal("the standby did not lead within 30s of the release")
			}
		}
		stop()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
		if open, all := db.open(t, 0); open != 0 {
			t.Fatalf("after Run returned (led: %v): %d of %d LISTEN connections open, want 0", leads, open, all)
		}
	}
}
