package pglease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/tenure"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrLeaseHeld means another holder has a live tenure of the lease.
	// TryAcquire returns it as a *HeldError, which says who and for how long.
	ErrLeaseHeld = errors.New("pglease: lease is held by another holder")

	// ErrLeaseLost means this tenure is over: a renewal, release or fenced
	// write was refused because the lease expired, was released, or was
	// taken over (the fence moved on). Stop the work the lease protected;
	// acquire again for a new tenure with a new fence. Run reports a loss
	// as a *LostError, which matches it.
	ErrLeaseLost = tenure.ErrLeaseLost

	// ErrInvalidArgument means an argument or a Config field was rejected
	// (empty or over-long name or holder, a TTL out of range, ...). Nothing
	// was changed. The wrapped message says which one and the allowed range.
	ErrInvalidArgument = tenure.ErrInvalidArgument

	// ErrNotMigrated means schema pglease, or a function this client calls,
	// is missing from the database: the migrations were not applied, or are
	// older than this client needs. Apply them (pgleasemigrate.Up, or
	// `pglease migrate up`).
	ErrNotMigrated = tenure.ErrNotMigrated

	// ErrPermissionDenied means the connecting role may not call pglease's
	// functions. Grant it role pglease_client.
	ErrPermissionDenied = tenure.ErrPermissionDenied
)

// HeldError is returned by TryAcquire when another holder has a live tenure.
// It matches ErrLeaseHeld with errors.Is; use errors.As to read it.
type HeldError struct {
	// Name is the lease name.
	Name string
	// Holder is the identity of the current holder.
	Holder string
	// Fence is the current holder's fence.
	Fence int64
	// ExpiresIn is how long the current tenure has left, as computed by the
	// server when it refused; the lease can be taken over after that unless
	// the holder renews.
	ExpiresIn time.Duration
	// Value is the value the current holder published (WithValue,
	// Lease.SetValue); empty when none. docs/leadership.md.
	Value string
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("pglease: lease %q is held by %q (fence %d) for another %s",
		e.Name, e.Holder, e.Fence, e.ExpiresIn.Round(time.Millisecond))
}

// Is reports whether target is ErrLeaseHeld.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// LostError is how Lease.Run reports a lease lost while the workload ran.
// It matches ErrLeaseLost with errors.Is, and wraps why the workload was
// cancelled and what it returned; use errors.As to read it.
type LostError struct {
	// Name is the lease name.
	Name string
	// Fence is the lost tenure's fence.
	Fence int64
	// Cause is why the workload was cancelled: the refused renewal, the
	// passed deadline, or ctx's error when ctx ended before the loss.
	Cause error
	// WorkErr is what the workload returned, unless nil or
	// context.Canceled.
	WorkErr error
}

// Error implements error.
func (e *LostError) Error() string {
	return tenure.LostText(fmt.Sprintf("pglease: lease %q (fence %d) lost while the workload ran", e.Name, e.Fence), e.Cause, e.WorkErr)
}

// Unwrap returns ErrLeaseLost, the cause and the workload's error.
func (e *LostError) Unwrap() []error { return tenure.LostUnwrap(ErrLeaseLost, e.Cause, e.WorkErr) }

// interpretError maps errors from the generated queries to the package's
// errors, and returns ctx.Err() unchanged when ctx has ended.
func interpretError(ctx context.Context, err error) error {
	return tenure.Interpret(ctx, "pglease", ErrLeaseLost, err)
}
