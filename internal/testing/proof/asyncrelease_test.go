//go:build proof

package proof

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/asyncrelease"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// TestAsyncReleaseCrash shows, on a throwaway cluster, what a crash does to
// the Go client's asynchronous release (docs/reliability.md). The window is
// made certain rather than hoped for: the processes that could write the
// release's WAL on their own (walwriter, background writer, checkpointer)
// are stopped with SIGSTOP before the release, and the whole cluster is
// then killed with SIGKILL, so nothing that only sat in the WAL buffers
// reaches the disk.
//
//   - lost: the release commits and Release returns nil, the crash loses
//     it. After the restart the old holder's tenure is back, live until its
//     expiry; another holder is refused until then and gets the next fence
//     after it. Nothing is granted twice, no fence goes backwards.
//   - carried: another holder's durable acquire follows the release. Its
//     commit flushes the WAL up to itself, the release included, so after
//     the crash the grant and its fence are there: no acknowledged grant is
//     lost.
func TestAsyncReleaseCrash(t *testing.T) {
	// Long enough for a's tenure to outlast the kill and the restart.
	const ttl = 10 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, dbURL := migratedCluster(t, ctx, "asyncrelease")

	t.Run("lost", func(t *testing.T) {
		a, b, pool := crashClients(t, dbURL)
		la, err := a.TryAcquire(ctx, "lost", ttl)
		if err != nil {
			t.Fatalf("a: acquire: %v", err)
		}
		freezeWALWriters(t, pool)
		if err := la.Release(ctx); err != nil {
			t.Fatalf("a: asynchronous release: %v", err)
		}
		if st := leaseState(t, ctx, pool, "lost"); st.Holder != "" {
			t.Fatalf("before the crash: %+v, want the lease free", st)
		}
		pool.Close()
		killCluster(t, cl)

		a, b, pool = crashClients(t, dbURL)
		st := leaseState(t, ctx, pool, "lost")
		if st.Holder != "a" || st.Fence != la.Fence() {
			t.Fatalf("after the crash: %+v, want a's tenure (fence %d) back: the release was not lost, the provocation did not work", st, la.Fence())
		}
		if st.State != pgleaseadmin.Held {
			t.Fatalf("after the crash: %+v: a's restored tenure expired before the checks (the restart took longer than the TTL %s)", st, ttl)
		}
		t.Logf("the crash lost the release: a's tenure (fence %d) is back, %s left", st.Fence, st.ExpiresIn.Round(time.Millisecond))
		var held *pglease.HeldError
		if _, err := b.TryAcquire(ctx, "lost", ttl); !errors.As(err, &held) || held.Fence != la.Fence() {
			t.Fatalf("b: acquire while a's restored tenure is live: %v, want a *HeldError for fence %d", err, la.Fence())
		}
		wctx, wcancel := context.WithTimeout(ctx, ttl+30*time.Second)
		defer wcancel()
		lb, err := b.Acquire(wctx, "lost", ttl)
		if err != nil {
			t.Fatalf("b: acquire after a's expiry: %v", err)
		}
		if lb.Fence() != la.Fence()+1 {
			t.Errorf("b's fence %d, want %d: the next fence after the restored tenure", lb.Fence(), la.Fence()+1)
		}
		if _, err := a.TryAcquire(ctx, "lost", ttl); err == nil {
			t.Errorf("a: acquire while b holds the lease succeeded")
		}
	})

	t.Run("carried", func(t *testing.T) {
		a, b, pool := crashClients(t, dbURL)
		la, err := a.TryAcquire(ctx, "carried", ttl)
		if err != nil {
			t.Fatalf("a: acquire: %v", err)
		}
		freezeWALWriters(t, pool)
		if err := la.Release(ctx); err != nil {
			t.Fatalf("a: asynchronous release: %v", err)
		}
		lb, err := b.TryAcquire(ctx, "carried", time.Minute)
		if err != nil {
			t.Fatalf("b: durable acquire after the release: %v", err)
		}
		pool.Close()
		killCluster(t, cl)

		_, _, pool = crashClients(t, dbURL)
		st := leaseState(t, ctx, pool, "carried")
		if st.Holder != "b" || st.Fence != lb.Fence() || lb.Fence() != la.Fence()+1 {
			t.Fatalf("after the crash: %+v, want b's acknowledged grant (fence %d, a's was %d)", st, lb.Fence(), la.Fence())
		}
	})
}

// crashClients returns clients "a" and "b" on a new pool to dbURL, whose
// releases are asynchronous.
func crashClients(t *testing.T, dbURL string) (a, b *pglease.Client, pool *pgxpool.Pool) {
	t.Helper()
	pool = openPool(t, dbURL, 4, "pglease-proof-asyncrelease")
	if !asyncrelease.OK(pool) {
		t.Fatal("a release on a pool is not asynchronous: this test shows nothing")
	}
	for _, c := range []struct {
		to     **pglease.Client
		holder string
	}{{&a, "a"}, {&b, "b"}} {
		var err error
		if *c.to, err = pglease.New(pool, pglease.Config{Holder: c.holder}); err != nil {
			t.Fatal(err)
		}
	}
	return a, b, pool
}

// leaseState returns the status row of lease name.
func leaseState(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string) pgleaseadmin.LeaseStatus {
	t.Helper()
	all, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil {
		t.Fatalf("list leases: %v", err)
	}
	for _, l := range all {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("lease %q is not in pglease.lease_status: %+v", name, all)
	return pgleaseadmin.LeaseStatus{}
}

// freezeWALWriters stops (SIGSTOP) the server processes that write or flush
// WAL on their own, so that an asynchronous commit stays in the WAL buffers
// until a durable commit flushes it or the cluster dies.
func freezeWALWriters(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT pid FROM pg_catalog.pg_stat_activity
		WHERE backend_type IN ('walwriter', 'background writer', 'checkpointer')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: %v", pid, err)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("found %d of the walwriter, background writer and checkpointer", n)
	}
}

// killCluster SIGKILLs the postmaster and every process of the cluster (the
// stopped ones too), waits until they are gone, and starts it again.
func killCluster(t *testing.T, cl *cluster) {
	t.Helper()
	pidFile, err := os.ReadFile(filepath.Join(cl.dir, "data", "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	postmaster, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(pidFile), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}
	pids := append(childrenOf(t, postmaster), postmaster)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("SIGKILL %d: %v", pid, err)
		}
	}
	waitFor(t, 30*time.Second, "the killed cluster's processes to exit", func() bool {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	})
	cl.pgCtl(t, "start", "-t", "60", "-l", filepath.Join(cl.dir, "postgres.log"), "-o", "-p "+cl.port)
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, f := range dirs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			out = append(out, child)
		}
	}
	return out
}
