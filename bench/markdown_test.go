package main

import (
	"bytes"
	"strings"
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

func TestStoreComparisonMarkdown(t *testing.T) {
	c := &StoreComparison{
		Versions: map[string]string{"etcd": "3.7.3", "redis": "7.0.15"},
		SameDisk: "yes",
		Rows: []Row{
			{Key: "acquire-release/pkg-try", Name: "pglease", Path: "Go", Clients: 8, CyclesPerSec: 1000, ServerCPUPerCycle: 400},
			{Key: redisKey, Name: "Redis", Path: "go-redis", Clients: 8, CyclesPerSec: 2500, ServerCPUPerCycle: 60},
			{Key: etcdKey, Name: "etcd", Path: "clientv3", Clients: 1, CyclesPerSec: 90},
		},
	}
	var b strings.Builder
	c.writeMarkdown(&b, []int{8})
	out := b.String()
	for _, want := range []string{
		"(etcd 3.7.3, redis 7.0.15)",
		"same device: yes",
		"| Redis (go-redis) | 8 | 2,500 | 2.50× |",
		"| 60 µs | 2 AOF appends",
		"| pglease (Go) | 8 | 1,000 | 1.00× |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| etcd (clientv3) |") {
		t.Errorf("markdown has the row at C=1, which was not asked for:\n%s", out)
	}
}
