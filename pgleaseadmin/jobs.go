package pgleaseadmin

import (
	"context"
	"math"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// JobRun is one row of the run ledger (pglease.runs, docs/cron.md): a run
// of a job under one tenure of its lease, as `pglease run --once-per`
// records it.
type JobRun struct {
	// Fence is the tenure's fence: one run per tenure.
	Fence int64
	// Window is the start of the window the run counts for, on the
	// server's clock.
	Window time.Time
	// Holder is the tenure's holder.
	Holder string
	// StartedAt and EndedAt are the server's clock readings at the run's
	// begin and end; EndedAt is zero while it runs, or when it was lost
	// without an end.
	StartedAt, EndedAt time.Time
	// ExitStatus is the command's exit status, -1 when none was recorded.
	ExitStatus int
	// Outcome is running, succeeded, failed or lost.
	Outcome string
}

// MaxJobHistory is the most rows JobHistory returns.
const MaxJobHistory = 10000

// JobHistory returns the ledger of job name on database, newest first, at
// most limit rows (1 to MaxJobHistory): every run not purged yet
// (`pglease history`).
func JobHistory(ctx context.Context, database pglease.DB, name string, limit int) ([]JobRun, error) {
	if err := tenure.CheckText("name", name); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxJobHistory {
		return nil, tenure.Invalidf("limit must be from 1 to %d, got %d", MaxJobHistory, limit)
	}
	rows, err := db.New(database).RunHistory(ctx, db.RunHistoryParams{Name: name, MaxRows: int32(limit)})
	return tenure.List(ctx, prefix, rows, err, func(r db.RunHistoryRow) JobRun {
		run := JobRun{Fence: r.Fence, Window: r.WindowStart, Holder: r.Holder, StartedAt: r.StartedAt,
			ExitStatus: int(r.ExitStatus), Outcome: r.Outcome}
		if r.Ended {
			run.EndedAt = r.EndedAt
		}
		return run
	})
}

// JobSummary is the last run and the last success of one job in the run
// ledger (pglease.run_summary).
type JobSummary struct {
	// Name is the job's lease name.
	Name string
	// Last is the newest run (its Window and Fence are not reported: zero).
	Last JobRun
	// LastSuccess is when the newest succeeded run ended, zero when none
	// is kept.
	LastSuccess time.Time
	// Window is the newest run's window length (--once-per).
	Window time.Duration
}

// Jobs returns the summary of every job in the run ledger of database
// that f selects, by name (`pglease status`, the exporter). A Names that is
// not a valid regular expression, or out-of-range options, are
// pglease.ErrInvalidArgument.
func Jobs(ctx context.Context, database pglease.DB, f Filter) ([]JobSummary, error) {
	names, maxNames, err := f.check()
	if err != nil {
		return nil, err
	}
	r, err := db.New(database).RunSummary(ctx, db.RunSummaryParams{Names: names, MaxNames: maxNames})
	if err != nil {
		return nil, interpret(ctx, err)
	}
	out := make([]JobSummary, len(r.JobNames))
	for i, n := range r.JobNames {
		out[i] = JobSummary{Name: n, LastSuccess: epoch(r.LastSuccess[i]), Window: time.Duration(r.LastWindows[i] * float64(time.Second)), Last: JobRun{
			Holder: r.LastHolders[i], StartedAt: epoch(r.LastStarted[i]), EndedAt: epoch(r.LastEnded[i]),
			ExitStatus: int(r.LastExitStatuses[i]), Outcome: r.LastOutcomes[i],
		}}
	}
	return out, nil
}

// epoch turns seconds since the Unix epoch into a time, 0 into the zero
// time.
func epoch(s float64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(math.Round(frac*1e6))*1e3).UTC()
}
