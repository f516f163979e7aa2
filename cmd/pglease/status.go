package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/pgleaseadmin"
)

var statusCommand = &command{
	name:    "status",
	summary: "List leases, slots, slot scopes and rate limits as the server sees them now",
	usage: `
Usage: pglease status [--json] [--database URL]

Lists every lease, slot and slot scope in the database with its holder,
fence, state (held, expired or free) and time left, all computed by the
server's clock when read. When a holder published a value, or a release
was requested (pglease release --request), the leases get a VALUE column
and a REQUEST column (docs/leadership.md); when a lease's name belongs to a
role (pglease prefix bind, or a shard group's lease), an OWNER column.
Rate limits (docs/limits.md) are listed with their level: how many keys'
buckets are spending (KEYS), how many refuse a take now (LIMITED), the
fewest tokens any key has left (LEFT, of the burst) and, for budgets, the
most any key has used of it (USED) and the tokens held by reservations
(RESERVED). A role that is not the schema owner nor a member of
pglease_operator sees the limits and buckets pglease.peek shows it.

With --json it prints one JSON object, whose shape is stable:

  {"leases": [{"name": "nightly", "holder": "host/4242/9f..", "fence": 7,
               "state": "held", "expires_at": "2025-01-02T03:04:05.678Z",
               "expires_in_ms": 28512, "expires_in": "28.512s",
               "value": "10.0.0.7:8080", "release_requested": false,
               "preferred_holder": null, "owner": "billing_svc"}],
   "slots":  [{"scope": "gpu", "slot": 1, "holder": "...", "fence": 3,
               "state": "held", "expires_at": "...",
               "expires_in_ms": 1200, "expires_in": "1.2s"}],
   "scopes": [{"scope": "gpu", "in_use": 1, "slots": 2}],
   "limits": [{"target": "tenant/", "exact": false, "rate": 100,
               "per": "1m0s", "burst": 20, "owner": null, "buckets": 3,
               "limited": 1, "min_remaining": 0, "used": 20,
               "reserved": 0}],
   "limits_left_out": 0,
   "jobs":   [{"name": "nightly", "last_success": "...", "last_run":
               {"holder": "...", "started_at": "...", "ended_at": "...",
                "duration_ms": 300, "exit_status": 0, "outcome": "succeeded"}}]}

The arrays are sorted (leases by name, slots by scope and number, scopes by
name) and empty, not null, when there is nothing. holder is null when free.
expires_in_ms is the time left in whole milliseconds (0 once expired or
free); expires_in is the same as a Go duration string. expires_at is the
server's RFC 3339 time at which the tenure ends or ended (for a free one:
when it was released). jobs lists the jobs of the run ledger (pglease run
--once-per; the first 1000 by name), each with its last run (as in
'pglease help history') and the end of its last success (null when none
is kept). A lease's value is the live holder's value (null: none, or not
held); release_requested is true while a requested release is pending;
preferred_holder is the holder the last request preferred (null: none);
owner is the role that owns the lease's name (null: a shared name, which
any client may take). limits lists the first 1000 limits by target (the
others are counted in limits_left_out): buckets are the keys' buckets it
is the longest match of that are not full, limited those that refuse a
take of one token now, min_remaining the fewest whole tokens left in any
(burst when none is spent), used = burst - min_remaining, reserved the
tokens held by reservations neither settled nor expired.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db     dbFlag
			asJSON bool
		)
		db.register(fs)
		fs.BoolVar(&asJSON, "json", false, "print JSON (shape in 'pglease help status')")
		return func(ctx context.Context, args []string) error {
			if len(args) != 0 {
				return usagef("status", "unexpected argument %q", args[0])
			}
			return a.status(ctx, &db, asJSON)
		}
	},
}

// statusJSON is the output of status --json.
type statusJSON struct {
	Leases []leaseJSON `json:"leases"`
	Slots  []slotJSON  `json:"slots"`
	Scopes []scopeJSON `json:"scopes"`
	Jobs   []jobJSON   `json:"jobs"`
	Groups []groupJSON `json:"groups"`
	Limits []limitJSON `json:"limits"`
	// LimitsLeftOut counts the limits beyond maxStatusLimits.
	LimitsLeftOut int64 `json:"limits_left_out"`
}

// limitJSON is one configured rate limit and its level (docs/limits.md).
type limitJSON struct {
	Target       string  `json:"target"`
	Exact        bool    `json:"exact"`
	Rate         int     `json:"rate"`
	Per          string  `json:"per"`
	Burst        int     `json:"burst"`
	Owner        *string `json:"owner"`
	Buckets      int64   `json:"buckets"`
	Limited      int64   `json:"limited"`
	MinRemaining int     `json:"min_remaining"`
	Used         int     `json:"used"`
	Reserved     int64   `json:"reserved"`
}

// jobJSON is a job of the run ledger: its last run and last success.
// groupJSON is one shard group (docs/groups.md): its live members and the
// shards each owns, and the shards no live member owns.
type groupJSON struct {
	Name    string            `json:"name"`
	Role    string            `json:"role"`
	Shards  int               `json:"shards"`
	Unowned int               `json:"unowned"`
	Members []groupMemberJSON `json:"members"`
}

type groupMemberJSON struct {
	Member      string    `json:"member"`
	Shards      int       `json:"shards"`
	HandingOver int       `json:"handing_over"`
	MaxShards   *int      `json:"max_shards"`
	ExpiresAt   time.Time `json:"expires_at"`
}

type jobJSON struct {
	Name        string     `json:"name"`
	LastRun     runJSON    `json:"last_run"`
	LastSuccess *time.Time `json:"last_success"`
}

type leaseJSON struct {
	Name        string    `json:"name"`
	Holder      *string   `json:"holder"`
	Fence       int64     `json:"fence"`
	State       string    `json:"state"`
	ExpiresAt   time.Time `json:"expires_at"`
	ExpiresInMS int64     `json:"expires_in_ms"`
	ExpiresIn   string    `json:"expires_in"`
	// Leadership (docs/leadership.md).
	Value            *string `json:"value"`
	ReleaseRequested bool    `json:"release_requested"`
	PreferredHolder  *string `json:"preferred_holder"`
	// Names a role owns (pglease prefix).
	Owner *string `json:"owner"`
}

type slotJSON struct {
	Scope       string    `json:"scope"`
	Slot        int       `json:"slot"`
	Holder      *string   `json:"holder"`
	Fence       int64     `json:"fence"`
	State       string    `json:"state"`
	ExpiresAt   time.Time `json:"expires_at"`
	ExpiresInMS int64     `json:"expires_in_ms"`
	ExpiresIn   string    `json:"expires_in"`
}

type scopeJSON struct {
	Scope string `json:"scope"`
	InUse int    `json:"in_use"`
	Slots int    `json:"slots"`
}

// maxStatusJobs is the most jobs status lists.
const maxStatusJobs = 1000

// maxStatusLimits is the most rate limits status lists.
const maxStatusLimits = 1000

// undefinedFunction is the SQLSTATE of a call to a function the schema
// does not have (a schema older than the call).
const undefinedFunction = "42883"

func (a *app) status(ctx context.Context, db *dbFlag, asJSON bool) error {
	pool, err := a.open(ctx, db, "status")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	// Status reads only: the operator's view, with no holder of its own.
	ls, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil {
		return a.queryError(ctx, "list leases", err)
	}
	ss, err := pgleaseadmin.Slots(ctx, pool)
	if err != nil {
		return a.queryError(ctx, "list slots", err)
	}
	scopes, err := pgleaseadmin.Scopes(ctx, pool)
	if err != nil {
		return a.queryError(ctx, "list slot scopes", err)
	}
	jobs, err := pgleaseadmin.Jobs(ctx, pool, pgleaseadmin.Filter{MaxNames: maxStatusJobs})
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == undefinedFunction {
		jobs, err = nil, nil // a schema before 0.3.0 has no run ledger
	}
	if err != nil {
		return a.queryError(ctx, "list the jobs of the run ledger", err)
	}
	groups, err := pgleaseadmin.Groups(ctx, pool)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == undefinedFunction {
		groups, err = nil, nil // a schema before 0.3.0 has no groups
	}
	if err != nil {
		return a.queryError(ctx, "list the shard groups", err)
	}
	limits, limitsTotal, err := pgleaseadmin.Limits(ctx, pool, maxStatusLimits)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == undefinedFunction {
		limits, err = nil, nil // a schema before 0.4.0 has no limits
	}
	if err != nil {
		return a.queryError(ctx, "list the rate limits", err)
	}
	out := statusJSON{Leases: []leaseJSON{}, Slots: []slotJSON{}, Scopes: []scopeJSON{}, Jobs: []jobJSON{}, Groups: []groupJSON{},
		Limits: []limitJSON{}, LimitsLeftOut: max(limitsTotal-int64(len(limits)), 0)}
	for _, l := range limits {
		out.Limits = append(out.Limits, limitJSON{
			Target: l.Target, Exact: l.Exact, Rate: l.Rate, Per: l.Per.String(), Burst: l.Burst, Owner: nonEmpty(l.Owner),
			Buckets: l.Buckets, Limited: l.Limited, MinRemaining: l.MinRemaining, Used: l.Burst - l.MinRemaining,
			Reserved: l.Reserved,
		})
	}
	for _, g := range groups {
		gj := groupJSON{Name: g.Name, Role: g.Role, Shards: g.Shards, Unowned: g.Unowned, Members: []groupMemberJSON{}}
		for _, m := range g.Members {
			mj := groupMemberJSON{Member: m.Name, Shards: m.Shards, HandingOver: m.HandingOver, ExpiresAt: m.ExpiresAt.UTC()}
			if m.MaxShards > 0 {
				mj.MaxShards = &m.MaxShards
			}
			gj.Members = append(gj.Members, mj)
		}
		out.Groups = append(out.Groups, gj)
	}
	for _, j := range jobs {
		jj := jobJSON{Name: j.Name, LastRun: newRunJSON(j.Last)}
		if !j.LastSuccess.IsZero() {
			s := j.LastSuccess.UTC()
			jj.LastSuccess = &s
		}
		out.Jobs = append(out.Jobs, jj)
	}
	for _, l := range ls {
		out.Leases = append(out.Leases, leaseJSON{
			Name: l.Name, Holder: nonEmpty(l.Holder), Fence: l.Fence, State: string(l.State),
			ExpiresAt: l.ExpiresAt, ExpiresInMS: l.ExpiresIn.Milliseconds(), ExpiresIn: l.ExpiresIn.String(),
			Value: nonEmpty(l.Value), ReleaseRequested: l.ReleaseRequested, PreferredHolder: nonEmpty(l.PreferredHolder),
			Owner: nonEmpty(l.Owner),
		})
	}
	for _, s := range ss {
		out.Slots = append(out.Slots, slotJSON{
			Scope: s.Scope, Slot: s.Slot, Holder: nonEmpty(s.Holder), Fence: s.Fence, State: string(s.State),
			ExpiresAt: s.ExpiresAt, ExpiresInMS: s.ExpiresIn.Milliseconds(), ExpiresIn: s.ExpiresIn.String(),
		})
	}
	for _, s := range scopes {
		out.Scopes = append(out.Scopes, scopeJSON{Scope: s.Scope, InUse: s.InUse, Slots: s.Slots})
	}
	if asJSON {
		return a.printJSON(out)
	}
	return printStatus(a.stdout, out)
}

// printStatus prints the status as tables.
func printStatus(w io.Writer, s statusJSON) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(s.Leases) == 0 {
		fmt.Fprintln(tw, "No leases.")
	} else {
		leader := slices.ContainsFunc(s.Leases, func(l leaseJSON) bool { return l.Value != nil || l.ReleaseRequested })
		owned := slices.ContainsFunc(s.Leases, func(l leaseJSON) bool { return l.Owner != nil })
		fmt.Fprint(tw, "LEASE\tHOLDER\tFENCE\tSTATE\tEXPIRES IN")
		if leader {
			fmt.Fprint(tw, "\tVALUE\tREQUEST")
		}
		if owned {
			fmt.Fprint(tw, "\tOWNER")
		}
		fmt.Fprintln(tw)
		for _, l := range s.Leases {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s", cell(l.Name), orDash(l.Holder), l.Fence, l.State, timeLeft(l.ExpiresInMS))
			if leader {
				fmt.Fprintf(tw, "\t%s\t%s", orDash(l.Value), request(l))
			}
			if owned {
				fmt.Fprintf(tw, "\t%s", orDash(l.Owner))
			}
			fmt.Fprintln(tw)
		}
	}
	fmt.Fprintln(tw)
	if len(s.Slots) == 0 {
		fmt.Fprintln(tw, "No slots.")
	} else {
		fmt.Fprintln(tw, "SCOPE\tSLOT\tHOLDER\tFENCE\tSTATE\tEXPIRES IN")
		for _, sl := range s.Slots {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\n", cell(sl.Scope), sl.Slot, orDash(sl.Holder), sl.Fence, sl.State, timeLeft(sl.ExpiresInMS))
		}
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "SCOPE\tIN USE\tSLOTS")
		for _, sc := range s.Scopes {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", cell(sc.Scope), sc.InUse, sc.Slots)
		}
	}
	if len(s.Jobs) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "JOB\tLAST RUN\tHOLDER\tTOOK\tEXIT\tOUTCOME\tLAST SUCCESS")
		for _, j := range s.Jobs {
			success := "-"
			if j.LastSuccess != nil {
				success = j.LastSuccess.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(j.Name), j.LastRun.StartedAt.Format(time.RFC3339),
				cell(j.LastRun.Holder), took(j.LastRun), exitText(j.LastRun.ExitStatus), j.LastRun.Outcome, success)
		}
	}
	if len(s.Groups) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "GROUP\tMEMBER\tSHARDS\tHANDING OVER\tMAX")
		for _, g := range s.Groups {
			for _, m := range g.Members {
				maxShards := "-"
				if m.MaxShards != nil {
					maxShards = strconv.Itoa(*m.MaxShards)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", cell(g.Name), cell(m.Member), m.Shards, m.HandingOver, maxShards)
			}
			fmt.Fprintf(tw, "%s\t(unowned)\t%d\t-\t-\n", cell(g.Name), g.Unowned)
		}
	}
	if len(s.Limits) > 0 {
		owned := slices.ContainsFunc(s.Limits, func(l limitJSON) bool { return l.Owner != nil })
		fmt.Fprintln(tw)
		fmt.Fprint(tw, "LIMIT\tRATE\tBURST\tKEYS\tLIMITED\tLEFT\tUSED\tRESERVED")
		if owned {
			fmt.Fprint(tw, "\tOWNER")
		}
		fmt.Fprintln(tw)
		for _, l := range s.Limits {
			target := cell(l.Target)
			if l.Exact {
				target += " (exact)"
			}
			fmt.Fprintf(tw, "%s\t%d/%s\t%d\t%d\t%d\t%d\t%d/%d\t%d", target, l.Rate, l.Per, l.Burst, l.Buckets, l.Limited,
				l.MinRemaining, l.Used, l.Burst, l.Reserved)
			if owned {
				fmt.Fprintf(tw, "\t%s", orDash(l.Owner))
			}
			fmt.Fprintln(tw)
		}
		if s.LimitsLeftOut > 0 {
			fmt.Fprintf(tw, "(%d more limits, not shown)\n", s.LimitsLeftOut)
		}
	}
	return tw.Flush()
}

// request formats a lease's pending release request for a table.
func request(l leaseJSON) string {
	switch {
	case !l.ReleaseRequested:
		return "-"
	case l.PreferredHolder != nil:
		return "release to " + cell(*l.PreferredHolder)
	}
	return "release"
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// orDash formats an optional holder for a table: "-" for none.
func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return cell(*s)
}

// cell formats a name for a table cell: quoted when it holds a tab, a
// newline or another character that would break the table.
func cell(s string) string {
	for _, r := range s {
		if !strconv.IsPrint(r) || r == '\t' {
			return strconv.Quote(s)
		}
	}
	return s
}

// timeLeft formats milliseconds left for a table: "-" for none.
func timeLeft(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}
