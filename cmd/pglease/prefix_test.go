//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
)

// testPrefix binds a prefix, sees it in prefix list and in the OWNER of
// status (as the owner and as a client), is refused as a client with the
// way out, and unbinds it.
func testPrefix(t *testing.T, c cli) {
	url := pgtest.NewMigrated(t)
	owner := c.with("PGLEASE_DATABASE_URL=" + url)
	ctx := t.Context()

	r := c.mustRun(0, "help")
	requireContains(t, "help", r.stdout, "prefix")
	r = c.mustRun(0, "help", "prefix")
	requireContains(t, "help prefix", r.stdout, "Usage: pglease prefix bind PREFIX ROLE", "unbind PREFIX", "list [--json]",
		"owner of schema pglease", `"bound_at"`, "--json")
	for _, args := range [][]string{
		{"prefix"},
		{"prefix", "sideways"},
		{"prefix", "bind", "billing/"},
		{"prefix", "bind", "billing/", "r", "extra"},
		{"prefix", "unbind"},
		{"prefix", "list", "extra"},
		{"prefix", "bind", "billing/", "r", "--json"},
		{"prefix", "bind", "", "r"},
		{"prefix", "unbind", strings.Repeat("x", 257)},
	} {
		r := owner.mustRun(2, args...)
		requireOneLine(t, "stderr of pglease "+strings.Join(args, " "), r.stderr)
		requireContains(t, "stderr of pglease "+strings.Join(args, " "), r.stderr, "pglease help prefix")
	}

	if r := owner.mustRun(0, "prefix", "list"); r.stdout != "No bound prefixes.\n" {
		t.Fatalf("prefix list of a fresh database: got %q, want %q", r.stdout, "No bound prefixes.\n")
	}
	if got := readPrefixes(t, owner); len(got) != 0 {
		t.Fatalf("prefix list --json of a fresh database: got %+v, want []", got)
	}

	service := fmt.Sprintf("pglease_cli_prefix_%d", time.Now().UnixNano())
	createRole(t, service)
	r = owner.mustRun(1, "prefix", "bind", "billing/", "pglease_no_such_role")
	requireOneLine(t, "prefix bind of an unknown role", r.stderr)
	requireContains(t, "prefix bind of an unknown role", r.stderr, "prefix bind:", "role pglease_no_such_role does not exist")
	r = owner.mustRun(0, "prefix", "bind", "billing/", service)
	if want := `bound prefix "billing/" to role ` + service + "\n"; r.stdout != want {
		t.Fatalf("prefix bind: got %q, want %q", r.stdout, want)
	}
	r = owner.mustRun(0, "prefix", "bind", "billing/", service)
	requireContains(t, "prefix bind again", r.stdout, "it was already")

	r = owner.mustRun(0, "prefix", "list")
	requireContains(t, "prefix list", r.stdout, "PREFIX", "ROLE", "BOUND AT", "billing/", service)
	got := readPrefixes(t, owner)
	if len(got) != 1 || got[0].Prefix != "billing/" || got[0].Role != service || time.Since(got[0].BoundAt) > time.Minute {
		t.Fatalf("prefix list --json: got %+v, want billing/ bound to %s just now", got, service)
	}

	// The schema owner (a superuser: a member of every role) takes a lease
	// under the prefix, and a shared one; status shows whose each is.
	pool := pgtest.Pool(t, url)
	leases, err := pglease.New(pool, pglease.Config{Holder: "test-holder"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"billing/nightly", "shared"} {
		if _, err := leases.TryAcquire(ctx, name, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	st := readStatus(t, owner)
	if len(st.Leases) != 2 || st.Leases[0].Owner == nil || *st.Leases[0].Owner != service || st.Leases[1].Owner != nil {
		t.Fatalf("status --json: got %+v, want billing/nightly owned by %s and shared by nobody", st.Leases, service)
	}
	r = owner.mustRun(0, "status")
	requireOwnerColumn(t, r.stdout, map[string]string{"billing/nightly": service, "shared": "-"})

	// A client: it sees the owners, and may not bind, unbind or list.
	client := c.with("PGLEASE_DATABASE_URL=" + loginURL(t, url, true))
	r = client.mustRun(0, "status")
	requireOwnerColumn(t, r.stdout, map[string]string{"billing/nightly": service, "shared": "-"})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"prefix", "bind", "other/", service}, "prefix bind: binding a prefix is the schema owner's: run as the role that owns schema pglease"},
		{[]string{"prefix", "unbind", "billing/"}, "prefix unbind: unbinding a prefix is the schema owner's: run as the role that owns schema pglease"},
		{[]string{"prefix", "list"}, "prefix list: listing the bound prefixes is the schema owner's: run as the role that owns schema pglease"},
	} {
		what := "pglease " + strings.Join(tc.args, " ") + " as a client"
		r := client.mustRun(1, tc.args...)
		requireOneLine(t, what, r.stderr)
		requireContains(t, what, r.stderr, tc.want)
		if strings.Contains(r.stderr, "GRANT pglease_client") {
			t.Fatalf("%s: asks for pglease_client, which the role has: %q", what, r.stderr)
		}
	}

	r = owner.mustRun(0, "prefix", "unbind", "billing/")
	if want := `unbound prefix "billing/" from role ` + service + ": its names are shared again\n"; r.stdout != want {
		t.Fatalf("prefix unbind: got %q, want %q", r.stdout, want)
	}
	r = owner.mustRun(0, "prefix", "unbind", "billing/")
	requireContains(t, "prefix unbind again", r.stdout, "was not bound")
	if r := owner.mustRun(0, "status"); strings.Contains(r.stdout, "OWNER") {
		t.Fatalf("status with no owned lease: got an OWNER column\n%s", r.stdout)
	}
}

// prefixRow is one prefix in the documented shape of prefix list --json.
type prefixRow struct {
	Prefix  string    `json:"prefix"`
	Role    string    `json:"role"`
	BoundAt time.Time `json:"bound_at"`
}

// readPrefixes runs prefix list --json and decodes it strictly.
func readPrefixes(t *testing.T, c cli) []prefixRow {
	t.Helper()
	r := c.mustRun(0, "prefix", "list", "--json")
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.DisallowUnknownFields()
	var out struct {
		Prefixes []prefixRow `json:"prefixes"`
	}
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("decode prefix list --json: %v\n%s", err, r.stdout)
	}
	if out.Prefixes == nil {
		t.Fatalf("prefix list --json: prefixes is null, want an array\n%s", r.stdout)
	}
	return out.Prefixes
}

// requireOwnerColumn checks the OWNER column of the leases table of
// status: want maps lease names to their owner ("-": none).
func requireOwnerColumn(t *testing.T, stdout string, want map[string]string) {
	t.Helper()
	lines := strings.Split(stdout, "\n")
	header := strings.Fields(lines[0])
	if len(header) == 0 || header[len(header)-1] != "OWNER" {
		t.Fatalf("status: leases header %q, want OWNER last\n%s", lines[0], stdout)
	}
	for _, line := range lines[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		if w, ok := want[f[0]]; ok {
			if f[len(f)-1] != w {
				t.Fatalf("status: lease %s owned by %q, want %q\n%s", f[0], f[len(f)-1], w, stdout)
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 {
		t.Fatalf("status: leases %v missing\n%s", want, stdout)
	}
}

// createRole creates NOLOGIN role name, dropped when the test ends.
func createRole(t *testing.T, name string) {
	t.Helper()
	admin, err := pgx.Connect(t.Context(), pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(t.Context(), `CREATE ROLE `+name+` NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if conn, err := pgx.Connect(context.Background(), pgtest.AdminURL(t)); err == nil {
			_, _ = conn.Exec(context.Background(), `DROP ROLE `+name)
			_ = conn.Close(context.Background())
		}
	})
}
