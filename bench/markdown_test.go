package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPageWrittenWhole: make bench writes BENCHMARKS.md from the run
// alone, whatever the file held before, with the plot beside it and
// linked from it.
func TestPageWrittenWhole(t *testing.T) {
	dir := t.TempDir()
	cfg := config{
		out:  filepath.Join(dir, "BENCHMARKS.md"),
		json: filepath.Join(dir, "bench", "results", "latest.json"),
		plot: filepath.Join(dir, "docs", "img", "bench-throughput.svg"),
	}
	old := "# pglease benchmarks\n\n<!-- Written by hand from here to the end -->\n\n## Reading these figures\n\nan earlier run\n"
	if err := os.WriteFile(cfg.out, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &Report{
		Command: "cd bench && go run .",
		Date:    time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC),
		Server:  Server{Version: "PostgreSQL 15.20", Settings: map[string]string{"fsync": "on"}},
		Host:    Host{CPUs: 2, CPU: "AMD EPYC", Virtual: true, LoadStart: "1.00 2.00 3.00", LoadEnd: "4.00 5.00 6.00"},
		Stores: &StoreComparison{Rows: []Row{
			{Key: "acquire-release/pkg-try", Name: "pglease.acquire + release", Clients: 1, CyclesPerSec: 900},
			{Key: "acquire-release/pkg-try", Name: "pglease.acquire + release", Clients: 2, CyclesPerSec: 1500},
			{Key: redisKey, Name: "Redis", Clients: 1, CyclesPerSec: 1500},
			{Key: redisKey, Name: "Redis", Clients: 2, CyclesPerSec: 3000},
		}},
	}
	if err := r.write(cfg); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile(cfg.out)
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"Written by hand", "Reading these figures", "an earlier run"} {
		if bytes.Contains(page, []byte(gone)) {
			t.Errorf("the page kept %q from the file it replaced", gone)
		}
	}
	for _, want := range []string{
		"Written by `make bench`",
		"a virtual machine with 2 CPUs (AMD EPYC)",
		"before the run: 1.00 2.00 3.00; after it: 4.00 5.00 6.00",
		"PostgreSQL 15.20",
		"## In short",
		"](docs/img/bench-throughput.svg)",
	} {
		if !bytes.Contains(page, []byte(want)) {
			t.Errorf("the page lacks %q", want)
		}
	}
	svg, err := os.ReadFile(cfg.plot)
	if err != nil {
		t.Fatalf("the plot: %v", err)
	}
	series := 0
	for _, e := range parseSVG(t, svg) {
		if e.name == "g" && e.attrs["class"] == "series" {
			series++
		}
	}
	if series != 2 {
		t.Errorf("the plot has %d series, want 2 (pglease, Redis)", series)
	}
	if _, err := os.Stat(cfg.json); err != nil {
		t.Errorf("the JSON: %v", err)
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
	c.writeMarkdown(&b, []int{8}, "")
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
