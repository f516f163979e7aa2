package readme_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// linkRE matches the target of a markdown link or image: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// slug returns the anchor GitHub gives a heading: lower case, punctuation
// other than - and _ dropped, spaces made hyphens.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the headings of markdown, numbered as
// GitHub numbers repeated ones (name, name-1, ...).
func anchors(markdown string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	inFence := false
	for _, l := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimLeft(l, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		s := slug(text)
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

// links returns the link targets of markdown outside fenced code blocks,
// with their lines.
func links(markdown string) (targets []string, lines []int) {
	inFence := false
	for i, l := range strings.Split(markdown, "\n") {
		if strings.HasPrefix(l, "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			targets = append(targets, m[1])
			lines = append(lines, i+1)
		}
	}
	return targets, lines
}

// TestLinks checks every relative link of the README, the top-level docs
// and docs/*.md: the file exists, and so does the heading an #anchor names.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	pages := []string{"README.md", "CONTRIBUTING.md", "CHANGELOG.md", "BENCHMARKS.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		pages = append(pages, filepath.Join("docs", filepath.Base(d)))
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := cache[path]; ok {
			return a, nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		cache[path] = anchors(string(b))
		return cache[path], nil
	}
	for _, page := range pages {
		md, err := os.ReadFile(filepath.Join(root, page))
		if err != nil {
			t.Errorf("%s: %v", page, err)
			continue
		}
		targets, lines := links(string(md))
		for i, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := filepath.Join(root, page)
			if file != "" {
				path = filepath.Join(root, filepath.Dir(page), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s: no such file", page, lines[i], target)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			a, err := anchorsOf(path)
			if err != nil {
				t.Errorf("%s:%d: %v", page, lines[i], err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: link to %s: %s has no heading with anchor #%s", page, lines[i], target, filepath.Base(path), anchor)
			}
		}
	}
}
