package upgradetest

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestVerifyRefusesChangedRelease runs scripts/verify-schema.sh (make
// verify) on a copy of the schema files: it passes on the copy as it is,
// and fails, naming the file and what to do, when one byte of any released
// file changed, when a released file's checksum is missing from
// sql/released.sha256, when a generated file is stale, and when
// migrations/ holds a file that is neither released nor generated.
func TestVerifyRefusesChangedRelease(t *testing.T) {
	root := repoRoot(t)
	released := strings.Fields(runScript(t, copyTree(t, root), "scripts/released-files.sh", true))
	vs := versions(t)
	for _, v := range vs.released() {
		if !slices.Contains(released, "sql/releases/"+v+".catalog") {
			t.Fatalf("scripts/released-files.sh lists %q: not the catalog of released %s", released, v)
		}
	}
	if !slices.Contains(released, "migrations/000002_pglease_0_2_0.up.sql") {
		t.Fatalf("scripts/released-files.sh lists %q: not migration 000002 of 0.2.0", released)
	}

	t.Run("unchanged", func(t *testing.T) {
		out := runScript(t, copyTree(t, root), "scripts/verify-schema.sh", true)
		if !strings.Contains(out, "released schema files unchanged") {
			t.Fatalf("verify-schema.sh on an unchanged copy: got %q", out)
		}
	})
	for _, f := range released {
		t.Run("one byte of "+f, func(t *testing.T) {
			dir := copyTree(t, root)
			path := filepath.Join(dir, f)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x20 // one byte, in the middle
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out := runScript(t, dir, "scripts/verify-schema.sh", false)
			for _, want := range []string{"a released schema file changed", f + ": FAILED", "Released files never change"} {
				if !strings.Contains(out, want) {
					t.Fatalf("verify-schema.sh with %s changed: got %q, want it to say %q", f, out, want)
				}
			}
		})
	}
	t.Run("checksum missing", func(t *testing.T) {
		dir := copyTree(t, root)
		sums := filepath.Join(dir, "sql", "released.sha256")
		b, err := os.ReadFile(sums)
		if err != nil {
			t.Fatal(err)
		}
		const f = "extension/pglease--0.2.0--0.1.0.sql"
		var kept []byte
		for line := range bytes.Lines(b) {
			if !bytes.HasSuffix(line, []byte("  "+f+"\n")) {
				kept = append(kept, line...)
			}
		}
		if len(kept) == len(b) {
			t.Fatalf("sql/released.sha256 has no checksum of %s", f)
		}
		if err := os.WriteFile(sums, kept, 0o644); err != nil {
			t.Fatal(err)
		}
		out := runScript(t, dir, "scripts/verify-schema.sh", false)
		if want := f + " belongs to a released version but sql/released.sha256 has no checksum of it: run make freeze"; !strings.Contains(out, want) {
			t.Fatalf("verify-schema.sh without the checksum of %s: got %q, want it to say %q", f, out, want)
		}

		// make freeze records it again, and only it.
		if out := runScript(t, dir, "scripts/freeze-schema.sh", true); !strings.Contains(out, "freeze: recorded "+f+"\nfreeze: 1 file(s) recorded") {
			t.Fatalf("freeze-schema.sh: got %q, want it to record %s alone", out, f)
		}
		runScript(t, dir, "scripts/verify-schema.sh", true)
	})
	t.Run("freeze refuses a changed release", func(t *testing.T) {
		dir := copyTree(t, root)
		const f = "migrations/000002_pglease_0_2_0.up.sql"
		path := filepath.Join(dir, f)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		sums := filepath.Join(dir, "sql", "released.sha256")
		before, err := os.ReadFile(sums)
		if err != nil {
			t.Fatal(err)
		}
		out := runScript(t, dir, "scripts/freeze-schema.sh", false)
		if want := f + ": FAILED"; !strings.Contains(out, want) || !strings.Contains(out, "never re-freeze it") {
			t.Fatalf("freeze-schema.sh with %s changed: got %q, want it to refuse naming the file", f, out)
		}
		if after, err := os.ReadFile(sums); err != nil || !bytes.Equal(before, after) {
			t.Fatalf("freeze-schema.sh changed sql/released.sha256 although it refused (%v)", err)
		}
	})
	t.Run("stale head", func(t *testing.T) {
		dir := copyTree(t, root)
		f := filepath.Join(dir, "sql", "functions", "01_version.sql")
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(b, []byte("\n-- an edit\n")...), 0o644); err != nil {
			t.Fatal(err)
		}
		out := runScript(t, dir, "scripts/verify-schema.sh", false)
		if want := "extension/pglease--" + vs.head() + ".sql is stale: run make generate"; !strings.Contains(out, want) {
			t.Fatalf("verify-schema.sh after an edit of sql/: got %q, want it to say %q", out, want)
		}
	})
	t.Run("stray file", func(t *testing.T) {
		dir := copyTree(t, root)
		const f = "migrations/000009_hand_written.up.sql"
		if err := os.WriteFile(filepath.Join(dir, f), []byte("SELECT 1;\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := runScript(t, dir, "scripts/verify-schema.sh", false)
		if want := f + " is neither released"; !strings.Contains(out, want) {
			t.Fatalf("verify-schema.sh with %s: got %q, want it to say %q", f, out, want)
		}
	})
}

// copyTree copies what scripts/verify-schema.sh reads (scripts/, sql/,
// migrations/ and extension/) into a new directory and returns it.
func copyTree(t *testing.T, root string) string {
	t.Helper()
	dir := t.TempDir()
	for _, sub := range []string{"scripts", "sql", "migrations", "extension"} {
		err := filepath.WalkDir(filepath.Join(root, sub), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.MkdirAll(filepath.Join(dir, rel), 0o755)
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, rel), b, info.Mode().Perm())
		})
		if err != nil {
			t.Fatalf("copy %s: %v", sub, err)
		}
	}
	return dir
}

// runScript runs script (relative to dir) and returns its output (stdout
// and stderr); it fails the test unless the script succeeded (ok) or
// failed (!ok).
func runScript(t *testing.T, dir, script string, ok bool) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "sh", filepath.Join(dir, script))
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if (err == nil) != ok {
		t.Fatalf("%s: got error %v, want success %v\nstdout:\n%s\nstderr:\n%s", script, err, ok, stdout.String(), stderr.String())
	}
	if !ok {
		return stderr.String()
	}
	return stdout.String() + stderr.String()
}
