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

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/supervisor"
)

// trackingListener is a pool that keeps the LISTEN connections it opened.
type trackingListener struct {
	*pgxpool.Pool
	mu    sync.Mutex
	conns []*pgx.Conn
}

func (l *trackingListener) ListenConn(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, l.Config().ConnConfig.Copy())
	if err == nil {
		l.mu.Lock()
		l.conns = append(l.conns, conn)
		l.mu.Unlock()
	}
	return conn, err
}

// open returns how many of the connections are open.
func (l *trackingListener) open() (open, all int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		if !c.IsClosed() {
			open++
		}
	}
	return open, len(l.conns)
}

// TestListenConnectionClosed: a standby's LISTEN connection is closed as
// soon as it leads (a leader waits for nothing but release requests, on
// at most one connection), and when Run returns
// while standing by, instead of lingering for DefaultNotifyLinger.
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
		s := newSupervisor(t, db, supervisor.Config{Name: name, Observer: func(e supervisor.Event) {
			if e.Kind == supervisor.EventLeaderSeen {
				seen <- struct{}{}
			}
		}})
		rctx, stop := context.WithCancel(ctx)
		leading := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- s.Run(rctx, func(wctx context.Context) error {
				// The standby's is closed; a leader of a lease opens one to
				// observe its lease for release requests (docs/leadership.md).
				if open, all := db.open(); open > 1 {
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
		if open, _ := db.open(); open != 1 {
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
		if open, all := db.open(); open != 0 {
			t.Fatalf("after Run returned (led: %v): %d of %d LISTEN connections open, want 0", leads, open, all)
		}
	}
}
