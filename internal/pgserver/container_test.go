package pgserver

import (
	"context"
	"testing"
	"time"
)

// TestStartContainer starts a container when a Docker engine answers, and
// otherwise checks that the attempt fails quickly, with a reason, and leaves
// no goroutine behind (TestMain checks).
func TestStartContainer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	s, err := startContainer(ctx)
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
	checkServer(ctx, t, s.URL)
	if _, err := CreateDatabase(ctx, s.URL, "pgserver_test"); err != nil {
		t.Errorf("CreateDatabase: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("Stop: %v", err)
	}
}
