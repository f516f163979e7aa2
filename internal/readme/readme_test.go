// Package readme_test builds the Go programs of the README, so that its
// quick start compiles against the current API as pasted.
package readme_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// goBlocks returns the bodies of the ```go blocks of markdown.
func goBlocks(markdown string) []string {
	var blocks []string
	for {
		_, rest, ok := strings.Cut(markdown, "\n```go\n")
		if !ok {
			return blocks
		}
		body, after, ok := strings.Cut(rest, "\n```\n")
		if !ok {
			return blocks
		}
		blocks = append(blocks, body+"\n")
		markdown = after
	}
}

// TestREADMEBuilds builds every Go block of README.md as a program of its
// own. The blocks are laid into the module with go build -overlay, so they
// import the packages of this checkout and nothing is written to the tree.
func TestREADMEBuilds(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := goBlocks(string(readme))
	if len(blocks) == 0 {
		t.Fatal("README.md has no ```go block: the quick start is missing")
	}
	for i, block := range blocks {
		t.Run(fmt.Sprint("block", i+1), func(t *testing.T) {
			if !strings.HasPrefix(block, "package main\n") {
				t.Fatalf("README Go block %d is not a complete program (it must start with package main):\n%s", i+1, block)
			}
			dir := t.TempDir()
			src := filepath.Join(dir, "main.go")
			if err := os.WriteFile(src, []byte(block), 0o644); err != nil {
				t.Fatal(err)
			}
			pkg := filepath.Join(root, "internal", "readme", fmt.Sprint("block", i+1))
			overlay, err := json.Marshal(map[string]map[string]string{
				"Replace": {filepath.Join(pkg, "main.go"): src},
			})
			if err != nil {
				t.Fatal(err)
			}
			overlayPath := filepath.Join(dir, "overlay.json")
			if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("go", "build", "-overlay", overlayPath, "-o", os.DevNull, pkg)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("README Go block %d does not build: %v\n%s\nThe block:\n%s", i+1, err, out, block)
			}
		})
	}
}
