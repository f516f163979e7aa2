package exporter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestScrapeQuotas: each cap the schema owner set gets its limit and its
// use, by role and kind; --max-series bounds the caps exported, counting
// the series left out; a schema without pglease.quota_usage (42883) is
// scraped without them, and nothing is logged.
func TestScrapeQuotas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewMigrated(t)
	pool := pgtest.Pool(t, url)

	// A role of its own (quotas are per role), with a quote to escape.
	role := fmt.Sprintf(`pglease_exporter_quota_%d "q"`, time.Now().UnixNano())
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE ROLE `+ident+` NOLOGIN IN ROLE pglease_client`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP ROLE `+ident) })
	// Leases capped at 3 first (rows count from the cap on), then three
	// leases created by the role: session_user is what quotas count.
	if _, err := pool.Exec(ctx, `SELECT pglease.quota_set($1, 'leases', 3)`, role); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SET SESSION AUTHORIZATION `+ident); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"q/a", "q/b", "q/c"} {
		if _, err := conn.Exec(ctx, `SELECT pglease.acquire($1, 'h', '1 min')`, name); err != nil {
			t.Fatalf("acquire %s as the role: %v", name, err)
		}
	}
	// As the schema owner: leases capped again, below the role's 3 (its
	// use then counts up to the cap + 1), groups and runs unused.
	for kind, n := range map[string]int{"leases": 2, "groups": 5, "runs": 10} {
		if _, err := pool.Exec(ctx, `SELECT pglease.quota_set($1, $2, $3)`, role, kind, n); err != nil {
			t.Fatalf("quota_set(%s): %v", kind, err)
		}
	}
	limit := func(kind string) string { return "pglease_quota_limit_rows{kind=" + kind + ",role=" + role + "}" }
	used := func(kind string) string { return "pglease_quota_used_rows{kind=" + kind + ",role=" + role + "}" }
	const dropped = "pglease_exporter_series_dropped_total{kind=quota}"

	log, logs := newLog()
	body, _ := scrape(t, New(pool, Options{Log: log}), 0)
	got := parseExposition(t, body)
	for key, want := range map[string]float64{
		limit("groups"): 5, used("groups"): 0,
		limit("leases"): 2, used("leases"): 3,
		limit("runs"): 10, used("runs"): 0,
		dropped: 0,
	} {
		if s, ok := got[key]; !ok || s.Value != want {
			t.Errorf("%s: got %v (present %v), want %v", key, s.Value, ok, want)
		}
	}
	if want := `pglease_quota_used_rows{role="` + strings.ReplaceAll(role, `"`, `\"`) + `",kind="leases"} 3`; !strings.Contains(body, want) {
		t.Errorf("body: no line %q:\n%s", want, body)
	}

	t.Run("MaxSeries", func(t *testing.T) {
		// The first 2 caps by role and kind (groups, leases); runs dropped,
		// counted in each scrape that drops it.
		e := New(pool, Options{MaxNames: 2, Log: log})
		got := parseExposition(t, mustScrape(t, e))
		for _, key := range []string{limit("groups"), used("groups"), limit("leases"), used("leases")} {
			if _, ok := got[key]; !ok {
				t.Errorf("%s: missing with MaxNames 2", key)
			}
		}
		for _, key := range []string{limit("runs"), used("runs")} {
			if s, ok := got[key]; ok {
				t.Errorf("%s: got %v, want no series with MaxNames 2", key, s.Value)
			}
		}
		if s := got[dropped]; s.Value != 2 {
			t.Errorf("%s after one scrape: got %v, want 2", dropped, s.Value)
		}
		if s := parseExposition(t, mustScrape(t, e))[dropped]; s.Value != 4 {
			t.Errorf("%s after two scrapes: got %v, want 4", dropped, s.Value)
		}

		// Negative: totals only, every cap dropped.
		body := mustScrape(t, New(pool, Options{MaxNames: -1, Log: log}))
		if s := parseExposition(t, body)[dropped]; s.Value != 6 {
			t.Errorf("%s with MaxNames -1: got %v, want 6", dropped, s.Value)
		}
		if strings.Contains(body, "pglease_quota_limit_rows{") || strings.Contains(body, "pglease_quota_used_rows{") {
			t.Errorf("body with MaxNames -1: got quota series, want none:\n%s", body)
		}
	})

	t.Run("OlderSchema", func(t *testing.T) {
		// A schema without pglease.quota_usage: the rest as before.
		if _, err := pool.Exec(ctx, `DROP FUNCTION pglease.quota_usage()`); err != nil {
			t.Fatal(err)
		}
		body := mustScrape(t, New(pool, Options{Log: log}))
		got := parseExposition(t, body)
		if s := got["pglease_up{}"]; s.Value != 1 {
			t.Errorf("pglease_up without pglease.quota_usage: got %v, want 1", s.Value)
		}
		if _, ok := got["pglease_table_rows{table=quotas}"]; !ok {
			t.Errorf("pglease_table_rows{table=quotas}: missing without pglease.quota_usage")
		}
		if strings.Contains(body, "pglease_quota_") {
			t.Errorf("body without pglease.quota_usage: got quota families, want none:\n%s", body)
		}
		if s, ok := got[dropped]; !ok || s.Value != 0 {
			t.Errorf("%s without pglease.quota_usage: got %v (present %v), want 0", dropped, s.Value, ok)
		}
	})

	if l := logs.String(); l != "" {
		t.Errorf("log: got %q, want nothing", l)
	}
}

// mustScrape returns the body of one scrape of e.
func mustScrape(t *testing.T, e *Exporter) string {
	t.Helper()
	body, _ := scrape(t, e, 0)
	return body
}
