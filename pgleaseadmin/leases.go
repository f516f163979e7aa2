package pgleaseadmin

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// State is the state of a lease or of a slot as seen by the server, as
// the views pglease.lease_status and pglease.slot_status report it.
type State string

// The states of a lease or slot.
const (
	Held    State = "held"    // a live tenure
	Expired State = "expired" // the tenure ran out; anyone may acquire or claim it
	Free    State = "free"    // released; anyone may acquire or claim it
)

// LeaseStatus describes one lease, as computed by the server when read.
type LeaseStatus struct {
	// Name is the lease name.
	Name string
	// Holder is the current or last holder; empty when free.
	Holder string
	// Fence is the current or last tenure's fence.
	Fence int64
	// State is held, expired or free.
	State State
	// ExpiresAt is when the tenure ends or ended, by the server's clock (for
	// a free lease: when it was released). For display; compare nothing
	// with the local clock, use ExpiresIn.
	ExpiresAt time.Time
	// ExpiresIn is the time left, zero once expired or free.
	ExpiresIn time.Duration
	// Value is the value the live tenure's holder published
	// (pglease.WithValue); empty when none, or when not held.
	Value string
	// ReleaseRequested is true when a release of the live tenure was
	// requested (RequestRelease) and it has not ended yet.
	ReleaseRequested bool
	// PreferredHolder is the holder the last release request preferred
	// (empty: none); once that tenure is over, the next grant is reserved
	// for it for a while (docs/leadership.md).
	PreferredHolder string
	// Owner is the role that owns the lease name (see OwnerOf): only its
	// members take the lease. Empty for a shared name.
	Owner string
}

// Leases lists every lease of database, by name: those held, and those
// expired or released but not purged yet (see Purge). It needs no holder
// (`pglease status`).
func Leases(ctx context.Context, database pglease.DB) ([]LeaseStatus, error) {
	rows, err := db.New(database).LeaseStatusList(ctx)
	return tenure.List(ctx, prefix, rows, err, func(r db.LeaseStatusListRow) LeaseStatus {
		return LeaseStatus{
			Name: r.Name, Holder: r.Holder.String, Fence: r.Fence,
			State: State(r.State), ExpiresAt: r.ExpiresAt, ExpiresIn: r.ExpiresIn,
			Value: r.Value, ReleaseRequested: r.ReleaseRequested, PreferredHolder: r.PreferredHolder,
			Owner: r.OwnerRole,
		}
	})
}

// Tenure is one tenure of a lease, named by its holder and fence: the one
// ForceRelease ended, or the one RequestRelease asked to hand over.
type Tenure struct {
	// Holder is the tenure's holder.
	Holder string
	// Fence is the tenure's fence.
	Fence int64
}

// ForceRelease ends the current tenure of lease name on database, whoever
// holds it: an operator's override for a holder that is gone but whose TTL
// is long (`pglease release --force`). The next tenure gets a larger fence,
// so the old holder's fenced writes are refused; its unfenced work is not
// stopped. The old holder learns of it at its next renewal, which is
// refused (pglease.ErrLeaseLost). It needs the schema owner's privileges
// (pglease_client is not granted it), and no holder.
//
// It returns the tenure it ended, and released true. released is false
// when the lease was already free (ended then has no holder, and the last
// tenure's fence) or unknown (ended is zero).
func ForceRelease(ctx context.Context, database pglease.DB, name string) (ended Tenure, released bool, err error) {
	if err := tenure.CheckText("name", name); err != nil {
		return Tenure{}, false, err
	}
	r, err := db.New(database).LeaseForceRelease(ctx, name)
	if err != nil {
		return Tenure{}, false, interpret(ctx, err)
	}
	return Tenure{Holder: r.Holder.String, Fence: r.Fence.Int64}, r.Released, nil
}

// prefix starts the package's error messages.
const prefix = "pglease"

// interpret maps errors from the generated queries to pglease's sentinels,
// and returns ctx.Err() unchanged when ctx has ended.
func interpret(ctx context.Context, err error) error {
	return tenure.Interpret(ctx, prefix, pglease.ErrLeaseLost, err)
}
