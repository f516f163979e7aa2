// Package readme_test keeps the README a front door that works as pasted:
// at most 8 KB, every code block run by a test (its Go program built and
// run against a real Postgres, its set-up commands run in a scratch
// module, its psql block by scripts/test-readme-psql.sh), the Go programs
// of docs/ built, and every relative link of the docs pointing at a file
// and heading that exist.
package readme_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// block is one fenced code block of a markdown file.
type block struct {
	lang    string // the info string after ```, "" for none
	body    string // the lines between the fences, each ending in \n
	line    int    // the line of the opening fence, from 1
	section string // the text of the last ## or ### heading before it
}

// fencedBlocks returns the fenced code blocks of markdown, and the line
// numbers of lines that markdown renders as indented code blocks (four
// spaces or a tab after a blank line, outside fences).
func fencedBlocks(markdown string) (blocks []block, indented []int) {
	lines := strings.Split(markdown, "\n")
	section := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.HasPrefix(l, "```"):
			b := block{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 1, section: section}
			var body strings.Builder
			for i++; i < len(lines) && !strings.HasPrefix(lines[i], "```"); i++ {
				body.WriteString(lines[i] + "\n")
			}
			b.body = body.String()
			blocks = append(blocks, b)
		case strings.HasPrefix(l, "## "), strings.HasPrefix(l, "### "):
			section = strings.TrimSpace(strings.TrimLeft(l, "#"))
		case (strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t")) &&
			strings.TrimSpace(l) != "" && i > 0 && strings.TrimSpace(lines[i-1]) == "":
			indented = append(indented, i+1)
		}
	}
	return blocks, indented
}

// repoRoot returns the root of this checkout.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// readREADME returns README.md.
func readREADME(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The blocks of the README and the test that runs each as pasted. A block
// the README gains must get a test and a line here.
var readmeBlocks = []struct {
	lang, section, runBy string
}{
	{"sh", "Install", "TestREADMESetup"},
	{"sql", "From SQL", "scripts/test-readme-psql.sh (make test-clients)"},
	{"go", "From Go", "TestREADMEBuilds and TestREADMERuns"},
}

// maxREADME is the README's budget: a front door, not the manual.
const maxREADME = 8 * 1024

func TestREADMESize(t *testing.T) {
	if n := len(readREADME(t)); n > maxREADME {
		t.Fatalf("README.md is %d bytes, more than %d: move what is not for a first read to docs/, CONTRIBUTING.md or BENCHMARKS.md", n, maxREADME)
	}
}

// TestREADMEBlocks fails when the README has a code block that no test
// runs: every block must be one of readmeBlocks, in that order.
func TestREADMEBlocks(t *testing.T) {
	blocks, indented := fencedBlocks(readREADME(t))
	for _, line := range indented {
		t.Errorf("README.md:%d: an indented code block, which no test runs: use a fenced block with a test, or inline code", line)
	}
	for i, b := range blocks {
		if i >= len(readmeBlocks) {
			t.Errorf("README.md:%d: a ```%s block in %q that no test runs: add a test and a line to readmeBlocks", b.line, b.lang, b.section)
			continue
		}
		want := readmeBlocks[i]
		if b.lang != want.lang || b.section != want.section {
			t.Errorf("README.md:%d: block %d is ```%s in %q, want ```%s in %q (run by %s)",
				b.line, i+1, b.lang, b.section, want.lang, want.section, want.runBy)
		}
	}
	if len(blocks) < len(readmeBlocks) {
		for _, want := range readmeBlocks[len(blocks):] {
			t.Errorf("README.md has no ```%s block in %q, which %s runs", want.lang, want.section, want.runBy)
		}
	}
}

// readmeBlock returns the README's block of lang in section.
func readmeBlock(t *testing.T, lang, section string) string {
	t.Helper()
	blocks, _ := fencedBlocks(readREADME(t))
	for _, b := range blocks {
		if b.lang == lang && b.section == section {
			return b.body
		}
	}
	t.Fatalf("README.md has no ```%s block in section %q", lang, section)
	return ""
}
