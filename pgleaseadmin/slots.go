package pgleaseadmin

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
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
	State State
	// ExpiresAt is when the tenure ends or ended, by the server's clock
	// (for a free slot: when it was released). For display; compare nothing
	// with the local clock, use ExpiresIn.
	ExpiresAt time.Time
	// ExpiresIn is the time left, zero once expired or free.
	ExpiresIn time.Duration
}

// ScopeStatus describes the occupancy of one slot scope, as computed by the
// server when read.
type ScopeStatus struct {
	// Scope is the scope's name.
	Scope string
	// InUse is the number of live holders.
	InUse int
	// Slots is the number of slot rows of the scope: the largest number of
	// holders it has admitted at once since it was created (or last
	// purged), give or take lowered capacities.
	Slots int
}

// Slots lists every slot of database, by scope and number: those held, and
// those expired or released but not purged yet (see Purge). It needs no
// holder (`pglease status`).
func Slots(ctx context.Context, database pglease.DB) ([]SlotStatus, error) {
	rows, err := db.New(database).SlotStatusList(ctx)
	return tenure.List(ctx, prefix, rows, err, func(r db.SlotStatusListRow) SlotStatus {
		return SlotStatus{
			Scope: r.Scope, Slot: int(r.Slot), Holder: r.Holder.String, Fence: r.Fence,
			State: State(r.State), ExpiresAt: r.ExpiresAt, ExpiresIn: r.ExpiresIn,
		}
	})
}

// Scopes lists every slot scope of database that has slot rows, by name,
// with its number of live holders. It needs no holder.
func Scopes(ctx context.Context, database pglease.DB) ([]ScopeStatus, error) {
	rows, err := db.New(database).SlotScopeStatusList(ctx)
	return tenure.List(ctx, prefix, rows, err, func(r db.SlotScopeStatusListRow) ScopeStatus {
		return ScopeStatus{Scope: r.Scope, InUse: int(r.InUse), Slots: int(r.Slots)}
	})
}
