package layout_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// harness is what neither the library nor the binary may link: test
// harnesses (internal/testing/), container runtimes, and the OpenTelemetry
// SDK (tests use it through internal/testing/metrictest).
var harness = []string{
	"github.com/pglease/pglease/internal/testing/",
	"github.com/testcontainers/", "github.com/docker/", "github.com/moby/",
	"go.uber.org/goleak", "go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/sdk/",
}

// exporters are what the library may not link: a service picks how its
// metrics leave the process.
var exporters = []string{
	"go.opentelemetry.io/otel/exporters/", "go.opentelemetry.io/contrib/", "github.com/prometheus/",
	"google.golang.org/grpc", "google.golang.org/protobuf/",
}

// allowed are the third-party modules the library and the binary may
// link: pgx, golang-migrate and their dependencies, and the OpenTelemetry
// API (go.opentelemetry.io/otel and what its global provider pulls in:
// go-logr for its internal logging, xxhash for attribute sets, and
// go.opentelemetry.io/auto/sdk, the tracer its global provider offers to
// eBPF auto-instrumentation, which drops everything unless that attaches;
// pglease makes no spans).
var allowed = []string{
	"github.com/jackc/", "github.com/golang-migrate/", "golang.org/x/",
	"go.opentelemetry.io/otel", "go.opentelemetry.io/auto/sdk", "github.com/go-logr/", "github.com/cespare/xxhash/",
}

// TestDependencies checks that what users run stays light: the library
// packages services import and the pglease binary link pgx,
// golang-migrate and the OpenTelemetry API, never container runtimes, test
// harnesses, benchmarking code, or an OpenTelemetry SDK or exporter (a
// service installs those); and the client packages a service imports link
// no migrations. `go version -m` on the binary shows the same.
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
			"github.com/pglease/pglease/shardgroup",
			"github.com/pglease/pglease/pgleaseadmin",
			"github.com/pglease/pglease/pgleasemigrate",
		}, slices.Concat([]string{"github.com/pglease/pglease/internal/pgserver"}, harness, exporters)},
		{"clients", []string{
			"github.com/pglease/pglease/pglease",
			"github.com/pglease/pglease/runslots",
			"github.com/pglease/pglease/supervisor",
			"github.com/pglease/pglease/shardgroup",
			"github.com/pglease/pglease/pgleaseadmin",
		}, slices.Concat([]string{
			"github.com/golang-migrate/", "github.com/pglease/pglease/internal/schema",
			"github.com/pglease/pglease/migrations", "github.com/pglease/pglease/migrations/", "github.com/pglease/pglease/pgleasemigrate",
		}, harness, exporters)},
		{"binary", []string{"github.com/pglease/pglease/cmd/pglease"}, slices.Concat(harness, exporters)},
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
				if !slices.ContainsFunc(allowed, func(p string) bool { return strings.HasPrefix(pkg, p) }) {
					t.Errorf("unexpected third-party dependency of the %s: %s", tc.name, pkg)
				}
			}
			t.Logf("third-party packages the %s pulls: %d (pgx, golang-migrate, the OpenTelemetry API and their deps)", tc.name, thirdParty)
		})
	}
}

// TestMetricsAPIOnly: the packages a service imports measure through the
// OpenTelemetry metric API, and link no part of an SDK or exporter: those
// are the service's choice, and until it installs one every measurement
// is a no-op.
func TestMetricsAPIOnly(t *testing.T) {
	for _, pkg := range []string{
		"github.com/pglease/pglease/pglease",
		"github.com/pglease/pglease/runslots",
		"github.com/pglease/pglease/supervisor",
	} {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		deps := strings.Fields(string(out))
		if !slices.Contains(deps, "go.opentelemetry.io/otel/metric") {
			t.Errorf("%s does not link go.opentelemetry.io/otel/metric: where do its instruments come from?", pkg)
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "go.opentelemetry.io/") && !strings.HasPrefix(d, "go.opentelemetry.io/auto/sdk") &&
				(strings.Contains(d, "/sdk") || strings.Contains(d, "/exporters/") || strings.Contains(d, "/contrib/")) {
				t.Errorf("%s links %s: the library may use the OpenTelemetry API only", pkg, d)
			}
		}
	}
}
