//go:build proof

package proof

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleasemigrate"
	"github.com/pglease/pglease/supervisor"
)

// TestFaultServerRestart runs three supervisors of one lease against a
// throwaway cluster of its own and, twice, stops the server in immediate
// mode (a crash: no shutdown checkpoint, crash recovery on start) while a
// workload runs, keeps it down for longer than the TTL, and starts it
// again. The leader's workload must be cancelled before its lease expired
// on the server (as recovered from the WAL), no two workloads may ever run
// at once, fences continue after the restart, and every fenced write in
// the recovered log committed under the then-current tenure.
func TestFaultServerRestart(t *testing.T) {
	const (
		ttl      = time.Second
		downtime = 1500 * time.Millisecond
		rounds   = 2
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, dbURL := migratedCluster(t, ctx, "proof")
	installAudit(t, dbURL)

	f := newFleet("restart")
	var sups []*supervisor.Supervisor
	for i := range 3 {
		p := openPool(t, dbURL, 4, fmt.Sprintf("pglease-proof-restart-%d", i))
		s := newSupervisor(t, p, f.name, supervisor.Config{TTL: ttl, Holder: fmt.Sprintf("restart-%d", i), RestartDelay: 20 * time.Millisecond})
		sups = append(sups, s)
	}
	pools := make([]pglease.DB, len(sups))
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	wait := runFleet(t, runCtx, sups, func(i int, s *supervisor.Supervisor) func(context.Context) error {
		return f.workload(s, poolOf(t, dbURL, i, pools), 0)
	})
	leader := func() bool { return slices.ContainsFunc(sups, (*supervisor.Supervisor).IsLeader) }

	var recoveries []time.Duration
	for round := range rounds {
		waitFor(t, time.Minute, "a workload writing", func() bool { return leader() && f.writes() > round*5 })
		before := f.writes()
		cl.pgCtl(t, "stop", "-m", "immediate")
		waitFor(t, 30*time.Second, "the leader's workload to be cancelled", func() bool { return !leader() })
		time.Sleep(downtime) // the outage itself
		cl.pgCtl(t, "start", "-t", "60", "-l", filepath.Join(cl.dir, "postgres.log"), "-o", "-p "+cl.port)
		up := time.Now()
		waitFor(t, time.Minute, "a workload writing after the restart", func() bool { return leader() && f.writes() > before })
		recoveries = append(recoveries, time.Since(up))
	}
	stop()
	wait()
	check := openPool(t, dbURL, 1, "pglease-proof-check")
	res := f.check(t, check)
	t.Logf("restart: %d immediate restarts, %s down each (TTL %s); first fenced write %v after the server was back; %s",
		rounds, downtime, ttl, roundAll(recoveries), res)
}

// migratedCluster starts a throwaway cluster, stopped when the test ends,
// with database name migrated to head, and returns the cluster and the
// database's URL.
func migratedCluster(t *testing.T, ctx context.Context, name string) (*cluster, string) {
	t.Helper()
	srv, err := pgserver.StartCluster(ctx, "")
	if err != nil {
		t.Fatalf("start a throwaway cluster: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Stop(ctx); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
	})
	cl := findCluster(t, srv)
	dbURL, err := pgserver.CreateDatabase(ctx, srv.URL, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := pgleasemigrate.Up(ctx, dbURL); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return cl, dbURL
}

// poolOf returns the i-th supervisor's own pool for its fenced writes.
func poolOf(t *testing.T, dbURL string, i int, pools []pglease.DB) pglease.DB {
	if pools[i] == nil {
		pools[i] = openPool(t, dbURL, 2, fmt.Sprintf("pglease-proof-restart-w%d", i))
	}
	return pools[i]
}

// cluster is a throwaway cluster started by pgserver.StartCluster, found
// on disk. pgserver has no restart API; see findCluster.
type cluster struct {
	dir, binDir, port string
}

// findCluster finds the directory of the throwaway cluster srv: the
// pglease-pg-* directory under os.TempDir whose owner file names this
// process and whose postmaster.pid names srv's port. This leans on
// pgserver's layout (dir/owner, dir/data, dir/postgres.log); an API such as
// Server.Restart(ctx, mode) would remove that dependency.
func findCluster(t *testing.T, srv *pgserver.Server) *cluster {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	port := u.Port()
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pglease-pg-*"))
	for _, dir := range dirs {
		owner, err := os.ReadFile(filepath.Join(dir, "owner"))
		if err != nil {
			continue
		}
		fields := strings.Split(string(owner), "\n")
		if len(fields) < 3 || fields[0] != strconv.Itoa(os.Getpid()) {
			continue
		}
		pid, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
		if err != nil {
			continue
		}
		if lines := strings.Split(string(pid), "\n"); len(lines) > 3 && strings.TrimSpace(lines[3]) == port {
			return &cluster{dir: dir, binDir: fields[2], port: port}
		}
	}
	t.Fatalf("cannot find the directory of the throwaway cluster on port %s under %s", port, os.TempDir())
	return nil
}

// pgCtl runs pg_ctl args -D <data> -w -s as the cluster's owner (user
// postgres when this process is root).
func (c *cluster) pgCtl(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	args = append(args, "-D", filepath.Join(c.dir, "data"), "-w", "-s")
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "pg_ctl"), args...)
	cmd.Dir = c.dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("user postgres: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pg_ctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
