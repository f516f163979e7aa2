package runslots

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// TryClaim takes a slot of w.Scope with w.Units units of w.Capacity for
// ttl, or returns at once. It returns a *FullError (errors.Is ErrFull) when
// the scope has no room for the units. When this client already holds a
// slot of the scope, it gets the same tenure (same slot, fence and units)
// back with its expiry re-pinned to ttl from now, whatever the capacity:
// retrying after a lost reply never takes a second slot.
//
// Capacity is this claim's own setting, checked by the server against the
// live holders at the moment of the claim; claims of one scope may pass
// different capacities (see the package documentation).
func (c *Client) TryClaim(ctx context.Context, w Want, ttl time.Duration) (*Slot, error) {
	if err := c.checkWants("Want", []Want{w}, ttl); err != nil {
		return nil, err
	}
	s, _, err := c.tryClaim(ctx, w, ttl, false)
	return s, err
}

// tryClaim makes one claim: a slot, or the refusal as a *FullError and its
// wait, or another error. wait says the caller claims again when refused:
// the server then queues the claim (see the package documentation).
func (c *Client) tryClaim(ctx context.Context, w Want, ttl time.Duration, wait bool) (*Slot, *tenure.Refusal, error) {
	if err := c.c.ConfirmReleases(ctx, w.Scope); err != nil {
		return nil, nil, err
	}
	sent := time.Now()
	units := w.units()
	row, err := c.claim(ctx, db.SlotClaimUnitsParams{
		Scope: w.Scope, Holder: c.c.Holder(), Capacity: int32(w.Capacity), Ttl: ttl, Units: int32(units), Wait: wait,
	})
	if err != nil {
		return nil, nil, c.c.Interpret(ctx, err)
	}
	if !row.Claimed {
		full := &FullError{Scope: w.Scope, Capacity: w.Capacity, InUse: int(row.InUse), RetryIn: orZero(row.RetryIn)}
		c.c.Refused(ctx, w.Scope)
		return nil, full.refusal(sent, units), full
	}
	return &Slot{t: c.c.Grant(w.Scope, int(row.Slot.Int32), row.Fence.Int64, ttl, sent), units: units}, nil, nil
}

// Claim takes a slot of w.Scope with w.Units units of w.Capacity for ttl,
// waiting while the scope has no room for them. It wakes as soon as a
// holder of the scope releases (a NOTIFY, when the client was built on a
// *pgxpool.Pool) and otherwise when the earliest live slot would expire,
// then tries again; while it waits it is queued on the server (see the
// package documentation). It returns ctx.Err() unchanged when ctx ends
// first. A serialization failure or deadlock the server broke (SQLSTATE
// 40001, 40P01: nothing changed) is tried again after a backoff from 5ms
// doubling to 500ms, except in a pgx.Tx; other errors (connection
// failures, bad arguments) are returned at once. Like TryClaim, it returns
// the client's own live slot of the scope if it has one.
func (c *Client) Claim(ctx context.Context, w Want, ttl time.Duration) (*Slot, error) {
	if err := c.checkWants("Want", []Want{w}, ttl); err != nil {
		return nil, err
	}
	return tenure.Await(ctx, c.c, func(ctx context.Context) (*Slot, *tenure.Refusal, error) {
		return c.tryClaim(ctx, w, ttl, true)
	})
}

// Want is a claim of one scope: what TryClaim and Claim take, and
// TryClaimAll and ClaimAll take one of per scope.
type Want struct {
	// Scope is the scope to claim a slot of, 1 to pglease.MaxNameLen bytes.
	Scope string
	// Capacity is the most units in use the claim admits in Scope, from 1
	// to MaxCapacity.
	Capacity int
	// Units is how many units of Capacity the claim takes, all or nothing,
	// as one slot with one fence: a job that needs 4 of a pool's 8 GPUs
	// claims Capacity 8 and Units 4. Defaults to 1; must be from 1 to
	// Capacity.
	Units int
}

// units returns w.Units, or its default.
func (w Want) units() int { return cmp.Or(w.Units, 1) }

// TryClaimAll takes one slot of each wanted scope for ttl, all or nothing,
// in one round trip, or returns at once. On success the slots are in the
// order of wants. When some scope is full it returns a *FullError (errors.Is
// ErrFull) naming the first full scope in the order given, and nothing is
// held or changed in any scope. Scopes are locked in one global order, so
// concurrent TryClaimAll calls over overlapping scopes cannot deadlock.
// Scopes this client already holds are returned as by TryClaim (same
// tenure), so releasing one of the returned slots also ends that tenure.
func (c *Client) TryClaimAll(ctx context.Context, wants []Want, ttl time.Duration) ([]*Slot, error) {
	if err := c.checkWants("wants", wants, ttl); err != nil {
		return nil, err
	}
	slots, _, err := c.tryClaimAll(ctx, wants, ttl, false)
	return slots, err
}

func (c *Client) tryClaimAll(ctx context.Context, wants []Want, ttl time.Duration, wait bool) ([]*Slot, *tenure.Refusal, error) {
	p := db.SlotClaimManyUnitsParams{
		Holder:     c.c.Holder(),
		Scopes:     make([]string, len(wants)),
		Capacities: make([]int32, len(wants)),
		Units:      make([]int32, len(wants)),
		Ttl:        ttl,
		Wait:       wait,
	}
	for i, w := range wants {
		if err := c.c.ConfirmReleases(ctx, w.Scope); err != nil {
			return nil, nil, err
		}
		p.Scopes[i], p.Capacities[i], p.Units[i] = w.Scope, int32(w.Capacity), int32(w.units())
	}
	sent := time.Now()
	row, err := c.claimMany(ctx, p)
	if err != nil {
		return nil, nil, c.c.Interpret(ctx, err)
	}
	if !row.Claimed {
		full := &FullError{Scope: row.RefusedScope.String, InUse: int(row.RefusedInUse.Int32), RetryIn: orZero(row.RetryIn)}
		c.c.Refused(ctx, full.Scope)
		units := 1
		for i, w := range wants {
			if w.Scope == full.Scope {
				full.Capacity, units = w.Capacity, int(p.Units[i])
			}
		}
		return nil, full.refusal(sent, units), full
	}
	if len(row.Slots) != len(wants) || len(row.Fences) != len(wants) {
		return nil, nil, errors.New("runslots: pglease.claim_slots returned fewer slots than scopes; the schema does not match this client")
	}
	slots := make([]*Slot, len(wants))
	for i, w := range wants {
		slots[i] = &Slot{t: c.c.Grant(w.Scope, int(row.Slots[i]), row.Fences[i], ttl, sent), units: int(p.Units[i])}
	}
	return slots, nil, nil
}

// ClaimAll takes one slot of each wanted scope for ttl, all or nothing,
// waiting while some scope is full. It waits on the scope that refused
// (woken by its release NOTIFY, or when its earliest live slot would
// expire) and then tries all of them again; in between it holds nothing.
// It returns ctx.Err() unchanged when ctx ends first; 40001 and 40P01 are
// tried again as by Claim, other errors returned at once. While it waits
// it is queued in the scope that refused it, as Claim is.
func (c *Client) ClaimAll(ctx context.Context, wants []Want, ttl time.Duration) ([]*Slot, error) {
	if err := c.checkWants("wants", wants, ttl); err != nil {
		return nil, err
	}
	return tenure.Await(ctx, c.c, func(ctx context.Context) ([]*Slot, *tenure.Refusal, error) {
		return c.tryClaimAll(ctx, wants, ttl, true)
	})
}

// checkWants validates the claims of wants (called arg) as the SQL does.
func (c *Client) checkWants(arg string, wants []Want, ttl time.Duration) error {
	if n := len(wants); n < 1 || n > MaxWants {
		return tenure.Invalidf("%s must name 1 to %d scopes, got %d", arg, MaxWants, n)
	}
	seen := make(map[string]bool, len(wants))
	for i, w := range wants {
		name := arg
		if arg == "wants" {
			name = fmt.Sprintf("wants[%d]", i)
		}
		if err := tenure.CheckClaim(name, w.Scope, w.Capacity, w.Units); err != nil {
			return err
		}
		if seen[w.Scope] {
			return tenure.Invalidf("%s: scope %q is named twice", name, w.Scope)
		}
		seen[w.Scope] = true
	}
	return c.c.CheckTTL(ttl)
}

// orZero returns *d, or zero when d is nil.
func orZero(d *time.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return *d
}

// claim calls the claim with units of schema 0.3.0, or, on an earlier
// schema, the four-argument one: one unit, never queued (a claim of more
// units then fails with ErrNotMigrated).
func (c *Client) claim(ctx context.Context, p db.SlotClaimUnitsParams) (db.SlotClaimUnitsRow, error) {
	if c.c.Modern() {
		row, err := c.c.Queries().SlotClaimUnits(ctx, p)
		if err == nil || !c.c.Missing(err) {
			return row, err
		}
	}
	if p.Units != 1 {
		return db.SlotClaimUnitsRow{}, fmt.Errorf("%w: claiming %d units (Want.Units) needs schema 0.3.0", pglease.ErrNotMigrated, p.Units)
	}
	r, err := c.c.Queries().SlotClaim(ctx, db.SlotClaimParams{Scope: p.Scope, Holder: p.Holder, Capacity: p.Capacity, Ttl: p.Ttl})
	return db.SlotClaimUnitsRow(r), err
}

// claimMany is claim for claim_slots.
func (c *Client) claimMany(ctx context.Context, p db.SlotClaimManyUnitsParams) (db.SlotClaimManyUnitsRow, error) {
	if c.c.Modern() {
		row, err := c.c.Queries().SlotClaimManyUnits(ctx, p)
		if err == nil || !c.c.Missing(err) {
			return row, err
		}
	}
	for i, u := range p.Units {
		if u != 1 {
			return db.SlotClaimManyUnitsRow{}, fmt.Errorf("%w: claiming %d units (wants[%d].Units) needs schema 0.3.0", pglease.ErrNotMigrated, u, i)
		}
	}
	r, err := c.c.Queries().SlotClaimMany(ctx, db.SlotClaimManyParams{Holder: p.Holder, Scopes: p.Scopes, Capacities: p.Capacities, Ttl: p.Ttl})
	return db.SlotClaimManyUnitsRow(r), err
}
