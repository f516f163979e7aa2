//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// raceEnabled is set by race_test.go when the tests run with -race; the
// binary under test is then built with -race too.
var raceEnabled bool

// commandTimeout bounds each run of the binary.
const commandTimeout = 90 * time.Second

// binary builds the pglease command once per test (into its temporary
// directory) and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "pglease")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(t.Context(), "go", append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// cli runs the binary with a clean environment: none of the PG*,
// PGLEASE_* or DATABASE_URL variables of the test process, plus env.
type cli struct {
	t   *testing.T
	bin string
	env []string
}

// result is how one run of the binary ended.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

func (r result) String() string {
	return "exit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// baseEnv is the test process's environment without the variables that
// choose a database.
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PG") || name == "DATABASE_URL" {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// with returns a copy of c with more environment variables.
func (c cli) with(env ...string) cli {
	c.env = append(append([]string(nil), c.env...), env...)
	return c
}

// command returns the command running the binary with args.
func (c cli) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	// The race detector sleeps a second at exit unless told not to.
	cmd.Env = append(append(baseEnv(), "GORACE=atexit_sleep_ms=0"), c.env...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs the binary with args to its end.
func (c cli) run(args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(c.t.Context(), commandTimeout)
	defer cancel()
	cmd := c.command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), elapsed: time.Since(start)}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		r.code = exitErr.ExitCode()
	default:
		c.t.Fatalf("run pglease %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// mustRun runs the binary and fails unless it exits with want.
func (c cli) mustRun(want int, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != want {
		c.t.Fatalf("pglease %s: got exit %d, want %d\n%s", strings.Join(args, " "), r.code, want, r)
	}
	return r
}

// background is a run of the binary that goes on while the test does
// other things. Its standard output is read line by line; its standard
// input stays open until closeStdin.
type background struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  *os.File
	lines  chan string
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	code   int           // exit code, once done
}

// syncBuffer is a bytes.Buffer safe for concurrent use, which signals
// each write on written.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	written chan struct{} // capacity 1: a write happened since the last receive
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{written: make(chan struct{}, 1)} }

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case s.written <- struct{}{}:
	default:
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start starts the binary with args in the background; it is killed when
// the test ends, if still running.
func (c cli) start(args ...string) *background {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	cmd := c.command(ctx, args...)
	b := &background{t: c.t, cmd: cmd, lines: make(chan string, 1000), stderr: newSyncBuffer(), done: make(chan struct{})}
	cmd.Stderr = b.stderr
	inR, inW, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		c.t.Fatal(err)
	}
	cmd.Stdin, cmd.Stdout = inR, outW
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		cancel()
		c.t.Fatalf("start pglease %s: %v", strings.Join(args, " "), err)
	}
	b.stdin = inW
	go func() {
		defer close(b.lines)
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			b.lines <- sc.Text()
		}
	}()
	go func() {
		defer close(b.done)
		defer cancel()
		err := cmd.Wait()
		var exitErr *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exitErr):
			b.code = exitErr.ExitCode()
		default:
			b.code = -1
		}
	}()
	c.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-b.done
		_ = inW.Close()
	})
	return b
}

// readLine returns the next line the background run printed, or fails the
// test after timeout.
func (b *background) readLine(timeout time.Duration) string {
	b.t.Helper()
	select {
	case line, ok := <-b.lines:
		if !ok {
			b.t.Fatalf("pglease ended its output before the line expected; stderr:\n%s", b.stderr)
		}
		return line
	case <-time.After(timeout):
		b.t.Fatalf("no output from pglease within %v; stderr:\n%s", timeout, b.stderr)
		return ""
	}
}

// closeStdin closes the background run's standard input.
func (b *background) closeStdin() {
	_ = b.stdin.Close()
}

// waitExit waits for the background run to end within timeout, and fails
// unless it exits with want.
func (b *background) waitExit(timeout time.Duration, want int) {
	b.t.Helper()
	select {
	case <-b.done:
	case <-time.After(timeout):
		// A goroutine dump says where it hangs.
		_ = b.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-b.done:
		case <-time.After(5 * time.Second):
		}
		b.t.Fatalf("pglease still running after %v; stderr (with a goroutine dump after SIGQUIT):\n%s", timeout, b.stderr)
	}
	if b.code != want {
		b.t.Fatalf("pglease: got exit %d, want %d; stderr:\n%s", b.code, want, b.stderr)
	}
}

// requireOneLine fails unless s is one line ending in a newline.
func requireOneLine(t *testing.T, what, s string) {
	t.Helper()
	if strings.Count(s, "\n") != 1 || !strings.HasSuffix(s, "\n") {
		t.Fatalf("%s: got %q, want exactly one line", what, s)
	}
}

// requireContains fails unless s contains every one of want.
func requireContains(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Fatalf("%s: got %q, want it to contain %q", what, s, w)
		}
	}
}
