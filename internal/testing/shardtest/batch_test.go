//go:build sharded

package shardtest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pglease/pglease/pglease"
)

// TestBatchThroughProxy: acquire_batch and release_batch through the
// proxy split their elements by partition and return the results in input
// order, each element decided by its own partition; the role binding holds
// there too; and Go clients coalescing their goroutines' calls work
// through the proxy.
func TestBatchThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "batch"))
	other := pool(t, s.ProxyURL, newRole(t, fleet, "batchother"))
	ctx := testContext(t)

	var names []string
	parts := map[int]bool{}
	for i := range 12 {
		name := fmt.Sprintf("batch-%d", i)
		names = append(names, name)
		parts[partitionOf(t, proxy, name)] = true
	}
	if len(parts) < 2 {
		t.Fatalf("the names live on %d partitions, want several", len(parts))
	}
	mustAcquire(t, proxy, names[3], "theirs", time.Minute, 1)
	mustAcquire(t, other, names[5], "a", time.Minute, 1) // another role, same holder string
	ttls := make([]string, len(names)+1)
	for i := range ttls {
		ttls[i] = "1 minute"
	}
	in := append(slices.Clone(names), "")
	var acquired []bool
	var fences []*int64
	var states []*string
	if err := proxy.QueryRow(ctx, `SELECT acquired, fences, sqlstates FROM pglease.acquire_batch($1, 'a', $2::interval[], NULL)`, in, ttls).
		Scan(&acquired, &fences, &states); err != nil {
		t.Fatalf("acquire_batch through the proxy: %v", err)
	}
	for i := range in {
		wantAcquired := i != 3 && i != 5 && i != len(names)
		if acquired[i] != wantAcquired {
			t.Fatalf("element %d (%q): acquired %v, want %v", i, in[i], acquired[i], wantAcquired)
		}
		if i == len(names) {
			if states[i] == nil || *states[i] != "22023" {
				t.Fatalf("the empty name: sqlstate %v, want 22023", states[i])
			}
			continue
		}
		if fences[i] == nil || *fences[i] != 1 {
			t.Fatalf("element %d (%q): fence %v, want 1", i, in[i], fences[i])
		}
	}
	fs := make([]int64, len(names))
	for i := range fs {
		fs[i] = 1
	}
	var released []bool
	if err := other.QueryRow(ctx, `SELECT released FROM pglease.release_batch($1, 'a', $2)`, names, fs).Scan(&released); err != nil {
		t.Fatalf("release_batch from another role: %v", err)
	}
	if want := slices.Repeat([]bool{false}, len(names)); !slices.Equal(released, append(want[:5:5], append([]bool{true}, want[6:]...)...)) {
		t.Fatalf("release_batch from another role with holder a: got %v, want only its own (element 5) released", released)
	}
	if err := proxy.QueryRow(ctx, `SELECT released FROM pglease.release_batch($1, 'a', $2)`, names, fs).Scan(&released); err != nil {
		t.Fatalf("release_batch through the proxy: %v", err)
	}
	for i, r := range released {
		if r != (i != 3 && i != 5) {
			t.Fatalf("release_batch element %d (%q): %v", i, names[i], r)
		}
	}
	_, err := proxy.Exec(ctx, `SELECT pglease.acquire_batch($1, 'a', $2::interval[], NULL)`, names, ttls[:2])
	requirePgError(t, err, "22023", "acquire_batch")

	// Go: goroutines sharing a client, each on names of its own.
	c, err := pglease.New(proxy, pglease.Config{Holder: "go-batch"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 10 {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("go-batch-%d-%d", g, i%3), time.Minute)
				if err == nil {
					err = l.Release(ctx)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a goroutine of a shared client through the proxy: %v", err)
	}
}
