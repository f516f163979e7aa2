package pgleaseadmin_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/obstest"
	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pgleaseadmin"
)

// envUpdatePlot, set to 1, makes TestTenureHistoryPlot write its picture
// to docs/img/tenure-history.svg (docs/tenure-history.md shows it), as
// the observability test does for docs/img/handover.svg.
const envUpdatePlot = "PGLEASE_UPDATE_PLOT"

// TestTenureHistoryPlot runs one lease across three holders: a crashes
// (stops renewing), b takes the lease over once it has run out, an
// operator asks b to hand over to c, b releases and c takes it, c releases.
// The history must say exactly that, in fences 1, 2, 3, and the test draws
// it from the history's rows.
func TestTenureHistoryPlot(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	const name, ttl = "svc/leader", 600 * time.Millisecond
	if _, err := pgleaseadmin.EnableHistory(ctx, pool, "svc/", 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	acquire := func(holder string) int64 {
		var ok bool
		var fence int64
		if err := pool.QueryRow(ctx, `SELECT acquired, fence FROM pglease.acquire($1, $2, $3)`, name, holder, ttl).Scan(&ok, &fence); err != nil {
			t.Fatal(err)
		}
		if !ok {
			return 0
		}
		return fence
	}
	// hold renews holder's tenure every ttl/4 for d (pacing the run, not
	// synchronising it); it reports whether a release was requested.
	hold := func(holder string, fence int64, d time.Duration) bool {
		for end := time.Now().Add(d); time.Now().Before(end); {
			var renewed, requested bool
			if err := pool.QueryRow(ctx, `SELECT renewed, release_requested FROM pglease.renew_lease($1, $2, $3, $4)`,
				name, holder, fence, ttl).Scan(&renewed, &requested); err != nil || !renewed {
				t.Fatalf("renew of %s's tenure: renewed %v, %v", holder, renewed, err)
			}
			if requested {
				return true
			}
			time.Sleep(ttl / 4)
		}
		return false
	}
	release := func(holder string, fence int64) {
		if _, err := pool.Exec(ctx, `SELECT pglease.release($1, $2, $3)`, name, holder, fence); err != nil {
			t.Fatal(err)
		}
	}

	fa := acquire("a")
	hold("a", fa, 4*ttl/2)
	crashed := time.Now()
	// a crashes: no more renewals. b asks until the lease is its own.
	var fb int64
	for fb == 0 {
		if fb = acquire("b"); fb == 0 {
			time.Sleep(ttl / 6)
		}
	}
	hold("b", fb, 2*ttl)
	// c asks (refused: a candidate), and an operator asks b to hand over to c.
	if _, err := pool.Exec(ctx, `SELECT pglease.acquire($1, 'c', $2, 'c')`, name, ttl); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pgleaseadmin.RequestRelease(ctx, pool, name, pgleaseadmin.ReleaseRequest{To: "c", Reserve: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	requested := time.Now()
	if !hold("b", fb, 2*ttl) {
		t.Fatal("b's renewals never saw the release request")
	}
	release("b", fb)
	fc := acquire("c")
	if fc == 0 {
		t.Fatal("c's acquire after the handover: refused")
	}
	hold("c", fc, 3*ttl)
	release("c", fc)
	end := time.Now()

	got, err := pgleaseadmin.Tenures(ctx, pool, name, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		holder string
		fence  int64
		ended  string
	}{{"a", 1, "taken_over"}, {"b", 2, "handed_over"}, {"c", 3, "released"}}
	if len(got) != len(want) {
		t.Fatalf("tenures: got %+v, want %v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.Holder != w.holder || g.Fence != w.fence || g.Ended != w.ended || g.EndedAt.IsZero() {
			t.Fatalf("tenure %d: got %+v, want %+v", i, g, w)
		}
	}
	plotTenures(t, pool, got, start, end, []obstest.Event{
		{T: crashed, Label: "a crashes (last renewal)"}, {T: requested, Label: "handover to c requested"}})
}

// plotTenures draws the tenures: one line per holder at its fence from
// grant to end, and the ends and grants as events.
func plotTenures(t *testing.T, pool *pgxpool.Pool, tenures []pgleaseadmin.TenureRecord, start, end time.Time, events []obstest.Event) {
	t.Helper()
	colors := map[string]string{"a": "#1f77b4", "b": "#d62728", "c": "#2ca02c"}
	var lines []obstest.Line
	for _, r := range tenures {
		lines = append(lines, obstest.Line{
			Label: "holder " + r.Holder, Color: colors[r.Holder], Step: true,
			Points: []obstest.Point{{T: r.GrantedAt, V: float64(r.Fence)}, {T: r.EndedAt, V: float64(r.Fence)}},
		})
		events = append(events, obstest.Event{T: r.EndedAt, Label: r.Holder + ": " + r.Ended})
	}
	ends, err := pgleaseadmin.TenureEnds(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tenures ended: %v", ends)
	var svg bytes.Buffer
	if err := obstest.Plot(&svg, "One lease's tenures from pglease.tenures: a crashes, b takes over, b hands over to c",
		start, end, end.Sub(start), []obstest.Panel{{Title: "fence of each tenure, grant to end", Lines: lines, Min: 0, Max: 4}}, events); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tenure-history.svg")
	if os.Getenv(envUpdatePlot) == "1" {
		out = filepath.Join("..", "docs", "img", "tenure-history.svg")
	}
	if err := os.WriteFile(out, svg.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("plot of the run (%s): %s", end.Sub(start).Round(time.Millisecond), out)
}
