package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/pglease/pglease/pgleaseadmin"
)

var historyCommand = &command{
	name:    "history",
	summary: "List the recent runs of a job from the run ledger (pglease run --once-per)",
	usage: `
Usage: pglease history NAME [--limit 20] [--json] [--database URL]

Lists the runs of job NAME (the --lease of pglease run --once-per) that the
run ledger keeps, newest first: the window each counts for, the tenure's
fence and holder, when it started and ended and how long it took (server
clock), its exit status and outcome: running, succeeded, failed, or lost
(its tenure ended before it could record its end). pglease purge deletes
old runs, never a job's newest success.

With --json it prints one JSON object, whose shape is stable:

  {"name": "nightly", "runs": [{"fence": 7, "window": "2025-01-02T03:05:00Z",
     "holder": "host/4242/9f..", "started_at": "2025-01-02T03:04:59.2Z",
     "ended_at": "2025-01-02T03:04:59.5Z", "duration_ms": 300,
     "exit_status": 0, "outcome": "succeeded"}]}

ended_at is null and duration_ms 0 while a run runs or when it was lost;
exit_status is null when none was recorded.`,
	interspersed: true,
	flags: func(a *app, fs *flag.FlagSet) func(context.Context, []string) error {
		var (
			db     dbFlag
			asJSON bool
			limit  int
		)
		db.register(fs)
		fs.BoolVar(&asJSON, "json", false, "print JSON (shape in 'pglease help history')")
		fs.IntVar(&limit, "limit", 20, "list at most `N` runs")
		return func(ctx context.Context, args []string) error {
			if len(args) != 1 || args[0] == "" {
				return usagef("history", "give the job's NAME, one argument")
			}
			if limit < 1 || limit > pgleaseadmin.MaxJobHistory {
				return usagef("history", "--limit must be from 1 to %d, got %d", pgleaseadmin.MaxJobHistory, limit)
			}
			return a.history(ctx, &db, args[0], limit, asJSON)
		}
	},
}

// historyJSON is the output of history --json.
type historyJSON struct {
	Name string    `json:"name"`
	Runs []runJSON `json:"runs"`
}

// runJSON is one run, in history --json and status --json.
type runJSON struct {
	Fence      int64      `json:"fence,omitempty"`
	Window     *time.Time `json:"window,omitempty"`
	Holder     string     `json:"holder"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at"`
	DurationMS int64      `json:"duration_ms"`
	ExitStatus *int       `json:"exit_status"`
	Outcome    string     `json:"outcome"`
}

// newRunJSON converts a run of the ledger.
func newRunJSON(r pgleaseadmin.JobRun) runJSON {
	j := runJSON{Fence: r.Fence, Holder: r.Holder, StartedAt: r.StartedAt.UTC(), Outcome: r.Outcome}
	if !r.Window.IsZero() {
		w := r.Window.UTC()
		j.Window = &w
	}
	if !r.EndedAt.IsZero() {
		e := r.EndedAt.UTC()
		j.EndedAt = &e
		j.DurationMS = r.EndedAt.Sub(r.StartedAt).Milliseconds()
	}
	if r.ExitStatus >= 0 {
		s := r.ExitStatus
		j.ExitStatus = &s
	}
	return j
}

func (a *app) history(ctx context.Context, db *dbFlag, name string, limit int, asJSON bool) error {
	pool, err := a.open(ctx, db, "history")
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	runs, err := pgleaseadmin.JobHistory(ctx, pool, name, limit)
	if err != nil {
		return a.queryError(ctx, fmt.Sprintf("read the run history of %s", quoteName(name)), err)
	}
	out := historyJSON{Name: name, Runs: []runJSON{}}
	for _, r := range runs {
		out.Runs = append(out.Runs, newRunJSON(r))
	}
	if asJSON {
		return a.printJSON(out)
	}
	return printHistory(a.stdout, out)
}

// printHistory prints the runs as a table.
func printHistory(w io.Writer, h historyJSON) error {
	if len(h.Runs) == 0 {
		_, err := fmt.Fprintf(w, "No runs of %s.\n", quoteName(h.Name))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WINDOW\tFENCE\tHOLDER\tSTARTED\tTOOK\tEXIT\tOUTCOME")
	for _, r := range h.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.Window.Format(time.RFC3339), r.Fence, cell(r.Holder),
			r.StartedAt.Format(time.RFC3339Nano), took(r), exitText(r.ExitStatus), r.Outcome)
	}
	return tw.Flush()
}

// took formats a run's duration for a table: "-" while it runs or when lost.
func took(r runJSON) string {
	if r.EndedAt == nil {
		return "-"
	}
	return (time.Duration(r.DurationMS) * time.Millisecond).String()
}

// exitText formats an exit status for a table: "-" for none.
func exitText(s *int) string {
	if s == nil {
		return "-"
	}
	return fmt.Sprint(*s)
}

// printJSON prints v as indented JSON on standard output (--json).
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
