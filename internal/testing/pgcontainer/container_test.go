package pgcontainer

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/pglease/pglease/internal/pgserver"
)

// containerUsed records that a test started a container, whose library may
// leave goroutines behind.
var containerUsed bool

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		var opts []goleak.Option
		if containerUsed {
			opts = append(opts,
				goleak.IgnoreAnyFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
				goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
				goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
			)
		}
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// TestStart starts a container when a Docker engine answers, and otherwise
// checks that the attempt fails quickly, with a reason, and leaves no
// goroutine behind (TestMain checks).
func TestStart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := Start(ctx)
	elapsed := time.Since(start)
	if err != nil {
		t.Logf("no container after %v: %v", elapsed, err)
		if elapsed > 10*time.Second {
			t.Errorf("failing to start a container took %v, want it quick", elapsed)
		}
		if err.Error() == "" {
			t.Errorf("error without a reason")
		}
		return
	}
	containerUsed = true
	t.Logf("started %s, PostgreSQL %s, in %v", s.Source, s.Version, elapsed)
	if s.Source != Source || !s.Started() {
		t.Errorf("server %q, started %v: want %q, started", s.Source, s.Started(), Source)
	}
	url, err := pgserver.CreateDatabase(ctx, s.URL, "pgcontainer_test")
	if err != nil {
		t.Errorf("CreateDatabase: %v", err)
	} else if conn, err := pgx.Connect(ctx, url); err != nil {
		t.Errorf("connect to the new database: %v", err)
	} else {
		_ = conn.Close(ctx)
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
