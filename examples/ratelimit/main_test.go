package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/ratelimit"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestLimited: the RateLimit fields follow pglease.take's answers to the
// second, a key's burst is its own, and the request past it gets 429
// with Retry-After. The limit refills one request every 20 minutes, so
// no token comes back while the test runs.
func TestLimited(t *testing.T) {
	pool := pgtest.Pool(t, pgtest.NewMigrated(t))
	limiter, err := ratelimit.New(pool, ratelimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	lim := ratelimit.Limit{Rate: 3, Per: time.Hour, Burst: 3}
	if _, err := limiter.Set(t.Context(), prefix, lim); err != nil {
		t.Fatal(err)
	}
	served := 0
	h := limited(limiter, lim, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served++ }))
	get := func(key string) *http.Response {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	for i, want := range []struct {
		status                int
		rateLimit, retryAfter string
	}{
		{200, `"default";r=2;t=1200`, ""},
		{200, `"default";r=1;t=2400`, ""},
		{200, `"default";r=0;t=3600`, ""},
		{429, `"default";r=0;t=3600`, "1200"},
	} {
		res := get("acme")
		if res.StatusCode != want.status || res.Header.Get("RateLimit") != want.rateLimit || res.Header.Get("Retry-After") != want.retryAfter {
			t.Fatalf("request %d: got %d, RateLimit %q, Retry-After %q; want %d, %q, %q", i+1, res.StatusCode,
				res.Header.Get("RateLimit"), res.Header.Get("Retry-After"), want.status, want.rateLimit, want.retryAfter)
		}
		if got := res.Header.Get("RateLimit-Policy"); got != `"default";q=3;w=3600` {
			t.Fatalf("request %d: RateLimit-Policy %q, want %q", i+1, got, `"default";q=3;w=3600`)
		}
	}
	if res := get("initech"); res.StatusCode != 200 || res.Header.Get("RateLimit") != `"default";r=2;t=1200` {
		t.Fatalf("another key: got %d, RateLimit %q; want 200 from a full bucket of its own", res.StatusCode, res.Header.Get("RateLimit"))
	}
	if served != 4 {
		t.Fatalf("requests served: got %d, want 4 (3 of acme's, 1 of initech's)", served)
	}
}
