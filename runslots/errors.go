package runslots

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pglease/pglease/internal/pgerr"
	"github.com/pglease/pglease/pglease"
)

// Sentinel errors, matched with errors.Is. Invalid arguments are reported
// with pglease.ErrInvalidArgument, as by the pglease package.
var (
	// ErrFull means the scope already has capacity live holders.
	// TryClaim and TryClaimAll return it as a *FullError, which says how
	// many slots are in use and when the earliest frees.
	ErrFull = errors.New("runslots: scope is full")

	// ErrSlotLost means this slot tenure is over: a renewal or release was
	// refused because the slot expired, was released, or was taken over
	// (its fence moved on). Stop the work the slot admitted; claim again
	// for a new tenure. It also matches pglease.ErrLeaseLost, so code that
	// keeps leases and slots alike can test for that one.
	ErrSlotLost error = slotLost{}
)

// slotLost is ErrSlotLost's type: a distinct sentinel that also matches
// pglease.ErrLeaseLost.
type slotLost struct{}

func (slotLost) Error() string { return "runslots: slot lost: the tenure is over" }

// Is reports whether target is pglease.ErrLeaseLost.
func (slotLost) Is(target error) bool { return target == pglease.ErrLeaseLost }

// FullError is returned by TryClaim and TryClaimAll when a scope already
// has capacity live holders. It matches ErrFull with errors.Is; use
// errors.As to read it.
type FullError struct {
	// Scope is the scope that refused: for TryClaimAll, the first full one
	// in the order given.
	Scope string
	// Capacity is the capacity the refused claim asked for.
	Capacity int
	// InUse is the number of live holders of Scope when it refused. It can
	// exceed Capacity after the capacity was lowered, and can be below it
	// when a slot freed while the claim was being decided.
	InUse int
	// RetryIn is the time until the earliest live slot of Scope expires, as
	// computed by the server when it refused: a slot frees then at the
	// latest unless its holder renews (zero when none is live). A release
	// frees one earlier; Claim wakes at either.
	RetryIn time.Duration
}

// Error implements error.
func (e *FullError) Error() string {
	return fmt.Sprintf("runslots: scope %q is full: %d live holders for capacity %d; the earliest expires in %s",
		e.Scope, e.InUse, e.Capacity, e.RetryIn.Round(time.Millisecond))
}

// Is reports whether target is ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// lostError is how Run reports a slot lost while its workload ran. It
// matches ErrSlotLost (and so pglease.ErrLeaseLost) and wraps why the
// workload was cancelled and what the workload returned.
type lostError struct {
	scope   string
	slot    int
	fence   int64
	cause   error // why the workload was cancelled
	workErr error // what it returned, unless context.Canceled or nil
}

func (e *lostError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "runslots: slot %d of scope %q (fence %d) lost while the workload ran", e.slot, e.scope, e.fence)
	if e.cause != nil {
		fmt.Fprintf(&b, ": %v", e.cause)
	}
	if e.workErr != nil {
		fmt.Fprintf(&b, "; the workload returned: %v", e.workErr)
	}
	return b.String()
}

// Unwrap returns ErrSlotLost, the cause and the workload's error.
func (e *lostError) Unwrap() []error {
	errs := []error{ErrSlotLost}
	for _, err := range []error{e.cause, e.workErr} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// errs maps the SQL functions' errors to this package's sentinels.
var errs = pgerr.Sentinels{Prefix: "runslots", Invalid: pglease.ErrInvalidArgument, Lost: ErrSlotLost}

// interpretError maps errors from the generated queries to the package's
// errors, and returns ctx.Err() unchanged when ctx has ended.
func interpretError(ctx context.Context, err error) error { return errs.Interpret(ctx, err) }
