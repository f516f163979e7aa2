//go:build unix

package pgserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestStartClusterForced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	start := time.Now()
	s, err := Find(ctx, Options{EnvVar: unsetVar, ForceThrowaway: true})
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	t.Logf("started %s, PostgreSQL %s, in %v", s.Source, s.Version, time.Since(start))
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = s.Stop(context.Background())
		}
	})
	if !strings.HasPrefix(s.Source, "throwaway cluster ") {
		t.Fatalf("Source = %q, want a throwaway cluster", s.Source)
	}
	if !s.Started() {
		t.Errorf("Started() = false for a throwaway cluster")
	}

	version := checkServer(ctx, t, s.URL)
	t.Logf("SELECT version(): %s", version)
	dir := clusterDir(ctx, t, s.URL)
	if _, err := os.Stat(filepath.Join(dir, "data", "PG_VERSION")); err != nil {
		t.Fatalf("cluster directory: %v", err)
	}
	if os.Geteuid() == 0 {
		fi, err := os.Stat(filepath.Join(dir, "data"))
		if err != nil {
			t.Fatal(err)
		}
		as, err := clusterUser()
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != as.uid {
			t.Errorf("data directory owned by uid %d, want %d (postgres)", uid, as.uid)
		}
	}

	// The cluster is good for what the tests do with it.
	dbURL, err := CreateDatabase(ctx, s.URL, "pgserver_test")
	if err != nil {
		t.Fatalf("CreateDatabase: %v", err)
	}
	checkServer(ctx, t, dbURL)

	stopped = true
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("cluster directory after Stop: %v, want it gone", err)
	}
	if conn, err := pgx.Connect(ctx, s.URL); err == nil {
		_ = conn.Close(ctx)
		t.Errorf("connected to the cluster after Stop")
	}
	if err := s.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v, want nil", err)
	}
}

func TestStartClusterBinDir(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	missing := filepath.Join(t.TempDir(), "bin")
	s, err := Find(ctx, Options{EnvVar: unsetVar, ForceThrowaway: true, BinDir: missing})
	if err == nil {
		_ = s.Stop(ctx)
		t.Fatalf("Find with BinDir %s succeeded with %s, want an error", missing, s.Source)
	}
	if _, ok := errors.AsType[*NoServerError](err); ok {
		t.Errorf("Find fell through to other servers, want it to stop at BinDir: %v", err)
	}
	if !strings.Contains(err.Error(), missing) {
		t.Errorf("error does not name %s: %v", missing, err)
	}
}

func TestReapStale(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := StartCluster(ctx, "")
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	dir := clusterDir(ctx, t, s.URL)

	// Make the cluster look like one left by a process that has exited.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	owner, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(owner), "\n")
	owner = []byte(fmt.Sprintf("%d\n%s", dead.Process.Pid, rest))
	if err := os.WriteFile(filepath.Join(dir, ownerFile), owner, 0o644); err != nil {
		t.Fatal(err)
	}

	as, err := clusterUser()
	if err != nil {
		t.Fatal(err)
	}
	reapStale(ctx, filepath.Dir(dir), as)

	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale cluster directory after reapStale: %v, want it gone", err)
	}
	if conn, err := pgx.Connect(ctx, s.URL); err == nil {
		_ = conn.Close(ctx)
		t.Errorf("connected to the stale cluster after reapStale")
	}
}

func TestFindBinDir(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9.6", "13", "16", "17"} {
		dir := filepath.Join(root, "postgresql", v, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		names := []string{"initdb", "pg_ctl", "postgres"}
		if v == "17" {
			names = names[:1] // incomplete: not a candidate
		}
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	savedGlobs, savedPath := binDirGlobs, searchPath
	t.Cleanup(func() { binDirGlobs, searchPath = savedGlobs, savedPath })
	binDirGlobs = []string{filepath.Join(root, "postgresql", "*", "bin")}
	searchPath = t.TempDir()

	got, err := findBinDir()
	if err != nil {
		t.Fatalf("findBinDir: %v", err)
	}
	if want := filepath.Join(root, "postgresql", "16", "bin"); got != want {
		t.Errorf("findBinDir() = %q, want %q", got, want)
	}

	// A pg_ctl on PATH wins, through a symbolic link.
	link := t.TempDir()
	if err := os.Symlink(filepath.Join(root, "postgresql", "13", "bin", "pg_ctl"), filepath.Join(link, "pg_ctl")); err != nil {
		t.Fatal(err)
	}
	searchPath = link
	got, err = findBinDir()
	if err != nil {
		t.Fatalf("findBinDir: %v", err)
	}
	if want := filepath.Join(root, "postgresql", "13", "bin"); got != want {
		t.Errorf("findBinDir() with pg_ctl on PATH = %q, want %q", got, want)
	}
}

// clusterDir returns the directory of the throwaway cluster at url.
func clusterDir(ctx context.Context, t testing.TB, url string) string {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	var data string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&data); err != nil {
		t.Fatalf("SHOW data_directory: %v", err)
	}
	return filepath.Dir(data)
}
