package main

import (
	"strings"
	"testing"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// testRunRate: pglease run --rate runs the command only when its tokens
// are granted; refused, it skips (exit 0 or --skip-status, silent unless
// -v), or with --wait waits for them; with a lease, inside the tenure.
func testRunRate(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	c = c.with("PGLEASE_DATABASE_URL=" + url)
	pool := pgtest.Pool(t, url)
	if _, err := pool.Exec(t.Context(), `SELECT pglease.limit_set('jobs/', 1, '1 hour', 3),
			pglease.limit_set('fast/', 20, '1 second', 1)`); err != nil {
		t.Fatal(err)
	}
	r := c.mustRun(0, "run", "--rate", "jobs/a", "--", "sh", "-c", "echo ran")
	if r.stdout != "ran\n" {
		t.Fatalf("run --rate with a token: stdout %q, want %q", r.stdout, "ran\n")
	}
	// Two more tokens at once, spent though the command fails.
	c.mustRun(3, "run", "--rate", "jobs/a", "--cost", "2", "--", "sh", "-c", "exit 3")
	r = c.mustRun(0, "run", "--rate", "jobs/a", "--", "sh", "-c", "echo ran")
	if r.stdout != "" || r.stderr != "" {
		t.Fatalf("run --rate refused: printed something, want a silent skip\n%s", r)
	}
	c.mustRun(9, "run", "--rate", "jobs/a", "--skip-status", "9", "--", "true")
	r = c.mustRun(0, "run", "-v", "--rate", "jobs/a", "--", "true")
	requireContains(t, "run -v --rate refused", r.stderr, "skipped", "jobs/a", "refused 1 tokens (0 left)", "retry in")

	// --wait: the key's one token is spent; the next comes within 50 ms.
	c.mustRun(0, "run", "--rate", "fast/x", "--", "true")
	r = c.mustRun(0, "run", "--rate", "fast/x", "--wait", "--", "sh", "-c", "echo ran")
	if r.stdout != "ran\n" {
		t.Fatalf("run --rate --wait: stdout %q, want %q\n%s", r.stdout, "ran\n", r)
	}
	if strings.Contains(r.stderr, "waiting") {
		requireContains(t, "run --rate --wait", r.stderr, `tokens of rate limit "fast/x"`, "--wait")
	}

	// With a lease: the token is taken inside the tenure.
	r = c.mustRun(0, "run", "--lease", "nightly", "--rate", "jobs/b", "--", "sh", "-c", `echo "$PGLEASE_LEASE $PGLEASE_FENCE"`)
	if r.stdout != "nightly 1\n" {
		t.Fatalf("run --lease --rate: stdout %q, want %q", r.stdout, "nightly 1\n")
	}

	// Errors that need the database: no limit, a cost above the burst.
	r = c.mustRun(1, "run", "--rate", "nolimit/x", "--", "true")
	requireContains(t, "run --rate of a key without a limit", r.stderr, `"nolimit/x"`, "no rate limit is set", "hint:", "pglease.limit_set('nolimit/x'")
	requireOneLine(t, "run --rate of a key without a limit", r.stderr)
	r = c.mustRun(2, "run", "--rate", "jobs/c", "--cost", "4", "--", "true")
	requireContains(t, "run --rate --cost above the burst", r.stderr, "--cost 4 is more than the burst", `"jobs/c"`, "lower --cost")
}

// testRunRateErrors: the rate flags' bad values are refused before any
// connection, each naming its flag.
func testRunRateErrors(t *testing.T, c cli) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--rate", "", "--", "true"}, "--rate is empty"},
		{[]string{"run", "--rate", strings.Repeat("k", 257), "--", "true"}, "--rate KEY must be at most 256 bytes, got 257 bytes"},
		{[]string{"run", "--rate", "k", "--cost", "0", "--", "true"}, "--cost must be a whole number of at least 1, got 0"},
		{[]string{"run", "--lease", "x", "--cost", "2", "--", "true"}, "--cost needs --rate KEY"},
		{[]string{"run", "--rate", "k"}, "no COMMAND to run"},
		{[]string{"run", "--", "true"}, "--rate KEY"},
	} {
		r := c.mustRun(exitUsage, tc.args...)
		requireContains(t, "stderr of pglease "+strings.Join(tc.args, " ")[:min(60, len(strings.Join(tc.args, " ")))], r.stderr, tc.want)
		requireOneLine(t, "stderr of pglease run", r.stderr)
	}
	r := c.mustRun(0, "run", "-h")
	requireContains(t, "run -h", r.stdout, "--rate KEY", "--cost N", "pglease.take")
}
