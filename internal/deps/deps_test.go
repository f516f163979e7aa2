// Package deps_test checks that the library packages services import stay
// light: pgx and golang-migrate, never Docker clients, test harnesses or
// benchmarking code.
package deps_test

import (
	"os/exec"
	"strings"
	"testing"
)

func TestLibraryDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}",
		"github.com/pglease/pglease/pglease",
		"github.com/pglease/pglease/runslots",
		"github.com/pglease/pglease/supervisor",
	).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/testcontainers/", "github.com/docker/", "github.com/moby/",
		"github.com/pglease/pglease/internal/pgtest", "github.com/pglease/pglease/internal/pgserver",
		"github.com/pglease/pglease/internal/faultproxy", "go.uber.org/goleak",
	}
	var modules []string
	for _, pkg := range strings.Fields(string(out)) {
		for _, f := range forbidden {
			if pkg == f || strings.HasPrefix(pkg, f) && strings.HasSuffix(f, "/") {
				t.Errorf("library packages depend on %s", pkg)
			}
		}
		if !strings.HasPrefix(pkg, "github.com/pglease/") {
			modules = append(modules, pkg)
		}
	}
	t.Logf("third-party packages the library pulls: %d (pgx, golang-migrate and their deps)", len(modules))
	for _, p := range modules {
		if !strings.HasPrefix(p, "github.com/jackc/") && !strings.HasPrefix(p, "github.com/golang-migrate/") &&
			!strings.HasPrefix(p, "golang.org/x/") {
			t.Errorf("unexpected third-party dependency of the library: %s", p)
		}
	}
}
