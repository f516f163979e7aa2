// Package deps_test checks that what users run stays light: the library
// packages services import and the pglease binary link pgx and
// golang-migrate, never container runtimes, test harnesses or benchmarking
// code; and the client packages a service imports link no migrations.
package deps_test

import (
	"os/exec"
	"strings"
	"testing"
)

// harness is what neither the library nor the binary may link.
var harness = []string{
	"github.com/testcontainers/", "github.com/docker/", "github.com/moby/", "go.opentelemetry.io/",
	"github.com/pglease/pglease/internal/pgtest", "github.com/pglease/pglease/internal/pgcontainer",
	"github.com/pglease/pglease/internal/faultproxy", "go.uber.org/goleak",
}

func TestDependencies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pkgs      []string
		forbidden []string
	}{
		{"library", []string{
			"github.com/pglease/pglease/pglease",
			"github.com/pglease/pglease/runslots",
			"github.com/pglease/pglease/supervisor",
			"github.com/pglease/pglease/pgleaseadmin",
			"github.com/pglease/pglease/pgleasemigrate",
		}, append([]string{"github.com/pglease/pglease/internal/pgserver"}, harness...)},
		{"clients", []string{
			"github.com/pglease/pglease/pglease",
			"github.com/pglease/pglease/runslots",
			"github.com/pglease/pglease/supervisor",
			"github.com/pglease/pglease/pgleaseadmin",
		}, append([]string{
			"github.com/golang-migrate/", "github.com/pglease/pglease/internal/schema",
			"github.com/pglease/pglease/migrations", "github.com/pglease/pglease/migrations/", "github.com/pglease/pglease/pgleasemigrate",
		}, harness...)},
		{"binary", []string{"github.com/pglease/pglease/cmd/pglease"}, harness},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, tc.pkgs...)
			out, err := exec.Command("go", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("go list -deps: %v\n%s", err, out)
			}
			var thirdParty int
			for _, pkg := range strings.Fields(string(out)) {
				for _, f := range tc.forbidden {
					if pkg == f || strings.HasPrefix(pkg, f) && strings.HasSuffix(f, "/") {
						t.Errorf("%s depends on %s", tc.name, pkg)
					}
				}
				if strings.HasPrefix(pkg, "github.com/pglease/") {
					continue
				}
				thirdParty++
				if !strings.HasPrefix(pkg, "github.com/jackc/") && !strings.HasPrefix(pkg, "github.com/golang-migrate/") &&
					!strings.HasPrefix(pkg, "golang.org/x/") {
					t.Errorf("unexpected third-party dependency of the %s: %s", tc.name, pkg)
				}
			}
			t.Logf("third-party packages the %s pulls: %d (pgx, golang-migrate and their deps)", tc.name, thirdParty)
		})
	}
}
