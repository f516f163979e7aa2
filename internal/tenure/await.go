package tenure

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pglease/pglease/internal/notify"
)

// Refusal is why one try did not grant a tenure.
type Refusal struct {
	// Name is the lease name or scope that refused: the one to wait on.
	Name string
	// Units is, for a slot claim, the units it asks for in Name: a release
	// that leaves fewer free does not wake it (0: any release wakes it).
	Units int
	// RetryIn is when a retry may succeed without a release: the holder's
	// expiry, or a backoff after an error the caller retries.
	RetryIn time.Duration
	// Sent is when the refused request was sent. The server read its clock
	// after that, so Sent + RetryIn is at or before the expiry, by the
	// request's travel time: a retry sent then reaches the server at about
	// the expiry. Waiting RetryIn from the reply instead would add the
	// reply's travel time and the client's own delays, which grow with load
	// (a takeover after a crash waits for exactly this). Zero: RetryIn
	// counts from the wait.
	Sent time.Time
}

// retryPad is added to a wait anchored at Refusal.Sent: a retry that
// arrives a little before the expiry costs one more round trip.
const retryPad = time.Millisecond

// wait returns how long to wait after r before trying again.
func (r *Refusal) wait() time.Duration {
	if r.Sent.IsZero() {
		return r.RetryIn
	}
	return max(time.Until(r.Sent.Add(r.RetryIn))+retryPad, 0)
}

// transient reports whether err is a failure the SQL functions document
// as "retry the call", having changed nothing: a serialization failure
// (40001: the row changed under every attempt) or a deadlock the server
// broke (40P01).
func transient(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// Backoff between transient failures of a blocking call: from
// minTransient, doubling to maxTransient, each with jitter.
const (
	minTransient = 5 * time.Millisecond
	maxTransient = 500 * time.Millisecond
)

// Await calls try until it grants or fails, waiting between refusals for a
// release NOTIFY of the refusing name or its RetryIn, whichever comes
// first. It listens only once refused (a free lease or slot needs no LISTEN
// connection), and after starting to listen to a name it tries again before
// waiting, so that a release between the refusal and the LISTEN is not
// missed. A transient failure is tried again after a backoff, as the
// functions ask, unless the client runs in the caller's transaction (a
// pgx.Tx): the server aborted it, so a retry could only fail with 25P02 and
// hide the cause. It returns ctx.Err() unchanged when ctx ends first.
func Await[T any](ctx context.Context, c *Core, try func(ctx context.Context) (T, *Refusal, error)) (T, error) {
	var (
		w         *notify.Waiter
		listening string // the name w waits on
		retried   bool
		backoff   time.Duration
	)
	_, inTx := c.db.(pgx.Tx)
	defer func() {
		if w != nil {
			w.Close(ctx)
		}
	}()
	for {
		got, ref, err := try(ctx)
		if ref == nil && !inTx && transient(err) {
			backoff = min(max(2*backoff, minTransient), maxTransient)
			t := time.NewTimer(backoff/2 + rand.N(backoff/2))
			select {
			case <-ctx.Done():
				t.Stop()
				var zero T
				return zero, ctx.Err()
			case <-t.C:
			}
			continue
		}
		if ref == nil {
			return got, err
		}
		if w == nil || listening != ref.Name {
			if w != nil {
				w.Close(ctx)
			}
			w, listening = c.hub.ListenUnits(ctx, c.kind.Noun, ref.Name, ref.Units), ref.Name
			if !retried {
				retried = true
				continue
			}
		}
		retried = false
		if c.OnWait != nil {
			c.OnWait(ref.Name, err)
		}
		if err := w.Wait(ctx, ref.wait()); err != nil {
			var zero T
			return zero, err
		}
	}
}
