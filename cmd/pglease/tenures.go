package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pglease/pglease/pgleaseadmin"
)

var tenuresCommand = &command{
	name:    "tenures",
	summary: "List the tenures of a lease or slot scope from the tenure history",
	usage: `
Usage: pglease tenures NAME [--since T] [--json] [--database URL]

Lists the tenures of lease NAME (or of every slot of scope NAME) that the
tenure history keeps, oldest grant first: the slot (slots only), fence,
holder and role, when it was granted and ended (server clock), and how it
ended: released, handed_over (released on request), forced (pglease
release --force), expired (ran out; its own holder came back, or nobody
took it over), taken_over (ran out, another holder took it) or purged
(ran out, its row purged). An open tenure shows its expiry instead. The
history is kept only for names under a prefix whose history the schema
owner (or the prefix's role) turned on: pglease.history_enable
(docs/tenure-history.md).

--since keeps the tenures open at T or granted after it: T is a time
(RFC 3339, 2025-01-02T03:04:05Z) or a duration back from now (2h).

With --json it prints one JSON object, whose shape is stable:

  {"name": "billing/leader", "tenures": [{"fence": 7, "holder": "host-a",
     "role": "billing", "granted_at": "2025-01-02T03:04:59.2Z",
     "ended_at": "2025-01-02T03:09:59.5Z", "ended": "taken_over"}]}

slot and units appear for a slot's tenure; ended_at and ended are null
while a tenure is open, and expires_at says when it runs out.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db     dbFlag
			asJSON bool
			since  string
		)
		db.register(fs)
		fs.BoolVar(&asJSON, "json", false, "print JSON (shape in 'pglease help tenures')")
		fs.StringVar(&since, "since", "", "list the tenures open at `T` or granted after it (RFC 3339 time, or a duration ago: 2h)")
		return func(ctx context.Context, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usagef("tenures", "give the lease name or slot scope, one argument")
			}
			t, err := parseSince(since, time.Now())
			if err != nil {
				return usagef("tenures", "%v", err)
			}
			return a.tenures(ctx, &db, args[0], t, asJSON)
		}
	},
}

// parseSince parses --since: empty (zero: every tenure kept), an RFC 3339
// time, or a positive duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--since %s: want an RFC 3339 time (2025-01-02T03:04:05Z) or a duration ago (2h)", s)
	}
	return now.Add(-d), nil
}

// tenuresJSON is the output of tenures --json.
type tenuresJSON struct {
	Name    string       `json:"name"`
	Tenures []tenureJSON `json:"tenures"`
}

// tenureJSON is one tenure of the history.
type tenureJSON struct {
	Slot      int        `json:"slot,omitempty"`
	Units     int        `json:"units,omitempty"`
	Fence     int64      `json:"fence"`
	Holder    string     `json:"holder"`
	Role      string     `json:"role,omitempty"`
	GrantedAt time.Time  `json:"granted_at"`
	EndedAt   *time.Time `json:"ended_at"`
	Ended     *string    `json:"ended"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

func (a *app) tenures(ctx context.Context, db *dbFlag, name string, since time.Time, asJSON bool) error {
	pool, err := a.open(ctx, db, "tenures")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	rows, err := pgleaseadmin.Tenures(ctx, pool, name, since)
	if err != nil {
		return a.queryError(ctx, fmt.Sprintf("read the tenure history of %s", quoteName(name)), err)
	}
	out := tenuresJSON{Name: name, Tenures: []tenureJSON{}}
	for _, r := range rows {
		j := tenureJSON{Slot: r.Slot, Units: r.Units, Fence: r.Fence, Holder: r.Holder, Role: r.Role,
			GrantedAt: r.GrantedAt.UTC()}
		if r.Ended != "" {
			e, how := r.EndedAt.UTC(), r.Ended
			j.EndedAt, j.Ended = &e, &how
		} else if !r.ExpiresAt.IsZero() {
			x := r.ExpiresAt.UTC()
			j.ExpiresAt = &x
		}
		out.Tenures = append(out.Tenures, j)
	}
	if asJSON {
		return a.printJSON(out)
	}
	return printTenures(a.stdout, out)
}

// printTenures prints the tenures as a table.
func printTenures(w io.Writer, h tenuresJSON) error {
	if len(h.Tenures) == 0 {
		_, err := fmt.Fprintf(w, "No tenures of %s kept (is its history on? see pglease help tenures).\n", quoteName(h.Name))
		return err
	}
	slots := false
	for _, t := range h.Tenures {
		slots = slots || t.Slot > 0
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "FENCE\tHOLDER\tROLE\tGRANTED\tENDED\tHOW"
	if slots {
		head = "SLOT\tUNITS\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, t := range h.Tenures {
		var b strings.Builder
		if slots {
			fmt.Fprintf(&b, "%d\t%d\t", t.Slot, t.Units)
		}
		ended, how := "-", "open"
		switch {
		case t.Ended != nil:
			ended, how = t.EndedAt.Format(time.RFC3339Nano), *t.Ended
		case t.ExpiresAt != nil:
			how = "open, expires " + t.ExpiresAt.Format(time.RFC3339Nano)
		}
		fmt.Fprintf(&b, "%d\t%s\t%s\t%s\t%s\t%s\n", t.Fence, cell(t.Holder), cell(t.Role),
			t.GrantedAt.Format(time.RFC3339Nano), ended, how)
		fmt.Fprint(tw, b.String())
	}
	return tw.Flush()
}
