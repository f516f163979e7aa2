package main

import (
	"slices"
	"time"
)

// Latency summarises a set of latencies, in milliseconds.
type Latency struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean_ms"`
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	Max  float64 `json:"max_ms"`
}

// summarize computes the summary of ds (nearest-rank percentiles). It sorts
// ds in place.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Latency{
		N:    len(ds),
		Mean: ms(sum / time.Duration(len(ds))),
		P50:  ms(percentile(ds, 50)),
		P99:  ms(percentile(ds, 99)),
		Max:  ms(ds[len(ds)-1]),
	}
}

// percentile returns the nearest-rank p-th percentile of sorted ds.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// ms converts d to fractional milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median returns the median of ds without changing it.
func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
