package pglease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/coalesce"
	"github.com/pglease/pglease/internal/db"
)

// MaxBatch is the most calls a Client coalesces into one batched call
// (pglease.acquire_batch, pglease.release_batch); more wait for the next.
const MaxBatch = 256

// acquireCall is one acquire, as a batch carries it.
type acquireCall struct {
	name  string
	ttl   time.Duration
	value string
}

// acquired is one acquire's answer and when its request was sent (its
// batch's send time: the lease's deadline counts from it).
type acquired struct {
	row   db.LeaseAcquireValueRow
	fresh bool // a new tenure, not a re-acquire of our own (batches only)
	sent  time.Time
}

// releaseCall is one release of a tenure.
type releaseCall struct {
	name  string
	fence int64
}

// batching is a client's coalescing of concurrent acquires and releases
// (docs/go.md#batched-calls): one coalesce.Group each.
type batching struct {
	acquires coalesce.Group[acquireCall, acquired]
	releases coalesce.Group[releaseCall, bool]
}

// batchSpill is how long a call or batch in flight holds back the calls
// queued behind it (coalesce.Group.Spill): some 20 times a batch's round
// trip on the bench machine, so that only a call that waits on the server
// (a row lock of a fenced transaction, say) spills.
const batchSpill = 20 * time.Millisecond

// newBatching returns the coalescing of c's calls on pool: group commit.
// An idle client sends a call at once; calls made while one is in flight
// queue and go out together when it returns, or when it has been out for
// batchSpill. (One in flight at a time made 1.13 to 1.30 times pglock's
// cycles per second with eight goroutines sharing a Client in bench
// -batch-only on a machine whose WAL flush took 0.35-0.45 ms, where as
// many in flight as the pool has connections made 0.94 to 1.02 times:
// those calls went out singly, at a single call's server time each. On a
// machine with a 58 us flush the two were level: BENCHMARKS.md.)
func newBatching(c *Client, pool *pgxpool.Pool) *batching {
	b := &batching{}
	b.acquires = coalesce.Group[acquireCall, acquired]{
		One: func(ctx context.Context, a acquireCall) (acquired, error) {
			sent := time.Now()
			row, err := c.acquire(ctx, a.name, a.ttl, acquireOptions{value: a.value})
			return acquired{row: row, sent: sent}, err
		},
		Many:     c.acquireMany,
		Left:     c.releaseLeft,
		Max:      MaxBatch,
		InFlight: 1,
		Spill:    batchSpill,
	}
	q := db.New(pool)
	b.releases = coalesce.Group[releaseCall, bool]{
		One: func(ctx context.Context, r releaseCall) (bool, error) {
			return q.LeaseReleaseAsync(ctx, db.LeaseReleaseAsyncParams{Name: r.name, Holder: c.c.Holder(), Fence: r.fence})
		},
		Many:     c.releaseMany,
		Max:      MaxBatch,
		InFlight: 1,
		Spill:    batchSpill,
	}
	return b
}

// acquireMany sends calls as one pglease.acquire_batch, sent now. A
// schema without it (before 0.3.0), or an error of the whole call from
// the server (a deadlock, a lease that changed on every attempt), makes
// the calls one by one instead, so that each gets its own verdict.
func (c *Client) acquireMany(ctx context.Context, calls []acquireCall) []coalesce.Result[acquired] {
	out := make([]coalesce.Result[acquired], len(calls))
	if c.c.Modern() {
		p := db.LeaseAcquireBatchParams{
			Names: make([]string, len(calls)), Holder: c.c.Holder(),
			Ttls: make([]time.Duration, len(calls)), LeaseValues: make([]string, len(calls)),
		}
		for i, a := range calls {
			p.Names[i], p.Ttls[i], p.LeaseValues[i] = a.name, a.ttl, a.value
		}
		sent := time.Now()
		rows, err := c.c.Queries().LeaseAcquireBatch(ctx, p)
		switch {
		case err == nil && len(rows.Acquired) == len(calls):
			for i := range calls {
				if code := rows.Sqlstates[i]; code != "" {
					out[i].Err = elementError("acquire_batch", calls[i].name, code)
					continue
				}
				out[i].Res = acquired{sent: sent, fresh: rows.Fresh[i], row: db.LeaseAcquireValueRow{
					Acquired: rows.Acquired[i], Fence: rows.Fences[i], Holder: rows.Holders[i],
					ExpiresIn: rows.ExpiresIn[i], Value: rows.LeaseValues[i],
				}}
			}
			return out
		case err == nil:
			err = fmt.Errorf("pglease.acquire_batch returned %d results for %d names", len(rows.Acquired), len(calls))
			fallthrough
		case !wholeCallRefused(c, err):
			for i := range out {
				out[i].Err = err
			}
			return out
		}
	}
	for i, a := range calls {
		sent := time.Now()
		row, err := c.acquire(ctx, a.name, a.ttl, acquireOptions{value: a.value})
		out[i] = coalesce.Result[acquired]{Res: acquired{row: row, sent: sent}, Err: err}
	}
	return out
}

// releaseMany sends calls as one pglease.release_batch, committed without
// waiting for its WAL flush (as LeaseReleaseAsync), or one by one as
// acquireMany falls back.
func (c *Client) releaseMany(ctx context.Context, calls []releaseCall) []coalesce.Result[bool] {
	out := make([]coalesce.Result[bool], len(calls))
	q := c.c.Queries()
	if c.c.Modern() {
		p := db.LeaseReleaseBatchAsyncParams{Names: make([]string, len(calls)), Holder: c.c.Holder(), Fences: make([]int64, len(calls))}
		for i, r := range calls {
			p.Names[i], p.Fences[i] = r.name, r.fence
		}
		rows, err := q.LeaseReleaseBatchAsync(ctx, p)
		switch {
		case err == nil && len(rows.Released) == len(calls):
			for i := range calls {
				if code := rows.Sqlstates[i]; code != "" {
					out[i].Err = elementError("release_batch", calls[i].name, code)
					continue
				}
				out[i].Res = rows.Released[i]
			}
			return out
		case err == nil:
			err = fmt.Errorf("pglease.release_batch returned %d results for %d names", len(rows.Released), len(calls))
			fallthrough
		case !wholeCallRefused(c, err):
			for i := range out {
				out[i].Err = err
			}
			return out
		}
	}
	for i, r := range calls {
		released, err := q.LeaseReleaseAsync(ctx, db.LeaseReleaseAsyncParams{Name: r.name, Holder: c.c.Holder(), Fence: r.fence})
		out[i] = coalesce.Result[bool]{Res: released, Err: err}
	}
	return out
}

// wholeCallRefused reports whether err is the server's refusal of a whole
// batched call (any SQL error: a missing function, a deadlock, a
// serialization failure), after which each call goes on its own; not a
// connection error or a cancellation, whose outcome is unknown.
func wholeCallRefused(c *Client, err error) bool {
	_, ok := errors.AsType[*pgconn.PgError](err)
	if ok {
		c.c.Missing(err) // a schema before 0.3.0: single calls for a while
	}
	return ok
}

// elementError is the error of a batch's element the server refused with
// SQLSTATE code (22004 or 22023: a bad argument), as the single call
// would raise it, so that it maps to ErrInvalidArgument. The client checks
// arguments before batching them: it means client and server disagree.
func elementError(fn, name string, code string) error {
	return &pgconn.PgError{
		Code:    code,
		Message: fmt.Sprintf("pglease.%s: element %q refused as a bad argument (SQLSTATE %s)", fn, name, code),
	}
}

// releaseLeft releases a lease that a batch granted to a caller who had
// left (its context ended): nobody knows of it. Only a new tenure is
// released; a re-acquire of a tenure this client already held is left as
// it was, since its first owner still uses it (so is a grant whose
// freshness is unknown: a call made one by one, on a schema before 0.3.0).
func (c *Client) releaseLeft(a acquireCall, res coalesce.Result[acquired]) {
	if res.Err != nil || !res.Res.row.Acquired || !res.Res.fresh {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.ttl)
	defer cancel()
	_, err := c.c.Queries().LeaseRelease(ctx, db.LeaseReleaseParams{Name: a.name, Holder: c.c.Holder(), Fence: res.Res.row.Fence})
	if err != nil {
		c.c.Logger().Warn("pglease: releasing a lease granted to a caller who left failed; it frees at its expiry",
			"name", a.name, "fence", res.Res.row.Fence, "error", err)
	}
}
