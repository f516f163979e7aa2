package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/migrations"
)

var versionCommand = &command{
	name:    "version",
	summary: "Print the version of pglease and of the schema it installs",
	usage: `
Usage: pglease version
       pglease --version

Prints the version of this build of pglease (its module version, and the
commit it was built from when known) and the version of the pglease schema
that its 'migrate up' installs. 'pglease migrate version' prints the
version a database has.`,
	flags: func(a *app, _ *flag.FlagSet) func(context.Context, []string) error {
		return func(_ context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("version", "takes no arguments, got %q", args)
			}
			fmt.Fprintf(a.stdout, "pglease %s\nschema %s (migration %d; 'pglease migrate up' installs it)\n",
				buildVersion(), schemaRelease(schema.Latest()), schema.Latest())
			return nil
		}
	},
}

// buildVersion describes this build: the module version ("(devel)" for a
// build from a clone), the commit and whether the tree was modified, and
// the Go version and platform.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown version), " + runtime.Version()
	}
	parts := []string{info.Main.Version}
	var revision, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision != "" && !strings.Contains(info.Main.Version, revision[:min(len(revision), 12)]) {
		commit := "commit " + revision[:min(len(revision), 12)]
		if modified == "true" {
			commit += " (modified)"
		}
		parts = append(parts, commit)
	}
	parts = append(parts, info.GoVersion+" "+runtime.GOOS+"/"+runtime.GOARCH)
	return strings.Join(parts, ", ")
}

// schemaRelease returns the pglease version of migration n, such as
// "0.3.0", from its file name (NNNNNN_pglease_0_3_0.up.sql,
// scripts/gen-schema.sh); "0.1.0" for the first, which has no suffix.
func schemaRelease(n uint) string {
	names, _ := fs.Glob(migrations.FS, fmt.Sprintf("%06d_*.up.sql", n)) // the pattern is valid
	if len(names) != 1 {
		return "version unknown"
	}
	name := strings.TrimSuffix(names[0], ".up.sql")
	_, release, ok := strings.Cut(name, "_pglease_")
	if !ok {
		if n == 1 {
			return "0.1.0"
		}
		return "version unknown"
	}
	return strings.ReplaceAll(release, "_", ".")
}
