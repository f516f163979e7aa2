package history

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// RuleTenureTable: the server's tenure history (pglease.tenures, #52)
// and the checker's own reconstruction of the tenures from the audit
// disagree: a tenure missing from one, or another fence, holder, grant,
// end or way of ending.
const RuleTenureTable = "tenure-table"

// Tenure is one tenure of a lease (Slot 0) or of a slot, from its grant to
// its end on the server's clock: what a row of pglease.tenures holds.
type Tenure struct {
	Name    string
	Slot    int
	Fence   int64
	Holder  string
	Granted time.Time
	// Ended is zero while the tenure is open (held, or run out and not
	// yet taken over or purged).
	Ended time.Time
	// How is "" while open; else released (handed_over and forced count
	// as released: the audit does not tell them apart), expired,
	// taken_over or purged.
	How string
}

func (t Tenure) String() string {
	return fmt.Sprintf("%s/%d fence %d of %q granted %s ended %s %q", t.Name, t.Slot, t.Fence, t.Holder,
		t.Granted.Format(time.StampMicro), t.Ended.Format(time.StampMicro), t.How)
}

// ServerTenures replays the server's history (its lease and slot rows) and
// returns every tenure it shows, in the order of their keys and fences,
// ended as pglease.tenures ends them: a release at its release (expired
// when it had run out first), a new fence at the old tenure's expiry
// (expired when the same holder took the name again, else taken_over),
// a purge at its expiry.
func ServerTenures(events []ServerEvent) []Tenure {
	open := map[key]*Tenure{}
	var out []Tenure
	end := func(k key, at time.Time, how string) {
		if t := open[k]; t != nil {
			t.Ended, t.How = at, how
			out = append(out, *t)
			delete(open, k)
		}
	}
	for _, e := range collapse(events) {
		if e.Row == WriteRow {
			continue
		}
		k := key{e.Row == SlotRow, e.Name, e.Slot}
		switch {
		case e.Deleted:
			if e.OldHolder != "" {
				end(k, e.OldExpiresAt, "purged")
			}
			delete(open, k)
		case e.Inserted:
			if e.Holder != "" {
				open[k] = &Tenure{Name: e.Name, Slot: e.Slot, Fence: e.Fence, Holder: e.Holder, Granted: e.AcquiredAt}
			}
		case e.Fence != e.OldFence:
			if e.OldHolder != "" {
				how := "taken_over"
				if e.Holder == e.OldHolder {
					how = "expired"
				}
				end(k, e.OldExpiresAt, how)
			}
			if e.Holder != "" {
				open[k] = &Tenure{Name: e.Name, Slot: e.Slot, Fence: e.Fence, Holder: e.Holder, Granted: e.AcquiredAt}
			}
		case e.Holder == "" && e.OldHolder != "":
			how := "released"
			if !e.OldExpiresAt.After(e.ExpiresAt) {
				how = "expired"
			}
			end(k, e.ExpiresAt, how)
		}
	}
	for _, t := range open {
		out = append(out, *t)
	}
	sortTenures(out)
	return out
}

func sortTenures(ts []Tenure) {
	slices.SortFunc(ts, func(a, b Tenure) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.Slot, b.Slot), cmp.Compare(a.Fence, b.Fence))
	})
}

// CompareTenures checks the tenures of the server's table against those
// replayed from its audit (ServerTenures): the same tenures, fences,
// holders, grants, ends and ways of ending. The table's handed_over and
// forced count as released.
func CompareTenures(replayed, table []Tenure) ServerReport {
	rep := ServerReport{Events: len(table)}
	norm := func(how string) string {
		if how == "handed_over" || how == "forced" {
			return "released"
		}
		return how
	}
	type id struct {
		name  string
		slot  int
		fence int64
	}
	byID := map[id]Tenure{}
	for _, t := range table {
		byID[id{t.Name, t.Slot, t.Fence}] = t
	}
	for _, r := range replayed {
		k := id{r.Name, r.Slot, r.Fence}
		t, ok := byID[k]
		switch {
		case !ok:
			rep.add(RuleTenureTable, "missing from the table: "+r.String())
		case t.Holder != r.Holder || !t.Granted.Equal(r.Granted) || !t.Ended.Equal(r.Ended) || norm(t.How) != r.How:
			rep.add(RuleTenureTable, fmt.Sprintf("table has %s, the audit %s", t, r))
		default:
			rep.Grants++
		}
		delete(byID, k)
	}
	for _, t := range byID {
		rep.add(RuleTenureTable, "in the table, not in the audit: "+t.String())
	}
	return rep
}
