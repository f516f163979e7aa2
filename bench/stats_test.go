package main

import "testing"

func TestPairedRatio(t *testing.T) {
	off := &Row{Slices: []float64{100, 200, 100, 400, 100}}
	on := &Row{Slices: []float64{99, 190, 101, 392, 97}}
	got := pairedRatio(on, off)
	// Ratios 0.99, 0.95, 1.01, 0.98, 0.97: sorted 0.95 0.97 0.98 0.99 1.01.
	want := Paired{N: 5, Median: 0.98, Q1: 0.97, Q3: 0.99}
	if got != want {
		t.Errorf("pairedRatio = %+v, want %+v", got, want)
	}
	if p := pairedRatio(&Row{Slices: []float64{1, 2}}, off); p.N != 0 {
		t.Errorf("pairedRatio of rows measured in different turns = %+v, want N 0", p)
	}
	if p := pairedRatio(nil, off); p.N != 0 {
		t.Errorf("pairedRatio of a missing row = %+v, want N 0", p)
	}
}
