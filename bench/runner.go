package main

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// warmupCycles is how many unmeasured cycles each client runs before the
// clock starts: the first calls on a connection prepare its statements.
const warmupCycles = 1

// step is one timed call of a cycle: one op.
type step func(ctx context.Context) error

// instance is a workload set up for a number of clients: cycles[i] is the
// sequence of steps client i repeats, on resources of its own.
type instance struct {
	cycles [][]step
	close  func()
	// serverTicks, when set, returns the CPU time (clock ticks) each
	// process of the server has used so far, by pid; runSlice reads it
	// around the measured time.
	serverTicks func() (map[int]int64, error)
}

// workload is one benchmarked operation. A cycle is one or more steps (an
// acquire and its release are two ops). start sets it up for n clients.
type workload struct {
	key   string   // stable identifier in the JSON file
	name  string   // label in the tables
	path  string   // how it is called: SQL via pgx, the Go package, ...
	steps []string // step names, one per op of a cycle
	start func(ctx context.Context, n int) (*instance, error)
}

// tally accumulates the measurements of one workload at one concurrency over
// all its rounds.
type tally struct {
	ops, cycles int64
	elapsed     time.Duration
	lat         [][]time.Duration // per step
	// slices is the rate (ops/s) of each turn, in order: rows measured in
	// the same rounds can be compared turn by turn (pairedRatio).
	slices []float64
	// serverTicks is the server's CPU time over the measured time, in
	// clock ticks, where the instance could read it.
	serverTicks int64
}

func newTally(steps int) *tally {
	return &tally{lat: make([][]time.Duration, steps)}
}

// all returns every op's latency, whatever the step.
func (t *tally) all() []time.Duration {
	var out []time.Duration
	for _, l := range t.lat {
		out = append(out, l...)
	}
	return out
}

// opsPerSec and cyclesPerSec are the measured rates.
func (t *tally) opsPerSec() float64    { return float64(t.ops) / t.elapsed.Seconds() }
func (t *tally) cyclesPerSec() float64 { return float64(t.cycles) / t.elapsed.Seconds() }

// runSlice sets w up for n clients, warms it up, then runs every client's
// cycle in a loop for d, adding what it measured to t.
func runSlice(ctx context.Context, w workload, n int, d time.Duration, t *tally) error {
	inst, err := w.start(ctx, n)
	if err != nil {
		return fmt.Errorf("%s: set up %d clients: %w", w.key, n, err)
	}
	defer inst.close()

	type clientResult struct {
		lat    [][]time.Duration
		cycles int64
		err    error
	}
	results := make([]clientResult, n)
	var ready, done sync.WaitGroup
	begin := make(chan struct{})
	var deadline time.Time
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			r := &results[i]
			cycle := inst.cycles[i]
			for range warmupCycles {
				for _, s := range cycle {
					if r.err == nil {
						r.err = s(ctx)
					}
				}
			}
			ready.Done()
			<-begin
			if r.err != nil {
				return
			}
			r.lat = make([][]time.Duration, len(cycle))
			for time.Now().Before(deadline) {
				for j, s := range cycle {
					t0 := time.Now()
					if err := s(ctx); err != nil {
						r.err = fmt.Errorf("%s client %d step %s: %w", w.key, i, w.steps[j], err)
						return
					}
					r.lat[j] = append(r.lat[j], time.Since(t0))
				}
				r.cycles++
			}
		}()
	}
	ready.Wait()
	var ticks0 map[int]int64
	if inst.serverTicks != nil {
		if ticks0, err = inst.serverTicks(); err != nil {
			return fmt.Errorf("%s: read the server's CPU time: %w", w.key, err)
		}
	}
	start := time.Now()
	deadline = start.Add(d)
	close(begin)
	done.Wait()
	elapsed := time.Since(start)
	if inst.serverTicks != nil {
		ticks1, err := inst.serverTicks()
		if err != nil {
			return fmt.Errorf("%s: read the server's CPU time: %w", w.key, err)
		}
		// A process that ended during the turn is lost; one that started
		// counts from its start.
		for pid, n := range ticks1 {
			t.serverTicks += n - ticks0[pid]
		}
	}
	t.elapsed += elapsed
	var ops int64
	for _, r := range results {
		if r.err != nil {
			return r.err
		}
		t.cycles += r.cycles
		for j, l := range r.lat {
			t.lat[j] = append(t.lat[j], l...)
			ops += int64(len(l))
		}
	}
	t.ops += ops
	t.slices = append(t.slices, float64(ops)/elapsed.Seconds())
	return nil
}

// runGroup measures every workload of ws at n clients for d each. To keep
// slow drifts of the machine (disk flush latency, neighbours) out of the
// ratios between them, the time is split into rounds and the workloads take
// turns within each round, starting one later each round.
func runGroup(ctx context.Context, ws []workload, n int, d time.Duration, rounds int) ([]*tally, error) {
	tallies := make([]*tally, len(ws))
	for i, w := range ws {
		tallies[i] = newTally(len(w.steps))
	}
	slice := d / time.Duration(rounds)
	for r := range rounds {
		for k := range ws {
			i := (k + r) % len(ws)
			if err := runSlice(ctx, ws[i], n, slice, tallies[i]); err != nil {
				return nil, err
			}
		}
	}
	return tallies, nil
}
