package main

import (
	"time"
)

// Report is every figure of one run; it is written as JSON and rendered as
// markdown.
type Report struct {
	Command     string             `json:"command"`
	Date        time.Time          `json:"date"`
	Server      Server             `json:"server"`
	Host        Host               `json:"host"`
	Run         RunSettings        `json:"run"`
	Throughput  []Row              `json:"throughput"`
	Diagnostics []Row              `json:"diagnostics"`
	ExecTimes   []ExecTime         `json:"execution_times"`
	Pgbench     PgbenchResult      `json:"pgbench"`
	Slots       []SlotRow          `json:"slots"`
	SlotExec    []SlotExec         `json:"slot_execution"`
	SlotCycles  *SlotCycles        `json:"slot_cycles,omitempty"`
	Metrics     *MetricsOverhead   `json:"metrics,omitempty"`
	RenewHolder RenewHolderResult  `json:"renew_holder"`
	Handover    []HandoverResult   `json:"handover"`
	Purge       *PurgeResult       `json:"purge,omitempty"`
	Stores      *StoreComparison   `json:"stores,omitempty"`
	Fenced      *FencedWrites      `json:"fenced,omitempty"`
	Batch       *BatchComparison   `json:"batch,omitempty"`
	History     *HistoryComparison `json:"history,omitempty"`
	Leader      *Leadership        `json:"leadership,omitempty"`
	Cron        *CronCost          `json:"cron,omitempty"`
	Scrape      []ScrapeRow        `json:"scrape,omitempty"`
	Limits      *LimitsComparison  `json:"limits,omitempty"`
	Targets     []Target           `json:"targets"`
}

// Host describes the machine the benchmark and the server shared.
type Host struct {
	// CPU is the processor's model name, Virtual whether the kernel runs
	// under a hypervisor, MemoryGiB the memory, Kernel the kernel release.
	CPU       string  `json:"cpu,omitempty"`
	Virtual   bool    `json:"virtual"`
	MemoryGiB float64 `json:"memory_gib,omitempty"`
	Kernel    string  `json:"kernel,omitempty"`
	CPUs      int     `json:"cpus"`
	GoVersion string  `json:"go_version"`
	Pglock    string  `json:"pglock_version"`
	// LoadStart and LoadEnd are /proc/loadavg when the run started and
	// ended: other work on the machine shows up in the figures.
	LoadStart string `json:"loadavg_start,omitempty"`
	LoadEnd   string `json:"loadavg_end,omitempty"`
}

// RunSettings are the benchmark's own settings.
type RunSettings struct {
	CellSeconds float64 `json:"cell_seconds"` // measured time per row and concurrency
	Rounds      int     `json:"rounds"`       // the cell's time is split into this many turns
	Clients     []int   `json:"clients"`
	SlotClients []int   `json:"slot_clients"`
	// StoreClients are the concurrencies of the comparison with other
	// stores, and of its plot.
	StoreClients []int `json:"store_clients"`
}

// Row is one workload at one concurrency.
type Row struct {
	Key          string             `json:"key"`
	Name         string             `json:"name"`
	Path         string             `json:"path"`
	Clients      int                `json:"clients"`
	OpsPerCycle  int                `json:"ops_per_cycle"`
	Ops          int64              `json:"ops"`
	Cycles       int64              `json:"cycles"`
	Seconds      float64            `json:"seconds"`
	OpsPerSec    float64            `json:"ops_per_sec"`
	CyclesPerSec float64            `json:"cycles_per_sec"`
	Latency      Latency            `json:"latency"` // every op
	Steps        map[string]Latency `json:"steps"`   // per op of the cycle
	VsLimit      float64            `json:"vs_limit"`
	// Slices is the rate (ops/s) of each turn of the cell, in order.
	Slices []float64 `json:"slice_ops_per_sec"`
	// ServerCPUPerCycle is the server's CPU time per cycle, in µs, for
	// the rows that read it (the comparison with other stores).
	ServerCPUPerCycle float64 `json:"server_cpu_us_per_cycle,omitempty"`
}

// SlotRow is one variant of the claim sweep at one concurrency.
type SlotRow struct {
	slotVariant
	Clients      int     `json:"clients"`
	CyclesPerSec float64 `json:"cycles_per_sec"`
	Claim        Latency `json:"claim"`
	Release      Latency `json:"release"`
	// ClaimVsCap1 is the claim's p50 over the p50 of capacity 1 on an
	// empty scope at the same concurrency.
	ClaimVsCap1 float64 `json:"claim_p50_vs_capacity_1"`
}

// Target is one of the goals the benchmark checks.
type Target struct {
	Name     string `json:"name"`
	Measured string `json:"measured"`
	Holds    bool   `json:"holds"`
}

// newRow turns what was measured of w at n clients into a row.
func newRow(w workload, n int, t *tally) Row {
	r := Row{
		Key: w.key, Name: w.name, Path: w.path, Clients: n, OpsPerCycle: len(w.steps),
		Ops: t.ops, Cycles: t.cycles, Seconds: t.elapsed.Seconds(),
		OpsPerSec: t.opsPerSec(), CyclesPerSec: t.cyclesPerSec(),
		Latency: summarize(t.all()),
		Steps:   make(map[string]Latency, len(w.steps)),
		Slices:  t.slices,
	}
	if t.serverTicks > 0 && t.cycles > 0 {
		r.ServerCPUPerCycle = float64(t.serverTicks) * 1e6 / clockTicks / float64(t.cycles)
	}
	for j, s := range w.steps {
		r.Steps[s] = summarize(t.lat[j])
	}
	return r
}

// row returns the row of key at n clients, or nil.
func (r *Report) row(key string, n int) *Row { return findRow(r.Throughput, key, n) }

// findRow returns the row of rows with key at n clients, or nil.
func findRow(rows []Row, key string, n int) *Row {
	for i := range rows {
		if r := &rows[i]; r.Key == key && r.Clients == n {
			return r
		}
	}
	return nil
}

// slot returns the sweep row of capacity and rows at n clients, or nil.
func (r *Report) slot(capacity int, rows string, n int) *SlotRow {
	for i := range r.Slots {
		if s := &r.Slots[i]; s.Capacity == capacity && s.Rows == rows && s.Clients == n {
			return s
		}
	}
	return nil
}
