package pgserver

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testServer is the server of the tests that need one, found once.
var testServer struct {
	once sync.Once
	s    *Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if s := testServer.s; s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := s.Stop(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "stop test server: %v\n", err)
			code = max(code, 1)
		}
		cancel()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// adminURL returns the URL of a server the tests may create databases on,
// the way the test harness finds it.
func adminURL(t testing.TB) string {
	t.Helper()
	testServer.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		testServer.s, testServer.err = Find(ctx, Options{EnvVar: "PGLEASE_TEST_DATABASE_URL"})
	})
	if testServer.err != nil {
		t.Fatalf("find server: %v", testServer.err)
	}
	return testServer.s.URL
}
