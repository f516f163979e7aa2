package main

import (
	"bytes"
	"testing"
)

// TestHandWrittenKept: make bench keeps the hand-written end of
// BENCHMARKS.md below the tables it writes anew, and a page without one
// stays as generated.
func TestHandWrittenKept(t *testing.T) {
	notes := handWrittenMarker + "\n\n## Reading these figures\n\nprose\n"
	old := []byte("# pglease benchmarks\n\nold tables\n\n" + notes)
	generated := []byte("# pglease benchmarks\n\nnew tables\n")

	kept := handWritten(old)
	if string(kept) != notes {
		t.Fatalf("handWritten kept %q, want %q", kept, notes)
	}
	if got, want := string(withHandWritten(generated, kept)), "# pglease benchmarks\n\nnew tables\n\n"+notes; got != want {
		t.Fatalf("page %q, want %q", got, want)
	}
	if got := withHandWritten(generated, handWritten(generated)); !bytes.Equal(got, generated) {
		t.Fatalf("a page without hand-written notes became %q", got)
	}
	if handWritten(nil) != nil {
		t.Fatal("no previous page: nothing to keep")
	}
}
