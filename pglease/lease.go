package pglease

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/notify"
	"github.com/pglease/pglease/internal/tenure"
)

// NotifyChannel is the channel the SQL functions NOTIFY on when a lease or
// slot that someone waits for is released (a refused acquire or claim
// registers its caller as a waiter until the holder's expiry). The payload
// is JSON: {"kind": "lease"|"slot", "event": "released", "name": ...},
// with no holder or fence, since any role may LISTEN; a notification only
// tells a waiter to try again, so a forged one costs a retry. Releases
// nobody waits for send nothing: a NOTIFY makes its transaction commit
// under a cluster-wide lock.
const NotifyChannel = "pglease"

// Lease is one tenure of a named lease, identified by its fence. It is safe
// for concurrent use.
type Lease struct {
	t  *tenure.Tenure
	db DB // the client's, for SetValue
}

// TryAcquire takes the lease name for ttl, or returns at once. It returns a
// *HeldError (errors.Is ErrLeaseHeld) when another holder has a live tenure.
// When this client already holds the lease, it gets the same tenure (same
// fence) back with its expiry re-pinned to ttl from now: retrying after a
// lost reply never creates a second tenure.
//
// Options publish a value with the tenure (WithValue), keep the lease held
// for a while after its grant (WithHoldAtLeast), or watch for release
// requests (WatchReleaseRequests).
func (c *Client) TryAcquire(ctx context.Context, name string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	o, err := c.check(name, ttl, opts)
	if err != nil {
		return nil, err
	}
	l, _, err := c.try(ctx, name, ttl, o)
	return l, err
}

// Acquire takes the lease name for ttl, waiting while another holder has it.
// It wakes as soon as the holder releases (a NOTIFY, when the client was
// built on a *pgxpool.Pool) and otherwise sleeps until the holder's reported
// expiry, then tries again. It returns ctx.Err() unchanged when ctx ends
// first. A serialization failure or deadlock the server broke (SQLSTATE
// 40001, 40P01: nothing changed) is tried again after a backoff from 5ms
// doubling to 500ms, except in a pgx.Tx (the server aborted it); other
// errors (connection failures, bad arguments) are returned at once.
// Options as for TryAcquire.
func (c *Client) Acquire(ctx context.Context, name string, ttl time.Duration, opts ...AcquireOption) (*Lease, error) {
	o, err := c.check(name, ttl, opts)
	if err != nil {
		return nil, err
	}
	return tenure.Await(ctx, c.c, func(ctx context.Context) (*Lease, *tenure.Refusal, error) {
		return c.try(ctx, name, ttl, o)
	})
}

// check validates an acquire's arguments as the SQL does, and returns its
// options.
func (c *Client) check(name string, ttl time.Duration, opts []AcquireOption) (acquireOptions, error) {
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := tenure.CheckText("name", name); err != nil {
		return o, err
	}
	if err := checkValue(o.value); err != nil {
		return o, err
	}
	if o.holdAtLeast < 0 || o.holdAtLeast > MaxTTL {
		return o, tenure.Invalidf("WithHoldAtLeast must be from 0 to %s, got %s", MaxTTL, o.holdAtLeast)
	}
	return o, c.c.CheckTTL(ttl)
}

// try makes one acquire: a lease, or the refusal as a *HeldError and its
// wait, or another error.
func (c *Client) try(ctx context.Context, name string, ttl time.Duration, o acquireOptions) (*Lease, *tenure.Refusal, error) {
	var (
		res acquired
		err error
		w   *notify.Waiter
	)
	if err := c.c.ConfirmReleases(ctx, name); err != nil {
		return nil, nil, err
	}
	if o.watch {
		w = c.c.ListenChanges(ctx, name) // before the grant: no request is missed
	}
	if c.batch != nil {
		res, err = c.batch.acquires.Do(ctx, acquireCall{name: name, ttl: ttl, value: o.value})
	} else {
		res.sent = time.Now()
		res.row, err = c.acquire(ctx, name, ttl, o)
	}
	if err == nil && res.row.Acquired {
		l := &Lease{t: c.c.Grant(name, 0, res.row.Fence, ttl, res.sent), db: c.db}
		l.t.HoldAtLeast(o.holdAtLeast)
		if w != nil {
			l.t.WatchAsked(w)
		}
		return l, nil, nil
	}
	if w != nil {
		w.Close(ctx)
	}
	if err != nil {
		return nil, nil, c.c.Interpret(ctx, err)
	}
	row := res.row
	held := &HeldError{Name: name, Holder: row.Holder, Fence: row.Fence, ExpiresIn: row.ExpiresIn, Value: row.Value}
	c.c.Refused(ctx, name)
	return nil, &tenure.Refusal{Name: name, RetryIn: held.ExpiresIn, Sent: res.sent}, held
}

// Name returns the lease name.
func (l *Lease) Name() string { return l.t.Name() }

// Fence returns this tenure's fence: larger than that of every earlier
// tenure of the lease. Pass it with the Name to WithFence or SendFenced to
// fence writes.
func (l *Lease) Fence() int64 { return l.t.Fence() }

// Holder returns the identity holding this tenure.
func (l *Lease) Holder() string { return l.t.Holder() }

// TTL returns the time to live each acquire or renew grants.
func (l *Lease) TTL() time.Duration { return l.t.TTL() }

// Deadline returns the local time after which the lease must be assumed
// gone: when the last successful acquire or renew request was sent, plus the
// TTL, minus the safety margin. The server's expiry is at least TTL after it
// received that request, so it is later than Deadline. Deadline carries Go's
// monotonic clock reading: compare it with time.Now or time.Until only (wall
// clock steps do not move it), and do not serialise it.
func (l *Lease) Deadline() time.Time { return l.t.Deadline() }

// Done returns a channel that is closed once this tenure can no longer be
// trusted: Deadline passed without a renewal moving it, a renewal was
// refused, or the lease was released. Work the lease guards should stop
// when it closes; Run does that for its workload.
func (l *Lease) Done() <-chan struct{} { return l.t.Done() }

// Renew extends the tenure by the lease's TTL from now, and moves Deadline.
// It returns ErrLeaseLost when the server refused: the lease expired, was
// released or taken over, and the work it guards must stop. Any other error
// (a connection failure, a timeout) leaves the outcome unknown: the renewal
// may or may not have happened. Renewing is idempotent, so retry while
// Deadline allows; only ErrLeaseLost is a verdict.
func (l *Lease) Renew(ctx context.Context) error { return l.t.Renew(ctx) }

// Release ends the tenure so that others can acquire the lease at once
// (waiters are notified), and closes Done. The lease keeps its fence: the
// next tenure gets a larger one. Release returns ErrLeaseLost when the
// tenure had already ended (expired or taken over): anything done after
// Deadline was unprotected. Acquired WithHoldAtLeast(d), the lease stays
// held on the server until d after its grant (Done closes at once all the
// same: the tenure is no longer for work).
//
// On a pool, or a connection outside a transaction block, the release
// commits without waiting for its WAL flush (one flush per tenure instead
// of two): a release lost in a crash leaves the lease held until its
// expiry, and every later grant's durable commit carries the release with
// it. Inside a pgx.Tx it commits with the transaction, as durable as it is.
func (l *Lease) Release(ctx context.Context) error { return l.t.Release(ctx) }

// Run holds the lease while fn runs, renewing it, and releases it once fn
// has returned. fn must not renew or release the lease.
//
// fn's context is cancelled as soon as the lease can no longer be trusted:
// a renewal is refused, or Deadline passes without a successful renewal
// (renewals run every Config.RenewInterval; one whose outcome is unknown is
// retried after Config.RetryDelay while the deadline allows). Its cause
// (context.Cause) then matches ErrLeaseLost. It is also cancelled when ctx
// ends, with ctx's error as its cause; the lease is renewed until fn
// returns, so it does not lapse while fn winds down. Run never releases
// the lease, nor returns, while fn may still run; if fn has not returned
// Config.StopTimeout after its context was cancelled, Run logs it (and
// calls Config.OnStuck) and keeps waiting.
//
// Run returns:
//   - when the lease was lost while fn ran: a *LostError (matching
//     ErrLeaseLost), whatever fn returned, even nil. It wraps why fn was
//     cancelled and fn's error unless that is nil or context.Canceled. The
//     lease is not released: it is not ours any more, or will not be once
//     it expires;
//   - otherwise fn's error, unchanged, after releasing the lease on a
//     context detached from ctx and bounded by the TTL. A failed release
//     is logged (and passed to Config.OnRelease), not returned: fn
//     finished within the tenure, and the lease frees when it expires.
func (l *Lease) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	return l.t.Run(ctx, fn)
}
