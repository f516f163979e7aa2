// Package layout_test checks the shape of the tree: that the Layout table
// of CONTRIBUTING.md names every folder and package and that the imports
// it allows are the only ones made (layout_test.go), and what the library
// and the binary link (deps_test.go).
package layout_test

import (
	"bufio"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the import path of the module, and of the folders of the tree
// below it (bench/ and examples/metrics are modules of their own whose
// paths follow their folders).
const module = "github.com/pglease/pglease"

// testingDir is the folder of the test harnesses: only a row naming it, or
// a folder below it, may import them.
const testingDir = "internal/testing"

// row is one row of the Layout table.
type row struct {
	line     int      // in CONTRIBUTING.md
	folders  []string // column 1, without trailing slashes
	anything bool     // column 3 says "anything"
	imports  []string // column 3's folders, without trailing slashes
}

// TestLayout checks CONTRIBUTING.md's Layout table against the tree: every
// top-level folder, and every folder of internal/ and internal/testing/,
// has a row; every folder the table names exists; every Go package falls
// under a row, and its non-test files import, of this module, only what
// its row allows.
func TestLayout(t *testing.T) {
	root := moduleRoot(t)
	rows := layoutTable(t, filepath.Join(root, "CONTRIBUTING.md"))
	files := treeFiles(t, root)

	named := map[string]bool{}
	for _, r := range rows {
		for _, f := range r.folders {
			named[f] = true
		}
		for _, f := range slices.Concat(r.folders, r.imports) {
			if fi, err := os.Stat(filepath.Join(root, f)); err != nil || !fi.IsDir() {
				t.Errorf("CONTRIBUTING.md:%d: the Layout names %s/, which is not a folder of the tree", r.line, f)
			}
		}
	}

	tops, internals := map[string]bool{}, map[string]bool{}
	pkgs := map[string][]string{} // folder of a Go package: its non-test files
	for _, f := range files {
		parts := strings.Split(f, "/")
		if len(parts) > 1 {
			tops[parts[0]] = true
		}
		switch {
		case len(parts) > 3 && parts[0]+"/"+parts[1] == testingDir:
			internals[path.Join(parts[:3]...)] = true
		case len(parts) > 2 && parts[0] == "internal" && parts[1] != "testing":
			internals[path.Join(parts[:2]...)] = true
		}
		if strings.HasSuffix(f, ".go") {
			dir := path.Dir(f)
			if !strings.HasSuffix(f, "_test.go") {
				pkgs[dir] = append(pkgs[dir], f)
			} else if _, ok := pkgs[dir]; !ok {
				pkgs[dir] = nil
			}
		}
	}
	for _, top := range slices.Sorted(maps.Keys(tops)) {
		if !slices.ContainsFunc(rows, func(r row) bool { return r.namesWithin(top) }) {
			t.Errorf("top-level folder %s/ has no row in CONTRIBUTING.md's Layout", top)
		}
	}
	for _, dir := range slices.Sorted(maps.Keys(internals)) {
		if !named[dir] {
			t.Errorf("%s has no row of its own in CONTRIBUTING.md's Layout", dir)
		}
	}

	fset := token.NewFileSet()
	for _, dir := range slices.Sorted(maps.Keys(pkgs)) {
		r, ok := rowOf(rows, dir)
		if !ok {
			t.Errorf("Go package %s falls under no row of CONTRIBUTING.md's Layout", dir)
			continue
		}
		for _, f := range pkgs[dir] {
			file, err := parser.ParseFile(fset, filepath.Join(root, f), nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, spec := range file.Imports {
				imp, err := strconv.Unquote(spec.Path.Value)
				if err != nil {
					t.Fatal(err)
				}
				target, ok := strings.CutPrefix(imp, module+"/")
				if !ok || r.allows(target) {
					continue
				}
				t.Errorf("%s imports %s, which its row of CONTRIBUTING.md's Layout (line %d) does not allow", f, target, r.line)
			}
		}
	}
	t.Logf("%d rows, %d top-level folders, %d Go packages", len(rows), len(tops), len(pkgs))
}

// allows reports whether a non-test file under r may import the package
// of this module in folder target.
func (r row) allows(target string) bool {
	if r.anything {
		return true
	}
	return slices.ContainsFunc(r.imports, func(f string) bool {
		return within(target, f) && (!within(target, testingDir) || within(f, testingDir))
	})
}

// namesWithin reports whether r names folder dir or a folder below it.
func (r row) namesWithin(dir string) bool {
	return slices.ContainsFunc(r.folders, func(f string) bool { return within(f, dir) })
}

// rowOf returns the row naming the longest folder that holds dir.
func rowOf(rows []row, dir string) (row, bool) {
	var best row
	longest := -1
	for _, r := range rows {
		for _, f := range r.folders {
			if within(dir, f) && len(f) > longest {
				best, longest = r, len(f)
			}
		}
	}
	return best, longest >= 0
}

// within reports whether folder dir is folder f or lies below it.
func within(dir, f string) bool {
	return dir == f || strings.HasPrefix(dir, f+"/")
}

// code is a code span of Markdown: a folder in the table.
var code = regexp.MustCompile("`([^`]+)`")

// layoutTable parses the table of the section "## Layout" of the Markdown
// file at name: | folders | what lives there | what they may import |.
func layoutTable(t *testing.T, name string) []row {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []row
	in, seen := false, 0
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.HasPrefix(text, "## ") {
			in = text == "## Layout"
			continue
		}
		if !in || !strings.HasPrefix(text, "|") {
			continue
		}
		if seen++; seen <= 2 { // the header and the delimiter row
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("%s:%d: a row of the Layout table has %d cells, want 3: %s", name, line, len(cells), text)
		}
		r := row{line: line, folders: folders(cells[0]), imports: folders(cells[2])}
		r.anything = strings.TrimSpace(cells[2]) == "anything"
		if len(r.folders) == 0 {
			t.Fatalf("%s:%d: a row of the Layout table names no folder: %s", name, line, text)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table under ## Layout", name)
	}
	return rows
}

// folders returns the code spans of a cell, without trailing slashes.
func folders(cell string) []string {
	var fs []string
	for _, m := range code.FindAllStringSubmatch(cell, -1) {
		fs = append(fs, strings.TrimSuffix(m[1], "/"))
	}
	return fs
}

// treeFiles returns the files of the tree, relative to root, slash
// separated: those git tracks, and new ones it does not ignore.
func treeFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil { // not deleted
			files = append(files, f)
		}
	}
	return files
}

// moduleRoot returns the folder of the module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out)))
}
