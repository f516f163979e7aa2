package runslots

import (
	"time"

	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// Limits enforced by the SQL functions, checked here before a round trip.
// Scopes are limited to pglease.MaxNameLen bytes and TTLs to pglease.MaxTTL,
// as for leases.
const (
	// MaxCapacity is the largest capacity a scope can be claimed with.
	MaxCapacity = tenure.MaxCapacity
	// MaxWants is the most scopes one TryClaimAll or ClaimAll can claim.
	MaxWants = 64
)

// Config configures a Client: the same settings as a lease client's (see
// pglease.Config). Claims are re-entrant per holder and scope: a holder has
// at most one slot of a scope, and claiming again returns it, so Holder
// must be unique per client.
type Config = pglease.Config

// Client claims slots in the pglease schema of one database as one holder.
// It is safe for concurrent use.
//
// A client holds at most one slot per scope: claiming a scope it already
// holds returns the same tenure (same slot, same fence), and releasing
// either copy ends both. To occupy several slots of one scope from one
// process, use one Client per concurrent claim; they are cheap. Run takes
// care of this for its own callers: concurrent Runs of one scope on one
// Client take turns.
//
// With Config.Keeper (a pglease.Keeper), the client's slots are renewed
// with every other lease and slot of the keeper's holder in one round trip
// per interval. Every client of a keeper has the keeper's holder, so a
// process holds at most one slot per scope through one keeper; use a
// keeper per holder to occupy more.
type Client struct {
	c     *tenure.Core
	turns turns
}

// slots is the slot kind of tenure.
var slots = tenure.Kind{
	Noun: "slot", Prefix: "runslots", Lost: ErrSlotLost,
	LostError: func(t *tenure.Tenure, cause, workErr error) error {
		return &pglease.LostError{Name: t.Name(), Slot: t.Slot(), Fence: t.Fence(), Cause: cause, WorkErr: workErr}
	},
}

// New returns a Client that runs its queries on database. It does not take
// ownership: closing database stays the caller's job. Claim, ClaimAll and
// Run wake up on release notifications when database is a *pgxpool.Pool or
// a pglease.Listener (the client's waiters share one LISTEN connection; see
// pglease.DB); otherwise they wait until the earliest expiry the server
// reported. It returns an error matching pglease.ErrInvalidArgument, naming
// the field, when cfg is invalid.
func New(database pglease.DB, cfg Config) (*Client, error) {
	c, err := tenure.NewClientCore(database, slots, cfg)
	if err != nil {
		return nil, err
	}
	return &Client{c: c}, nil
}

// CloseIdle closes the connection the client LISTENs on for release
// notifications, if no blocking call waits on it, instead of
// DefaultNotifyLinger after the last one left: for a client that is done
// waiting (a short-lived one, say). The client stays usable; a later
// blocking call opens a new connection. The connection of a Keeper, which
// its clients share, stays open.
func (c *Client) CloseIdle() { c.c.CloseIdle() }

// Holder returns the identity this client claims slots as.
func (c *Client) Holder() string { return c.c.Holder() }

// checkClaim validates the arguments of a claim as the SQL does.
func (c *Client) checkClaim(scope string, capacity int, ttl time.Duration) error {
	if err := tenure.CheckText("scope", scope); err != nil {
		return err
	}
	if err := tenure.CheckCapacity("capacity", capacity); err != nil {
		return err
	}
	return c.c.CheckTTL(ttl)
}
