package readme_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// buildProgram builds src, a complete Go program, into out (os.DevNull to
// only check that it builds). The program is laid into the module with go
// build -overlay as package internal/testing/readme/<name>, so it imports the
// packages of this checkout and nothing is written to the tree.
func buildProgram(t *testing.T, name, src, out string) error {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(root, "internal", "readme", name)
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(pkg, "main.go"): file},
	})
	if err != nil {
		t.Fatal(err)
	}
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", overlayPath, "-o", out, pkg)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%v\n%s", err, b)
	}
	return nil
}

// TestREADMEBuilds builds every Go block of README.md as a program of its
// own, so the README stays in step with the API.
func TestREADMEBuilds(t *testing.T) {
	blocks, _ := fencedBlocks(readREADME(t))
	n := 0
	for _, b := range blocks {
		if b.lang != "go" {
			continue
		}
		n++
		t.Run(fmt.Sprint("block", n), func(t *testing.T) {
			if !strings.HasPrefix(b.body, "package main\n") {
				t.Fatalf("README.md:%d: the Go block is not a complete program (it must start with package main)", b.line)
			}
			if err := buildProgram(t, fmt.Sprint("block", n), b.body, os.DevNull); err != nil {
				t.Fatalf("README.md:%d: the Go block does not build: %v\nThe block:\n%s", b.line, err, b.body)
			}
		})
	}
	if n == 0 {
		t.Fatal("README.md has no ```go block: the Go example is missing")
	}
}

// TestDocsBuild builds every Go block of docs/*.md: each is a complete
// program, so that no page shows code that does not compile. A block that
// is examples/metrics/main.go as it is needs modules pglease's does not
// have: TestMetricsExample builds and runs it in its own module.
func TestDocsBuild(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(repoRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(repoRoot(t), metricsExample, "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range pages {
		md, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		blocks, _ := fencedBlocks(string(md))
		base := strings.TrimSuffix(filepath.Base(page), ".md")
		n := 0
		for _, b := range blocks {
			if b.lang != "go" {
				continue
			}
			n++
			name := fmt.Sprintf("docs_%s_%d", strings.ReplaceAll(base, "-", "_"), n)
			t.Run(name, func(t *testing.T) {
				if b.body == string(example) {
					t.Logf("docs/%s.md:%d is %s/main.go: TestMetricsExample builds and runs it", base, b.line, metricsExample)
					return
				}
				if !strings.HasPrefix(b.body, "package main\n") {
					t.Fatalf("docs/%s.md:%d: the Go block is not a complete program (it must start with package main)", base, b.line)
				}
				if err := buildProgram(t, name, b.body, os.DevNull); err != nil {
					t.Fatalf("docs/%s.md:%d: the Go block does not build: %v", base, b.line, err)
				}
			})
		}
	}
}

// TestREADMERuns runs the README's Go example as its text says: two
// instances on one database, the first dispatching with fence 1 while the
// second waits; the first interrupted, the second taking over with fence 2.
func TestREADMERuns(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "readme-go")
	if err := buildProgram(t, "run", readmeBlock(t, "go", "From Go"), bin); err != nil {
		t.Fatalf("the README's Go block does not build: %v", err)
	}
	url := pgtest.NewMigrated(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	first := startProgram(ctx, t, bin, url)
	first.expect(t, "dispatching with fence 1")

	second := startProgram(ctx, t, bin, url)
	waitForWaiter(ctx, t, url, "outbox-dispatcher")

	first.interrupt(t)
	first.expect(t, "stopped: context canceled")
	first.exit(t)

	second.expect(t, "dispatching with fence 2")
	second.interrupt(t)
	second.expect(t, "stopped: context canceled")
	second.exit(t)
}

// program is a running instance of the README's Go example, or of
// another example program.
type program struct {
	what   string // "the README's example", in messages
	ctx    context.Context
	cmd    *exec.Cmd
	lines  chan string // its standard output, line by line; closed at EOF
	done   chan error  // its exit
	out    []string    // the lines seen so far
	exited bool        // done has been received
}

// startProgram starts bin, the README's example, with DATABASE_URL set to
// url, and kills it when the test ends if it is still running.
func startProgram(ctx context.Context, t *testing.T, bin, url string) *program {
	t.Helper()
	return startExample(ctx, t, "the README's example", bin, url)
}

// startExample starts bin, the example what, with DATABASE_URL set to url
// and env added, and kills it when the test ends if it is still running.
func startExample(ctx context.Context, t *testing.T, what, bin, url string, env ...string) *program {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(append(os.Environ(), "DATABASE_URL="+url), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &program{what: what, ctx: ctx, cmd: cmd, lines: make(chan string, 64), done: make(chan error, 1)}
	go func() {
		// Every read of the pipe ends before Wait, as os/exec requires.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if !p.exited {
			_ = cmd.Process.Kill()
			for range p.lines {
			}
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s: stdout %q; stderr:\n%s", bin, p.out, stderr.String())
		}
	})
	return p
}

// expect waits for the program's next line of output and checks it.
func (p *program) expect(t *testing.T, want string) {
	t.Helper()
	if line := p.next(t, want); line != want {
		t.Fatalf("%s printed %q, want %q (printed %q)", p.what, line, want, p.out)
	}
}

// next waits for the program's next line of output, which should be
// like want, and returns it.
func (p *program) next(t *testing.T, want string) string {
	t.Helper()
	select {
	case line, ok := <-p.lines:
		if !ok {
			t.Fatalf("%s ended its output before printing %q (printed %q)", p.what, want, p.out)
		}
		p.out = append(p.out, line)
		return line
	case <-p.ctx.Done():
		t.Fatalf("%s did not print %q in time (printed %q)", p.what, want, p.out)
	}
	return ""
}

// interrupt sends the program SIGINT, as Ctrl-C does.
func (p *program) interrupt(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
}

// exit waits for the program to exit and checks that it exited 0 with
// nothing more on its output.
func (p *program) exit(t *testing.T) {
	t.Helper()
	for line := range p.lines {
		p.out = append(p.out, line)
		t.Errorf("%s printed %q after stopping", p.what, line)
	}
	select {
	case err := <-p.done:
		p.exited = true
		if err != nil {
			t.Fatalf("%s exited with %v", p.what, err)
		}
	case <-p.ctx.Done():
		t.Fatalf("%s did not exit after SIGINT", p.what)
	}
}

// waitForWaiter waits until a refused acquire of lease name registered as
// a waiter: the second instance stands by.
func waitForWaiter(ctx context.Context, t *testing.T, url, name string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for {
		var waiting bool
		err := conn.QueryRow(ctx,
			"SELECT EXISTS (SELECT 1 FROM pglease.waiters WHERE kind = 'lease' AND name = $1 AND until > clock_timestamp())",
			name).Scan(&waiting)
		if err != nil {
			t.Fatalf("the second instance did not stand by: %v", err)
		}
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("the second instance did not stand by in time")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
