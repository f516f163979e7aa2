//go:build proof

package proof

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/pglease/pglease/pglease"
)

// TestObserveServerRestart: a watcher of a lease (docs/leadership.md)
// across an immediate stop and start of the server. Its ObserveInterval is
// a minute, so each state it delivers in time was read at once when its
// LISTEN connection came back, or woken by a NOTIFY: the release made
// right after the restart (while the watcher's connection is still being
// made anew) is delivered, and so is the next tenure.
func TestObserveServerRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, dbURL := migratedCluster(t, ctx, "observe")
	pool := openPool(t, dbURL, 4, "pglease-proof-observe")
	watcher, err := pglease.New(pool, pglease.Config{Holder: "watcher", ObserveInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := pglease.New(pool, pglease.Config{Holder: "a"})
	b, _ := pglease.New(pool, pglease.Config{Holder: "b"})
	states, err := watcher.Observe(ctx, "lead")
	if err != nil {
		t.Fatal(err)
	}
	next := func(what string, want pglease.LeaseState) {
		t.Helper()
		want.Name = "lead"
		select {
		case got := <-states:
			got.ExpiresIn = 0
			if got != want {
				t.Fatalf("%s: observed %+v, want %+v", what, got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: nothing observed in 30s, want %+v", what, want)
		}
	}
	next("the initial vacancy", pglease.LeaseState{})
	l, err := a.TryAcquire(ctx, "lead", time.Hour, pglease.WithValue("a:1"))
	if err != nil {
		t.Fatal(err)
	}
	next("a's tenure", pglease.LeaseState{Holder: "a", Fence: 1, Value: "a:1"})

	cl.pgCtl(t, "stop", "-m", "immediate")
	time.Sleep(time.Second) // the outage itself
	cl.pgCtl(t, "start", "-t", "60", "-l", filepath.Join(cl.dir, "postgres.log"), "-o", "-p "+cl.port)
	for { // the pool's old connections are dead: retry until the release goes through
		if err = l.Release(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("release after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	next("the release after the restart", pglease.LeaseState{Fence: 1})
	if _, err := b.TryAcquire(ctx, "lead", time.Hour, pglease.WithValue("b:1")); err != nil {
		t.Fatal(err)
	}
	next("b's tenure", pglease.LeaseState{Holder: "b", Fence: 2, Value: "b:1"})
}
