package runslots

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/tenure"
)

// Slot is one tenure of one slot of a scope, identified by its fence. It is
// safe for concurrent use.
type Slot struct {
	t     *tenure.Tenure
	units int
}

// Units returns how many units of the scope's capacity the claim asked
// for (Config.Units or Want.Units). A claim that got the client's own live
// slot back holds the units that tenure was first claimed with.
func (s *Slot) Units() int { return s.units }

// Scope returns the scope the slot belongs to.
func (s *Slot) Scope() string { return s.t.Name() }

// Number returns the slot's number within its scope, from 1 to the capacity
// it was claimed with. Two live holders of a scope never share a number.
func (s *Slot) Number() int { return s.t.Slot() }

// Fence returns this tenure's fence: larger than that of every earlier
// tenure of the same slot (scope and number). Fences of different slots
// are unrelated.
func (s *Slot) Fence() int64 { return s.t.Fence() }

// Deadline returns the local time after which the slot must be assumed
// gone: when the last successful claim or renewal request was sent, plus
// the TTL, minus the safety margin. The server's expiry is at least TTL
// after it received that request, so it is later than Deadline. Deadline
// carries Go's monotonic clock reading: compare it with time.Now or
// time.Until only (wall clock steps do not move it), and do not serialise
// it.
func (s *Slot) Deadline() time.Time { return s.t.Deadline() }

// Holder returns the identity holding this tenure.
func (s *Slot) Holder() string { return s.t.Holder() }

// Done returns a channel that is closed once this tenure can no longer be
// trusted: Deadline passed without a renewal moving it, a renewal was
// refused, or the slot was released. Work the slot admits should stop when
// it closes; Run does that for its fn.
func (s *Slot) Done() <-chan struct{} { return s.t.Done() }

// TTL returns the time to live each claim or renewal grants.
func (s *Slot) TTL() time.Duration { return s.t.TTL() }

// Renew extends the tenure by the slot's TTL from now, and moves Deadline.
// It returns ErrSlotLost when the server refused: the slot expired, was
// released or taken over, and the work it admitted must stop. Any other
// error (a connection failure, a timeout) leaves the outcome unknown: the
// renewal may or may not have happened. Renewing is idempotent, so retry
// while Deadline allows; only ErrSlotLost is a verdict.
func (s *Slot) Renew(ctx context.Context) error { return s.t.Renew(ctx) }

// Release gives the slot back so that others can claim it at once (blocked
// claims of the scope are notified), and closes Done. The slot keeps its
// fence: its next tenure gets a larger one. Release returns ErrSlotLost
// when the tenure had already ended (expired or taken over): anything done
// after Deadline was not admitted by the slot.
//
// Like pglease.Lease.Release, on a pool or a connection outside a
// transaction block the release commits without waiting for its WAL flush.
func (s *Slot) Release(ctx context.Context) error { return s.t.Release(ctx) }

// Run holds the slot while fn runs, renewing it, and releases it once fn
// has returned, as pglease.Lease.Run does for a lease: it cancels fn's
// context the moment the slot can no longer be trusted (its cause then
// matches ErrSlotLost) or ctx ends. SlotFromContext(ctx) gives fn the slot;
// fn must not renew or release it. Run returns:
//   - when the slot was lost while fn ran: a *LostError matching
//     ErrSlotLost (and pglease.ErrLeaseLost), whatever fn returned, even
//     nil; the slot is not released;
//   - otherwise fn's error, unchanged, after releasing the slot (a failed
//     release is logged, not returned).
//
// To wait for a slot and run under it: Claim, then Run. A client holds at
// most one slot per scope, and two Runs of one tenure would share it: give
// each workload that should hold a slot of its own a Client of its own.
func (s *Slot) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	if fn == nil {
		return tenure.Invalidf("fn must not be nil")
	}
	return s.t.Run(ctx, func(ctx context.Context) error {
		return fn(context.WithValue(ctx, slotKey{}, s))
	})
}

// slotKey is the context key of the slot Run runs fn with.
type slotKey struct{}

// SlotFromContext returns the slot that Run runs fn with, from fn's
// context, or nil when ctx is not such a context.
func SlotFromContext(ctx context.Context) *Slot {
	s, _ := ctx.Value(slotKey{}).(*Slot)
	return s
}
