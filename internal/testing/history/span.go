package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Span is one run of a workload, from its first instruction to its return,
// on one clock shared by every workload checked together.
type Span struct {
	// Name is the lease or scope that guards the workload.
	Name string
	// Owner identifies who ran it (a holder).
	Owner string
	// Fence is the tenure it ran under.
	Fence int64
	// Start and End bound the run.
	Start, End time.Duration
}

// CheckSpans checks that at no instant more than capacity spans of one
// Name run at once (touching spans do not overlap). It returns the largest
// number that ran at once per name, and a violation for each instant the
// bound was first exceeded.
func CheckSpans(spans []Span, capacity int) (maxLive map[string]int, violations []Violation) {
	type edge struct {
		at    time.Duration
		delta int
		s     Span
	}
	byName := map[string][]edge{}
	for _, s := range spans {
		byName[s.Name] = append(byName[s.Name], edge{s.Start, +1, s}, edge{s.End, -1, s})
	}
	maxLive = map[string]int{}
	for name, edges := range byName {
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
		live := map[Span]bool{}
		for _, e := range edges {
			if e.delta < 0 {
				delete(live, e.s)
				continue
			}
			live[e.s] = true
			maxLive[name] = max(maxLive[name], len(live))
			if len(live) > capacity {
				v := Violation{Rule: RuleOverlap, Detail: fmt.Sprintf("%q: %d workloads running at %s, at most %d allowed", name, len(live), e.at, capacity)}
				for s := range live {
					v.Detail += fmt.Sprintf("\n\t%s fence %d [%s, %s]", s.Owner, s.Fence, s.Start, s.End)
				}
				violations = append(violations, v)
			}
		}
	}
	return maxLive, violations
}
