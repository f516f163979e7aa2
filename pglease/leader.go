package pglease

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
)

// MaxValueLen is the longest value a holder may publish, in bytes
// (docs/leadership.md).
const MaxValueLen = 1024

// AcquireOption configures one Acquire or TryAcquire.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	value       string
	watch       bool
	holdAtLeast time.Duration
}

// WithHoldAtLeast makes the tenure's Release (and so Run's) leave the lease
// held until at least d after its grant, on the server's clock
// (pglease.release_after): a workload that ends sooner keeps the lease
// from everyone else until then, so that a cron job fired again on another
// host within d of the grant finds it held and skips (docs/cron.md). A
// workload that runs longer releases at its end, as without it. From 0 (the
// default: the lease frees at the release) to MaxTTL.
func WithHoldAtLeast(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.holdAtLeast = d }
}

// WatchReleaseRequests makes the tenure learn a release request
// (ReleaseRequested) as soon as it is made, instead of at its next renewal
// (a Keeper's rounds do not report requests at all). The acquire listens
// for notifications of the lease before it is sent, on the client's
// notification connection (see DB; shared with its other waiters), and
// the tenure keeps listening until it ends; every release request
// notifies, and at each notification the tenure reads whether one was
// made (a read of pglease.lease_status, no commit). Unlike Observe it
// registers nothing on the server, so the lease's other changes (the next
// holder's grant among them) send nothing, and their commits do not queue
// on the NOTIFY lock. Where the client cannot listen (a pooler), a tenure
// kept by a Keeper reads every third of its TTL instead, and others learn
// it at their own renewals.
func WatchReleaseRequests() AcquireOption {
	return func(o *acquireOptions) { o.watch = true }
}

// WithValue publishes value with the tenure: who leads and where (an
// address, a small JSON document), for followers, observers and dashboards
// to read (Observe, HeldError.Value, pgleaseadmin.Leases). At most
// MaxValueLen bytes; empty means none. A re-acquire of the client's own
// live tenure replaces its value. The value goes when the tenure ends.
func WithValue(value string) AcquireOption {
	return func(o *acquireOptions) { o.value = value }
}

// acquire calls the acquire with a value of schema 0.3.0, or, on an
// earlier schema, the three-argument one (a refusal then has no value,
// and a value cannot be published: ErrNotMigrated).
func (c *Client) acquire(ctx context.Context, name string, ttl time.Duration, o acquireOptions) (db.LeaseAcquireValueRow, error) {
	if c.c.Modern() {
		row, err := c.c.Queries().LeaseAcquireValue(ctx, db.LeaseAcquireValueParams{
			Name: name, Holder: c.c.Holder(), Ttl: ttl, Value: sqlValue(o.value),
		})
		if err == nil || !c.c.Missing(err) || o.value != "" {
			return row, err
		}
	}
	if o.value != "" {
		return db.LeaseAcquireValueRow{}, fmt.Errorf("%w: publishing a value (WithValue) needs schema 0.3.0", ErrNotMigrated)
	}
	r, err := c.c.Queries().LeaseAcquire(ctx, db.LeaseAcquireParams{Name: name, Holder: c.c.Holder(), Ttl: ttl})
	return db.LeaseAcquireValueRow{
		Acquired: r.Acquired, Fence: r.Fence, Holder: r.Holder, ExpiresAt: r.ExpiresAt, ExpiresIn: r.ExpiresIn,
	}, err
}

// checkValue refuses a value over MaxValueLen, as the SQL does.
func checkValue(value string) error {
	if len(value) > MaxValueLen {
		return tenure.Invalidf("value must be at most %d bytes long, got %d bytes", MaxValueLen, len(value))
	}
	return nil
}

// sqlValue is value as the SQL takes it: NULL for none.
func sqlValue(value string) pgtype.Text {
	return pgtype.Text{String: value, Valid: value != ""}
}

// SetValue replaces the value this tenure publishes (empty: none), by
// compare-and-set on holder and fence as Renew does; observers are
// notified. It returns ErrLeaseLost when the tenure is over (the value is
// not set), and an error matching ErrInvalidArgument for a value over
// MaxValueLen. The expiry does not move.
func (l *Lease) SetValue(ctx context.Context, value string) error {
	if err := checkValue(value); err != nil {
		return err
	}
	set, err := db.New(l.db).LeaseSetValue(ctx, db.LeaseSetValueParams{
		Name: l.Name(), Holder: l.Holder(), Fence: l.Fence(), Value: sqlValue(value),
	})
	if err != nil {
		return interpretError(ctx, err)
	}
	if !set {
		return fmt.Errorf("%w: lease %q fence %d is over: its value was not set", ErrLeaseLost, l.Name(), l.Fence())
	}
	return nil
}

// ReleaseRequested returns a channel that is closed once an operator has
// asked this tenure's holder to hand over (pgleaseadmin.RequestRelease,
// `pglease release --request`). The tenure learns it at its next renewal
// (Renew, or Run's renewals; a Keeper's rounds do not report it), or at
// once when it was acquired with WatchReleaseRequests (the supervisor
// does both). pglease only asks: stop the work, then Release; until then
// the tenure stays yours and is renewed as before.
func (l *Lease) ReleaseRequested() <-chan struct{} { return l.t.Asked() }
