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

// Paired is the ratio of two rows measured in the same turns, turn by
// turn: each turn's rate of one over the other's. The rows take their
// turns back to back, so a drift of the machine (a checkpoint, a
// neighbour) that spans a turn touches both sides of its ratio alike.
type Paired struct {
	N      int     `json:"n"`      // turns paired
	Median float64 `json:"median"` // median of the turns' ratios
	Q1     float64 `json:"q1"`     // first quartile (nearest rank)
	Q3     float64 `json:"q3"`     // third quartile (nearest rank)
}

// pairedRatio pairs the turns of on and off (their Slices) and summarises
// on[i]/off[i]. It returns N == 0 when the rows were not measured in the
// same number of turns.
func pairedRatio(on, off *Row) Paired {
	if on == nil || off == nil || len(on.Slices) != len(off.Slices) || len(on.Slices) == 0 {
		return Paired{}
	}
	rs := make([]float64, 0, len(on.Slices))
	for i, x := range on.Slices {
		if off.Slices[i] > 0 {
			rs = append(rs, x/off.Slices[i])
		}
	}
	if len(rs) == 0 {
		return Paired{}
	}
	slices.Sort(rs)
	rank := func(p int) float64 { return rs[max((p*len(rs)+99)/100, 1)-1] }
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + rs[len(rs)/2]) / 2
	}
	return Paired{N: len(rs), Median: m, Q1: rank(25), Q3: rank(75)}
}
