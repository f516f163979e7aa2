// Command gotest runs go test -json with the given arguments and prints what
// a person needs from it: the server the tests use (as soon as the first test
// binary names it), the output of failed tests and packages, one line per
// package with tests, and a closing count such as "412 passed, 0 failed". It
// exits with go test's exit status. make test runs it:
//
//	go build -o bin/gotest ./scripts/gotest && ./bin/gotest -race -count=1 ./...
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// summary reads go test -json events from r, writes the filtered output to w
// as it goes, and returns the counts of passed, failed and skipped tests. A
// package that fails without a failed test (a build error, a panic, a
// timeout) counts as one failure, with the output of its unfinished tests.
func summary(r io.Reader, w io.Writer) (passed, failed, skipped int, err error) {
	buffered := map[string][]string{} // output by package and test
	failedIn := map[string]bool{}     // packages with a failed test
	servers := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: go test's own message
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			fmt.Fprint(w, e.Output)
		case "output":
			if s, ok := strings.CutPrefix(e.Output, "pgtest: using "); ok && !servers[s] {
				servers[s] = true
				fmt.Fprint(w, "make test: server: "+s)
			}
			buffered[key] = append(buffered[key], e.Output)
		case "pass", "skip", "fail":
			out := buffered[key]
			delete(buffered, key)
			switch {
			case e.Test != "" && e.Action == "pass":
				passed++
			case e.Test != "" && e.Action == "skip":
				skipped++
			case e.Test != "":
				failed++
				failedIn[e.Package] = true
				fmt.Fprint(w, strings.Join(out, ""))
			case e.Action == "fail":
				for _, k := range slices.Sorted(maps.Keys(buffered)) {
					if strings.HasPrefix(k, e.Package+"\x00") {
						fmt.Fprint(w, strings.Join(buffered[k], ""))
						delete(buffered, k)
					}
				}
				fmt.Fprint(w, strings.Join(out, ""))
				if !failedIn[e.Package] {
					failed++
				}
			default: // the package's result line, "ok  pkg 1.2s"; none for a package without tests
				for _, line := range out {
					if strings.HasPrefix(line, "ok ") {
						fmt.Fprint(w, line)
					}
				}
			}
		}
	}
	return passed, failed, skipped, sc.Err()
}

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stdin, cmd.Stderr = os.Stdin, os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "gotest: cannot run go test (is go on PATH?): %v\n", err)
		os.Exit(2)
	}
	passed, failed, skipped, readErr := summary(stdout, os.Stdout)
	_, _ = io.Copy(io.Discard, stdout) // after a read error, let go test finish
	waitErr := cmd.Wait()
	line := fmt.Sprintf("%d passed, %d failed", passed, failed)
	if skipped > 0 {
		line += fmt.Sprintf(", %d skipped", skipped)
	}
	fmt.Println(line)
	if readErr != nil {
		fmt.Fprintln(os.Stderr, "gotest: reading go test's output:", readErr)
	}
	if exitErr, ok := errors.AsType[*exec.ExitError](waitErr); ok && exitErr.ExitCode() > 0 {
		os.Exit(exitErr.ExitCode())
	} else if err := cmp.Or(waitErr, readErr); err != nil {
		fmt.Fprintln(os.Stderr, "gotest:", err)
		os.Exit(2)
	}
}
