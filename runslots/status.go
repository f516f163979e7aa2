package runslots

import (
	"context"
	"time"
)

// SlotState is the state of a slot as seen by the server.
type SlotState string

// Slot states reported by the pglease.slot_status view.
const (
	StateHeld    SlotState = "held"    // a live tenure
	StateExpired SlotState = "expired" // the tenure ran out; the slot is free to claim
	StateFree    SlotState = "free"    // released; free to claim
)

// SlotStatus describes one slot, as computed by the server when read.
type SlotStatus struct {
	// Scope is the scope the slot belongs to.
	Scope string
	// Slot is the slot's number within its scope.
	Slot int
	// Holder is the current or last holder; empty when free.
	Holder string
	// Fence is the current or last tenure's fence.
	Fence int64
	// State is held, expired or free.
	State SlotState
	// ExpiresAt is when the tenure ends or ended, by the server's clock
	// (for a free slot: when it was released). For display; compare nothing
	// with the local clock, use ExpiresIn.
	ExpiresAt time.Time
	// ExpiresIn is the time left, zero once expired or free.
	ExpiresIn time.Duration
}

// ScopeStatus describes the occupancy of one scope, as computed by the
// server when read.
type ScopeStatus struct {
	// Scope is the scope's name.
	Scope string
	// InUse is the number of live holders.
	InUse int
	// Slots is the number of slot rows ever created in the scope: the
	// largest number of holders it has admitted at once, give or take
	// lowered capacities.
	Slots int
}

// Slots lists every slot ever created, by scope and number.
func (c *Client) Slots(ctx context.Context) ([]SlotStatus, error) {
	rows, err := c.q.SlotStatusList(ctx)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	out := make([]SlotStatus, len(rows))
	for i, r := range rows {
		out[i] = SlotStatus{
			Scope: r.Scope, Slot: int(r.Slot), Holder: r.Holder.String, Fence: r.Fence,
			State: SlotState(r.State), ExpiresAt: r.ExpiresAt, ExpiresIn: r.ExpiresIn,
		}
	}
	return out, nil
}

// Scopes lists every scope that has slot rows, by name, with its number of
// live holders.
func (c *Client) Scopes(ctx context.Context) ([]ScopeStatus, error) {
	rows, err := c.q.SlotScopeStatusList(ctx)
	if err != nil {
		return nil, interpretError(ctx, err)
	}
	out := make([]ScopeStatus, len(rows))
	for i, r := range rows {
		out[i] = ScopeStatus{Scope: r.Scope, InUse: int(r.InUse), Slots: int(r.Slots)}
	}
	return out, nil
}
