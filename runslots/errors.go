package runslots

import (
	"errors"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/tenure"
)

// Sentinel errors, matched with errors.Is. Invalid arguments, a missing
// schema and a missing grant are reported with pglease.ErrInvalidArgument,
// pglease.ErrNotMigrated and pglease.ErrPermissionDenied, as by the
// pglease package.
var (
	// ErrFull means the scope already has capacity live holders.
	// TryClaim and TryClaimAll return it as a *FullError, which says how
	// many slots are in use and when the earliest frees.
	ErrFull = errors.New("runslots: scope is full")

	// ErrSlotLost means this slot tenure is over: a renewal or release was
	// refused because the slot expired, was released, or was taken over
	// (its fence moved on). Stop the work the slot admitted; claim again
	// for a new tenure. It also matches pglease.ErrLeaseLost, so code that
	// holds leases and slots alike can test for that one. Run reports a
	// loss as a *LostError, which matches it.
	ErrSlotLost = tenure.ErrSlotLost
)

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

// queueRecheck is the longest a blocking claim waits between two claims:
// the server keeps a refused claim's place in the scope's queue only while
// it claims again within min(retry_in, 5 s) + 2 s (pglease._slot_queue).
const queueRecheck = 5 * time.Second

// refusal is the wait of a claim of units units, sent at sent, refused
// with e: until a release that leaves room for them, the earliest expiry,
// or queueRecheck.
func (e *FullError) refusal(sent time.Time, units int) *tenure.Refusal {
	return &tenure.Refusal{Name: e.Scope, Units: units, RetryIn: min(e.RetryIn, queueRecheck), Sent: sent}
}

// LostError is how Run and Slot.Run report a slot lost while the workload
// ran. It matches ErrSlotLost (and so pglease.ErrLeaseLost) with
// errors.Is, and wraps why the workload was cancelled and what it
// returned; use errors.As to read it.
type LostError struct {
	// Scope is the slot's scope.
	Scope string
	// Slot is the slot's number.
	Slot int
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
	return tenure.LostText(fmt.Sprintf("runslots: slot %d of scope %q (fence %d) lost while the workload ran", e.Slot, e.Scope, e.Fence),
		e.Cause, e.WorkErr)
}

// Unwrap returns ErrSlotLost, the cause and the workload's error.
func (e *LostError) Unwrap() []error { return tenure.LostUnwrap(ErrSlotLost, e.Cause, e.WorkErr) }
