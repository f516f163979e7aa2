package contract

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runPsql runs the real psql on script against the database at url, with
// psql variable name set to name, and returns its stdout, stderr and exit
// code.
func runPsql(t *testing.T, url, name, script string) (stdout, stderr string, code int) {
	t.Helper()
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql must be on PATH for the psql contract test: %v", err)
	}
	file := filepath.Join(t.TempDir(), "script.sql")
	if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(testContext(t), psql,
		"-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-v", "name="+name, "-d", url, "-f", file)
	var out, errOut bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errOut
	err = cmd.Run()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		code = exitErr.ExitCode()
	default:
		t.Fatalf("run psql: %v", err)
	}
	return out.String(), errOut.String(), code
}

// testPsql drives a lease through the real psql binary, as a shell script
// or an operator would.
func testPsql(t *testing.T, db *testDB) {
	name := namer(t)("lease")

	stdout, stderr, code := runPsql(t, db.url, name, `
\set VERBOSITY verbose
SELECT acquired, fence FROM pglease.acquire(:'name', 'psql-holder', '30 seconds') \gset
\echo acquired=:acquired fence=:fence
SELECT 'renewed=' || renewed || ' expires_in=' || expires_in
FROM pglease.renew(:'name', 'psql-holder', :fence, '30 seconds');
BEGIN;
SELECT pglease.assert_held(:'name', :fence);
COMMIT;
SELECT 'released=' || released FROM pglease.release(:'name', 'psql-holder', :fence);
SELECT 'state=' || state || ' fence=' || fence FROM pglease.lease_status WHERE name = :'name';
`)
	if code != 0 {
		t.Fatalf("psql exit code: got %d, want 0; stderr:\n%s", code, stderr)
	}
	want := strings.Join([]string{
		"acquired=t fence=1",
		"renewed=true expires_in=00:00:30",
		"", // assert_held returns void
		"released=true",
		"state=free fence=1",
		"",
	}, "\n")
	if stdout != want {
		t.Fatalf("psql output:\ngot  %q\nwant %q", stdout, want)
	}

	// A stale fence stops the script with PGL01.
	stdout, stderr, code = runPsql(t, db.url, name, `
\set VERBOSITY verbose
SELECT fence FROM pglease.acquire(:'name', 'psql-holder-2', '30 seconds') \gset
\echo fence=:fence
BEGIN;
SELECT pglease.assert_held(:'name', 1);
COMMIT;
\echo not reached
`)
	if code != 3 {
		t.Fatalf("psql exit code with a stale fence: got %d, want 3 (ON_ERROR_STOP); stderr:\n%s", code, stderr)
	}
	if stdout != "fence=2\n" {
		t.Fatalf("psql output with a stale fence: got %q, want %q", stdout, "fence=2\n")
	}
	if !strings.Contains(stderr, "PGL01") || !strings.Contains(stderr, "current fence is 2") {
		t.Fatalf("psql stderr with a stale fence: got %q, want SQLSTATE PGL01 and \"current fence is 2\"", stderr)
	}
}
