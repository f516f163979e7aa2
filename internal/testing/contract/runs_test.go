package contract

import (
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestRuns: the cron functions' contract (docs/sql.md#run_begin): a hold
// keeps the tenure until grant + D; the ledger's writes are fenced and
// bound to the tenure's role (42501 for another); a success closes the
// window, a failure leaves it open; readable by any client.
func TestRuns(t *testing.T) {
	t.Parallel()
	url := pgtest.NewMigrated(t)
	owner := newPool(t, url, 4)
	adminURL := pgtest.AdminURL(t)
	client := connectAs(t, url, createLoginRole(t, adminURL, url, true))
	other := connectAs(t, url, createLoginRole(t, adminURL, url, true))
	ctx := testContext(t)

	t.Run("hold", func(t *testing.T) {
		mustAcquire(t, client, "hold", "a", time.Minute, 1)
		var released bool
		var heldFor time.Duration
		if err := client.QueryRow(ctx, `SELECT released, held_until - clock_timestamp()
			FROM pglease.release_after('hold', 'a', 1, '1 hour')`).Scan(&released, &heldFor); err != nil {
			t.Fatal(err)
		}
		if !released || heldFor < 59*time.Minute {
			t.Fatalf("release_after of a live tenure: released %v, held for another %s; want true, about an hour", released, heldFor)
		}
		var state, holder string
		var fence int64
		if err := client.QueryRow(ctx, `SELECT state, holder, fence FROM pglease.lease_status WHERE name = 'hold'`).Scan(&state, &holder, &fence); err != nil {
			t.Fatal(err)
		}
		if state != "held" || holder != "a" || fence != 1 {
			t.Fatalf("after release_after: %s by %s fence %d, want held by a, fence 1", state, holder, fence)
		}
		// Another holder is refused until grant + 1 hour.
		var acquired bool
		var left time.Duration
		if err := client.QueryRow(ctx, `SELECT acquired, expires_in FROM pglease.acquire('hold', 'b', '1 min')`).Scan(&acquired, &left); err != nil {
			t.Fatal(err)
		}
		if acquired || left < 59*time.Minute {
			t.Fatalf("acquire during the hold: acquired %v, expires_in %s; want refused for about an hour", acquired, left)
		}
		// Another role cannot release it (released = false, nothing changes).
		if err := other.QueryRow(ctx, `SELECT released FROM pglease.release_after('hold', 'a', 1, '1 s')`).Scan(&released); err != nil || released {
			t.Fatalf("release_after by another role: %v, %v; want false", released, err)
		}
	})

	t.Run("ledger", func(t *testing.T) {
		mustAcquire(t, client, "job", "a", time.Minute, 1)
		// Another role, with the tenure's fence: 42501, nothing written.
		_, err := other.Exec(ctx, `SELECT * FROM pglease.run_begin('job', 'a', 1, '1 hour')`)
		requirePgError(t, err, "42501", "pglease.run_begin")
		var run bool
		if err := client.QueryRow(ctx, `SELECT run FROM pglease.run_begin('job', 'a', 1, '1 hour')`).Scan(&run); err != nil || !run {
			t.Fatalf("run_begin: %v, %v; want true", run, err)
		}
		_, err = other.Exec(ctx, `SELECT * FROM pglease.run_end('job', 'a', 1, 0)`)
		requirePgError(t, err, "42501", "pglease.run_end")
		// A failure leaves the window open for the next tenure.
		var recorded bool
		var outcome string
		if err := client.QueryRow(ctx, `SELECT recorded, outcome FROM pglease.run_end('job', 'a', 1, 2)`).Scan(&recorded, &outcome); err != nil || !recorded || outcome != "failed" {
			t.Fatalf("run_end(2): %v %q %v; want recorded, failed", recorded, outcome, err)
		}
		mustExec(t, client, `SELECT pglease.release('job', 'a', 1)`)
		mustAcquire(t, client, "job", "b", time.Minute, 2)
		if err := client.QueryRow(ctx, `SELECT run FROM pglease.run_begin('job', 'b', 2, '1 hour')`).Scan(&run); err != nil || !run {
			t.Fatalf("run_begin after a failure: %v, %v; want true", run, err)
		}
		// A run whose tenure ended cannot record success.
		mustExec(t, owner, `SELECT pglease.force_release('job')`)
		if err := client.QueryRow(ctx, `SELECT recorded, outcome FROM pglease.run_end('job', 'b', 2, 0)`).Scan(&recorded, &outcome); err != nil || recorded || outcome != "lost" {
			t.Fatalf("run_end after the tenure ended: %v %q %v; want not recorded, lost", recorded, outcome, err)
		}
		// Fence 3 succeeds; fence 4 finds the window done.
		mustAcquire(t, client, "job", "c", time.Minute, 3)
		mustExec(t, client, `SELECT pglease.run_begin('job', 'c', 3, '1 hour')`)
		mustExec(t, client, `SELECT pglease.run_end('job', 'c', 3, 0)`)
		mustExec(t, client, `SELECT pglease.release('job', 'c', 3)`)
		mustAcquire(t, client, "job", "d", time.Minute, 4)
		var doneFence int64
		if err := client.QueryRow(ctx, `SELECT run, done_fence FROM pglease.run_begin('job', 'd', 4, '1 hour')`).Scan(&run, &doneFence); err != nil || run || doneFence != 3 {
			t.Fatalf("run_begin in a done window: run %v done_fence %d %v; want false, 3", run, doneFence, err)
		}
		// Any client reads the ledger.
		var n int
		if err := other.QueryRow(ctx, `SELECT count(*) FROM pglease.run_history('job', 100)`).Scan(&n); err != nil || n != 3 {
			t.Fatalf("run_history as another client: %d rows, %v; want 3", n, err)
		}
		var names []string
		if err := other.QueryRow(ctx, `SELECT job_names FROM pglease.run_summary('', 10)`).Scan(&names); err != nil || len(names) != 1 {
			t.Fatalf("run_summary: %v, %v; want [job]", names, err)
		}
		// Not the live tenure: PGL01.
		_, err = client.Exec(ctx, `SELECT pglease.run_begin('job', 'c', 3, '1 hour')`)
		requirePgError(t, err, "PGL01", "pglease.run_begin")
	})
}
