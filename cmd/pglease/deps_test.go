package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestShipsLight checks that the pglease binary links no test harness: no
// container runtime (testcontainers, the Docker client), no OpenTelemetry
// SDK or exporter (the library's metrics use the API only), no fault proxy,
// no test helpers. `go version -m` on the binary shows the same.
func TestShipsLight(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/testcontainers/", "github.com/docker/", "github.com/moby/",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/sdk/", "go.opentelemetry.io/otel/exporters/", "go.opentelemetry.io/contrib/",
		"github.com/pglease/pglease/internal/testing/pgtest", "github.com/pglease/pglease/internal/testing/pgcontainer",
		"github.com/pglease/pglease/internal/testing/faultproxy", "github.com/pglease/pglease/internal/testing/metrictest", "go.uber.org/goleak",
	}
	pkgs := strings.Fields(string(out))
	for _, pkg := range pkgs {
		for _, f := range forbidden {
			if pkg == f || strings.HasSuffix(f, "/") && strings.HasPrefix(pkg, f) {
				t.Errorf("cmd/pglease depends on %s", pkg)
			}
		}
	}
	t.Logf("cmd/pglease links %d non-standard packages", len(pkgs))
}
