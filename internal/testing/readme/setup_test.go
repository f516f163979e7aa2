package readme_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// TestREADMESetup runs the README's set-up commands as pasted, in a new Go
// module as a service would, with DATABASE_URL set to an empty database:
// go get adds the driver, and `go run .../cmd/pglease migrate up` installs
// the head schema.
//
// The module is not fetched from the network: a replace directive points
// github.com/pglease/pglease at this checkout, GOPROXY=off keeps every
// other module in the module cache, and the checkout's go.sum stands in
// for the checksum database. The new module's go get loads go.mod files
// that building the checkout never reads (logr v1.2.2's, say, required by
// stdr): go list -m all in the checkout puts every one of its module
// graph in the cache first, with the environment's GOPROXY, and is a no-op
// where they are there already.
func TestREADMESetup(t *testing.T) {
	root := repoRoot(t)
	cmds := readmeBlock(t, "sh", "Install")
	if !strings.Contains(cmds, "go get ") || !strings.Contains(cmds, " migrate up") {
		t.Fatalf("the README's set-up block lost its go get or its migrate up:\n%s", cmds)
	}
	url := pgtest.NewDatabase(t)

	dir := t.TempDir()
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	graph := exec.Command("go", "list", "-m", "all")
	graph.Dir = root
	if out, err := graph.CombinedOutput(); err != nil {
		t.Fatalf("go list -m all in %s, to have the module graph's go.mod files in the module cache: %v\n%s", root, err, out)
	}
	env := append(os.Environ(), "GOPROXY=off", "GOWORK=off", "GOFLAGS=-mod=mod", "DATABASE_URL="+url)
	run := func(script string) {
		t.Helper()
		cmd := exec.Command("sh", "-e", "-c", script)
		cmd.Dir = dir
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v\n%s\nThe commands:\n%s", err, out, script)
		}
	}
	run("go mod init example.com/service && go mod edit -replace github.com/pglease/pglease=" + root)
	run(cmds)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var got string
	if err := conn.QueryRow(ctx, "SELECT pglease.version()").Scan(&got); err != nil {
		t.Fatalf("after the README's set-up commands: %v", err)
	}
	if want := headVersion(t); got != want {
		t.Fatalf("after the README's set-up commands the schema is %s, want the head, %s", got, want)
	}
}

// headVersion returns the last version of sql/versions, the head schema.
func headVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "sql", "versions"))
	if err != nil {
		t.Fatal(err)
	}
	head := ""
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			head = f[0]
		}
	}
	if head == "" {
		t.Fatal("sql/versions lists no version")
	}
	return head
}
