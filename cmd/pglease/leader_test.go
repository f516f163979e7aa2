package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
)

// testReleaseRequest: `pglease release --request [--to]` asks the holder
// to hand over, refuses a free lease and a holder that is not waiting
// (exit 1, nothing changed), and `pglease status` shows the holder's
// value and the pending request, in the table and in --json.
func testReleaseRequest(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	leader, err := pglease.New(pool, pglease.Config{Holder: "leader"})
	if err != nil {
		t.Fatal(err)
	}
	standby, err := pglease.New(pool, pglease.Config{Holder: "standby"})
	if err != nil {
		t.Fatal(err)
	}

	r := c.mustRun(1, "release", "--request", "lead")
	requireContains(t, "request of a free lease", r.stderr, "not held")
	if _, err := leader.TryAcquire(t.Context(), "lead", time.Hour, pglease.WithValue("10.0.0.1:8080")); err != nil {
		t.Fatal(err)
	}
	r = c.mustRun(1, "release", "--request", "lead", "--to", "standby")
	requireContains(t, "request to a holder that is not waiting", r.stderr, "not a candidate")
	// A client role is told the grant it lacks, not the one it has.
	r = c.with("PGLEASE_DATABASE_URL="+loginURL(t, url, true)).mustRun(1, "release", "--request", "lead")
	requireOneLine(t, "request as a pglease_client member", r.stderr)
	requireContains(t, "request as a pglease_client member", r.stderr, "permission denied", "needs role pglease_operator",
		"GRANT pglease_operator TO")
	if strings.Contains(r.stderr, "GRANT pglease_client") || strings.Contains(r.stderr, "needs role pglease_client") {
		t.Fatalf("request as a pglease_client member: got %q, which asks for pglease_client", r.stderr)
	}
	r = c.mustRun(0, "status")
	requireContains(t, "status with a value", r.stdout, "VALUE", "10.0.0.1:8080")

	if _, err := standby.TryAcquire(t.Context(), "lead", time.Hour, pglease.WithValue("10.0.0.2:8080")); err == nil {
		t.Fatal("standby took a held lease")
	}
	r = c.mustRun(0, "release", "--request", "lead", "--to", "standby")
	requireContains(t, "release --request --to", r.stdout, `asked "leader" (fence 1) to hand over to "standby"`)
	r = c.mustRun(0, "release", "--request", "lead")
	requireContains(t, "a second request", r.stdout, "already requested")
	r = c.mustRun(0, "status")
	requireContains(t, "status with a request", r.stdout, `release to standby`)

	st := readStatus(t, c)
	if len(st.Leases) != 1 || st.Leases[0].Value == nil || *st.Leases[0].Value != "10.0.0.1:8080" ||
		!st.Leases[0].ReleaseRequested || st.Leases[0].PreferredHolder == nil || *st.Leases[0].PreferredHolder != "standby" {
		t.Fatalf("status --json: got %+v", st.Leases)
	}
}
