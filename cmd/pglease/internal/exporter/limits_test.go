package exporter

import (
	"strings"
	"testing"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestScrapeLimits: each configured rate limit gets its burst, period and
// levels, one set per limit whatever the number of keys; --max-series
// bounds the limits exported, counting the series left out; a schema
// without pglease.limit_status (42883) is scraped without them, and
// nothing is logged.
func TestScrapeLimits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewMigrated(t)
	pool := pgtest.Pool(t, url)
	// An API limit with 50 keys (one emptied), a daily budget with a
	// reservation, and a limit no key has used.
	if _, err := pool.Exec(ctx, `SELECT pglease.limit_set('api/', 10, '1 minute', 5),
			pglease.limit_set('llm/', 1000, '1 day', 1000),
			pglease.limit_set('unused/', 1, '1 second', 1)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pglease.take('api/' || i, CASE WHEN i = 1 THEN 5 ELSE 1 END)
			FROM generate_series(1, 50) AS i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `SELECT pglease.reserve('llm/acme', 900, '1 hour')`); err != nil {
		t.Fatal(err)
	}
	const dropped = "pglease_exporter_series_dropped_total{kind=limit}"
	s := func(family, target string) string { return family + "{target=" + target + "}" }

	log, logs := newLog()
	body := mustScrape(t, New(pool, Options{Log: log}))
	got := parseExposition(t, body)
	for key, want := range map[string]float64{
		s("pglease_limit_burst", "api/"): 5, s("pglease_limit_period_seconds", "api/"): 30,
		s("pglease_limit_remaining_min", "api/"): 0, s("pglease_limit_buckets", "api/"): 50,
		s("pglease_limit_limited_buckets", "api/"): 1, s("pglease_limit_reserved_tokens", "api/"): 0,
		s("pglease_limit_burst", "llm/"): 1000, s("pglease_limit_period_seconds", "llm/"): 86400,
		s("pglease_limit_remaining_min", "llm/"): 100, s("pglease_limit_reserved_tokens", "llm/"): 900,
		s("pglease_limit_remaining_min", "unused/"): 1, s("pglease_limit_buckets", "unused/"): 0,
		dropped: 0,
	} {
		if got, ok := got[key]; !ok || got.Value != want {
			t.Errorf("%s: got %v (present %v), want %v", key, got.Value, ok, want)
		}
	}
	if n := strings.Count(body, "\npglease_limit_buckets{"); n != 3 {
		t.Errorf("pglease_limit_buckets: %d series, want 3 (one per limit, not per key)", n)
	}

	t.Run("MaxSeries", func(t *testing.T) {
		// The first 2 limits by target (api/, llm/); unused/ dropped.
		got := parseExposition(t, mustScrape(t, New(pool, Options{MaxNames: 2, Log: log})))
		if _, ok := got[s("pglease_limit_burst", "unused/")]; ok {
			t.Errorf("unused/: exported with MaxNames 2, want left out")
		}
		if _, ok := got[s("pglease_limit_burst", "llm/")]; !ok {
			t.Errorf("llm/: missing with MaxNames 2")
		}
		if v := got[dropped].Value; v != seriesPerLimit {
			t.Errorf("%s with MaxNames 2: got %v, want %d", dropped, v, seriesPerLimit)
		}
		body := mustScrape(t, New(pool, Options{MaxNames: -1, Log: log}))
		if v := parseExposition(t, body)[dropped].Value; v != 3*seriesPerLimit {
			t.Errorf("%s with MaxNames -1: got %v, want %d", dropped, v, 3*seriesPerLimit)
		}
		if strings.Contains(body, "pglease_limit_burst{") {
			t.Errorf("body with MaxNames -1: got limit series, want none")
		}
	})

	t.Run("OlderSchema", func(t *testing.T) {
		if _, err := pool.Exec(ctx, `DROP FUNCTION pglease.limit_status(integer)`); err != nil {
			t.Fatal(err)
		}
		body := mustScrape(t, New(pool, Options{Log: log}))
		if v := parseExposition(t, body)["pglease_up{}"].Value; v != 1 {
			t.Errorf("pglease_up without pglease.limit_status: got %v, want 1", v)
		}
		if strings.Contains(body, "pglease_limit_") {
			t.Errorf("body without pglease.limit_status: got limit families, want none")
		}
	})

	if l := logs.String(); l != "" {
		t.Errorf("log: got %q, want nothing", l)
	}
}
