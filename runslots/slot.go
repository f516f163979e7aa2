package runslots

import (
	"context"
	"sync"
	"time"

	"github.com/pglease/pglease/internal/asyncrelease"
	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/keep"
)

// Slot is one tenure of one slot of a scope, identified by its fence. It is
// safe for concurrent use.
type Slot struct {
	c      *Client
	scope  string
	number int
	fence  int64
	ttl    time.Duration
	margin time.Duration

	mu       sync.Mutex
	deadline time.Time // monotonic; see Deadline
}

var _ keep.Tenure = (*Slot)(nil)

// newSlot returns the tenure granted by a claim request sent at sent.
func (c *Client) newSlot(scope string, number int32, fence int64, ttl time.Duration, sent time.Time) *Slot {
	s := &Slot{c: c, scope: scope, number: int(number), fence: fence, ttl: ttl, margin: c.marginFor(ttl)}
	s.deadline = sent.Add(ttl - s.margin)
	return s
}

// Scope returns the scope the slot belongs to.
func (s *Slot) Scope() string { return s.scope }

// Number returns the slot's number within its scope, from 1 to the capacity
// it was claimed with. Two live holders of a scope never share a number.
func (s *Slot) Number() int { return s.number }

// Fence returns this tenure's fence: larger than that of every earlier
// tenure of the same slot (scope and number). Fences of different slots
// are unrelated.
func (s *Slot) Fence() int64 { return s.fence }

// Holder returns the identity holding this tenure.
func (s *Slot) Holder() string { return s.c.holder }

// TTL returns the time to live each claim or renewal grants.
func (s *Slot) TTL() time.Duration { return s.ttl }

// Deadline returns the local time after which the slot must be assumed
// gone: when the last successful claim or renewal request was sent, plus
// the TTL, minus the safety margin. The server's expiry is at least TTL
// after it received that request, so it is later than Deadline. Deadline
// carries Go's monotonic clock reading: compare it with time.Now or
// time.Until only (wall clock steps do not move it), and do not serialise
// it.
func (s *Slot) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Renew extends the tenure by the slot's TTL from now, and moves Deadline.
// It returns ErrSlotLost when the server refused: the slot expired, was
// released or taken over, and the work it admitted must stop. Any other
// error (a connection failure, a timeout) leaves the outcome unknown: the
// renewal may or may not have happened. Renewing is idempotent, so retry
// while Deadline allows; only ErrSlotLost is a verdict.
func (s *Slot) Renew(ctx context.Context) error {
	sent := time.Now()
	row, err := s.c.q.SlotRenew(ctx, db.SlotRenewParams{
		Scope: s.scope, Slot: int32(s.number), Holder: s.c.holder, Fence: s.fence, Ttl: s.ttl,
	})
	if err != nil {
		return interpretError(ctx, err)
	}
	if !row.Renewed {
		return ErrSlotLost
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if d := sent.Add(s.ttl - s.margin); d.After(s.deadline) {
		s.deadline = d
	}
	return nil
}

// Release gives the slot back so that others can claim it at once (blocked
// claims of the scope are notified). The slot keeps its fence: its next
// tenure gets a larger one. Release returns ErrSlotLost when the tenure had
// already ended (expired or taken over): anything done after Deadline was
// not admitted by the slot.
//
// Like pglease.Lease.Release, on a pool or a connection outside a
// transaction block the release commits without waiting for its WAL flush.
func (s *Slot) Release(ctx context.Context) error {
	var (
		released bool
		err      error
	)
	if asyncrelease.OK(s.c.db) {
		released, err = s.c.q.SlotReleaseAsync(ctx, db.SlotReleaseAsyncParams{
			Scope: s.scope, Slot: int32(s.number), Holder: s.c.holder, Fence: s.fence,
		})
	} else {
		released, err = s.c.q.SlotRelease(ctx, db.SlotReleaseParams{
			Scope: s.scope, Slot: int32(s.number), Holder: s.c.holder, Fence: s.fence,
		})
	}
	if err != nil {
		return interpretError(ctx, err)
	}
	if !released {
		return ErrSlotLost
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deadline = time.Now()
	return nil
}
