package pglease

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
)

// LeaseState is the state of a lease as seen by the server.
type LeaseState string

// Lease states reported by the pglease.lease_status view.
const (
	StateHeld    LeaseState = "held"    // a live tenure
	StateExpired LeaseState = "expired" // the tenure ran out; anyone may acquire
	StateFree    LeaseState = "free"    // released; anyone may acquire
)

// LeaseStatus describes one lease, as computed by the server when read.
type LeaseStatus struct {
	Name   string
	Holder string // empty when free
	Fence  int64  // the current or last tenure's fence
	State  LeaseState
	// ExpiresAt is when the tenure ends or ended, by the server's clock (for
	// a free lease: when it was released). For display; compare nothing
	// with the local clock, use ExpiresIn.
	ExpiresAt time.Time
	// ExpiresIn is the time left, zero once expired or free.
	ExpiresIn time.Duration
}

// Leases lists every lease database has ever granted, by name. It needs
// no holder: it is the operator's view (`pglease status`).
func Leases(ctx context.Context, database DB) ([]LeaseStatus, error) {
	rows, err := db.New(database).LeaseStatusList(ctx)
	return tenure.List(ctx, "pglease", rows, err, func(r db.LeaseStatusListRow) LeaseStatus {
		return LeaseStatus{
			Name: r.Name, Holder: r.Holder.String, Fence: r.Fence,
			State: LeaseState(r.State), ExpiresAt: r.ExpiresAt, ExpiresIn: r.ExpiresIn,
		}
	})
}

// ForcedRelease reports what ForceRelease ended.
type ForcedRelease struct {
	// Released is false when the lease was already free or unknown.
	Released bool
	// Holder and Fence identify the tenure that was ended.
	Holder string
	Fence  int64
}

// ForceRelease ends the current tenure of lease name on database, whoever
// holds it: an operator's override for a holder that is gone but whose TTL
// is long (`pglease release --force`). The next tenure gets a larger fence,
// so the old holder's fenced writes are refused; its unfenced work is not
// stopped. Needs the schema owner's privileges (pglease_client is not
// granted it); it needs no holder.
func ForceRelease(ctx context.Context, database DB, name string) (ForcedRelease, error) {
	if err := tenure.CheckText("name", name); err != nil {
		return ForcedRelease{}, err
	}
	r, err := db.New(database).LeaseForceRelease(ctx, name)
	if err != nil {
		return ForcedRelease{}, interpretError(ctx, err)
	}
	return ForcedRelease{Released: r.Released, Holder: r.Holder.String, Fence: r.Fence.Int64}, nil
}
