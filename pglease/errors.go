package pglease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/pgerr"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrLeaseHeld means another holder has a live tenure of the lease.
	// TryAcquire returns it as a *HeldError, which says who and for how long.
	ErrLeaseHeld = errors.New("pglease: lease is held by another holder")

	// ErrLeaseLost means this tenure is over: a renewal, release or fenced
	// write was refused because the lease expired, was released, or was
	// taken over (the fence moved on). Stop the work the lease protected;
	// acquire again for a new tenure with a new fence.
	ErrLeaseLost = errors.New("pglease: lease lost: the tenure is over")

	// ErrInvalidArgument means an argument was rejected (empty or over-long
	// name or holder, a TTL out of range, ...). Nothing was changed. The
	// wrapped message says which argument and the allowed range.
	ErrInvalidArgument = errors.New("pglease: invalid argument")
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
}

// Error implements error.
func (e *HeldError) Error() string {
	return fmt.Sprintf("pglease: lease %q is held by %q (fence %d) for another %s",
		e.Name, e.Holder, e.Fence, e.ExpiresIn.Round(time.Millisecond))
}

// Is reports whether target is ErrLeaseHeld.
func (e *HeldError) Is(target error) bool { return target == ErrLeaseHeld }

// errs maps the SQL functions' errors to this package's sentinels.
var errs = pgerr.Sentinels{Prefix: "pglease", Invalid: ErrInvalidArgument, Lost: ErrLeaseLost}

// interpretError maps errors from the generated queries to the package's
// errors, and returns ctx.Err() unchanged when ctx has ended.
func interpretError(ctx context.Context, err error) error { return errs.Interpret(ctx, err) }

// invalidf returns an ErrInvalidArgument error with a message.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
