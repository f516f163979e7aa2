package runslots

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/notify"
)

// TryClaim takes one of capacity slots of scope for ttl, or returns at
// once. It returns a *FullError (errors.Is ErrFull) when the scope already
// has capacity or more live holders. When this client already holds a slot
// of scope, it gets the same tenure (same slot and fence) back with its
// expiry re-pinned to ttl from now, whatever the capacity: retrying after a
// lost reply never takes a second slot.
//
// Capacity is this claim's own setting, checked by the server against the
// live holders at the moment of the claim; claims of one scope may pass
// different capacities (see the package documentation).
func (c *Client) TryClaim(ctx context.Context, scope string, capacity int, ttl time.Duration) (*Slot, error) {
	if err := c.checkClaim(scope, capacity, ttl); err != nil {
		return nil, err
	}
	return c.tryClaim(ctx, scope, capacity, ttl)
}

func (c *Client) tryClaim(ctx context.Context, scope string, capacity int, ttl time.Duration) (*Slot, error) {
	sent := time.Now()
	row, err := c.q.SlotClaim(ctx, db.SlotClaimParams{
		Scope: scope, Holder: c.holder, Capacity: int32(capacity), Ttl: ttl,
	})
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	if !row.Claimed {
		return nil, &FullError{Scope: scope, Capacity: capacity, InUse: int(row.InUse), RetryIn: orZero(row.RetryIn)}
	}
	return c.newSlot(scope, row.Slot.Int32, row.Fence.Int64, ttl, sent), nil
}

// Claim takes one of capacity slots of scope for ttl, waiting while the
// scope is full. It wakes as soon as a holder of the scope releases (a
// NOTIFY, when the client was built on a *pgxpool.Pool) and otherwise when
// the earliest live slot would expire, then tries again. It returns
// ctx.Err() unchanged when ctx ends first. Errors other than the scope
// being full (connection failures, bad arguments) are returned at once.
// Like TryClaim, it returns the client's own live slot of scope if it has
// one.
func (c *Client) Claim(ctx context.Context, scope string, capacity int, ttl time.Duration) (*Slot, error) {
	if err := c.checkClaim(scope, capacity, ttl); err != nil {
		return nil, err
	}
	// Try before listening: a free slot needs no LISTEN connection. Once
	// refused, listen, then try again before waiting, so that a release
	// between the first try and the LISTEN is not missed.
	s, err := c.tryClaim(ctx, scope, capacity, ttl)
	if _, ok := errors.AsType[*FullError](err); !ok {
		return s, err
	}
	w := notify.Listen(ctx, c.pool, "slot", scope)
	defer w.Close(ctx)
	for {
		s, err := c.tryClaim(ctx, scope, capacity, ttl)
		full, ok := errors.AsType[*FullError](err)
		if !ok {
			return s, err
		}
		if err := c.wait(ctx, w, full); err != nil {
			return nil, err
		}
	}
}

// Want is one scope to claim a slot of with TryClaimAll or ClaimAll.
type Want struct {
	// Scope is the scope to claim a slot of, 1 to pglease.MaxNameLen bytes.
	Scope string
	// Capacity is the most live holders the claim admits in Scope, from 1
	// to MaxCapacity.
	Capacity int
}

// TryClaimAll takes one slot of each wanted scope for ttl, all or nothing,
// in one round trip, or returns at once. On success the slots are in the
// order of wants. When some scope is full it returns a *FullError (errors.Is
// ErrFull) naming the first full scope in the order given, and nothing is
// held or changed in any scope. Scopes are locked in one global order, so
// concurrent TryClaimAll calls over overlapping scopes cannot deadlock.
// Scopes this client already holds are returned as by TryClaim (same
// tenure), so releasing one of the returned slots also ends that tenure.
func (c *Client) TryClaimAll(ctx context.Context, wants []Want, ttl time.Duration) ([]*Slot, error) {
	if err := c.checkWants(wants, ttl); err != nil {
		return nil, err
	}
	return c.tryClaimAll(ctx, wants, ttl)
}

func (c *Client) tryClaimAll(ctx context.Context, wants []Want, ttl time.Duration) ([]*Slot, error) {
	p := db.SlotClaimManyParams{
		Holder:     c.holder,
		Scopes:     make([]string, len(wants)),
		Capacities: make([]int32, len(wants)),
		Ttl:        ttl,
	}
	for i, w := range wants {
		p.Scopes[i], p.Capacities[i] = w.Scope, int32(w.Capacity)
	}
	sent := time.Now()
	row, err := c.q.SlotClaimMany(ctx, p)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	if !row.Claimed {
		full := &FullError{Scope: row.RefusedScope.String, InUse: int(row.RefusedInUse.Int32), RetryIn: orZero(row.RetryIn)}
		for _, w := range wants {
			if w.Scope == full.Scope {
				full.Capacity = w.Capacity
			}
		}
		return nil, full
	}
	if len(row.Slots) != len(wants) || len(row.Fences) != len(wants) {
		return nil, errors.New("runslots: pglease.claim_slots returned fewer slots than scopes; the schema does not match this client")
	}
	slots := make([]*Slot, len(wants))
	for i, w := range wants {
		slots[i] = c.newSlot(w.Scope, row.Slots[i], row.Fences[i], ttl, sent)
	}
	return slots, nil
}

// ClaimAll takes one slot of each wanted scope for ttl, all or nothing,
// waiting while some scope is full. It waits on the scope that refused
// (woken by its release NOTIFY, or when its earliest live slot would
// expire) and then tries all of them again; in between it holds nothing.
// It returns ctx.Err() unchanged when ctx ends first; other errors at once.
// A claim of all scopes can starve while claims of single scopes keep
// taking the slots it waits for: it is not queued.
func (c *Client) ClaimAll(ctx context.Context, wants []Want, ttl time.Duration) ([]*Slot, error) {
	if err := c.checkWants(wants, ttl); err != nil {
		return nil, err
	}
	var (
		w         *notify.Waiter
		listening string // the scope w waits on
		retried   bool
	)
	defer func() {
		if w != nil {
			w.Close(ctx)
		}
	}()
	for {
		slots, err := c.tryClaimAll(ctx, wants, ttl)
		full, ok := errors.AsType[*FullError](err)
		if !ok {
			return slots, err
		}
		if w == nil || listening != full.Scope {
			// Listen to the scope that refused. A release between the
			// refusal and the subscription would go unheard, so try again
			// at once, unless that was just done: then wait, at worst until
			// the earliest expiry.
			if w != nil {
				w.Close(ctx)
			}
			w, listening = notify.Listen(ctx, c.pool, "slot", full.Scope), full.Scope
			if !retried {
				retried = true
				continue
			}
		}
		retried = false
		if err := c.wait(ctx, w, full); err != nil {
			return nil, err
		}
	}
}

// checkWants validates the arguments of a multi-scope claim as the SQL
// does.
func (c *Client) checkWants(wants []Want, ttl time.Duration) error {
	if n := len(wants); n < 1 || n > MaxWants {
		return invalidf("wants must name 1 to %d scopes, got %d", MaxWants, n)
	}
	seen := make(map[string]bool, len(wants))
	for i, w := range wants {
		if err := checkText(fmt.Sprintf("wants[%d].Scope", i), w.Scope); err != nil {
			return err
		}
		if err := checkCapacity(fmt.Sprintf("wants[%d].Capacity", i), w.Capacity); err != nil {
			return err
		}
		if seen[w.Scope] {
			return invalidf("wants[%d]: scope %q is named twice", i, w.Scope)
		}
		seen[w.Scope] = true
	}
	return c.checkTTL(ttl)
}

// wait waits on w after the refusal full, for a release or its RetryIn.
func (c *Client) wait(ctx context.Context, w *notify.Waiter, full *FullError) error {
	if c.waiting != nil {
		c.waiting(full.Scope)
	}
	return w.Wait(ctx, full.RetryIn)
}

// orZero returns *d, or zero when d is nil.
func orZero(d *time.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return *d
}
