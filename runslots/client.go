package runslots

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/check"
	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/purge"
	"github.com/pglease/pglease/pglease"
)

// Limits enforced by the SQL functions, checked here before a round trip.
// Scopes are limited to pglease.MaxNameLen bytes and TTLs to pglease.MaxTTL,
// as for leases.
const (
	// MaxCapacity is the largest capacity a scope can be claimed with.
	MaxCapacity = 1_000_000
	// MaxWants is the most scopes one TryClaimAll or ClaimAll can claim.
	MaxWants = 64
)

// Config configures a Client. The zero value is usable: zero fields mean
// their defaults.
type Config struct {
	// Holder identifies this client in the slot table. Claims are
	// re-entrant per holder and scope: a holder has at most one slot of a
	// scope, and claiming again returns it. Two clients with the same
	// holder therefore share their slots, so it must be unique per client.
	// Defaults to pglease.NewHolderID().
	Holder string

	// SafetyMargin is subtracted from a slot's TTL to compute its local
	// deadline (see Slot.Deadline). It covers clock-rate differences between
	// this machine and the server and the time between a check of the
	// deadline and the work it guards. Defaults to a tenth of each slot's
	// TTL. Must be smaller than every TTL used with this client.
	SafetyMargin time.Duration

	// Logger receives Run's renewal failures, stuck workloads and failed
	// releases. Defaults to slog.Default().
	Logger *slog.Logger

	// PurgeEvery is how often Run, while fn runs, calls pglease.purge_due
	// to delete what has been free for a day (see pglease.Purge); the
	// server lets one call per interval through across every caller of the
	// database. Defaults to an hour; negative disables it. It runs only
	// when the database is a *pgxpool.Pool.
	PurgeEvery time.Duration
}

// Client claims slots in the pglease schema of one database as one holder.
// It is safe for concurrent use.
//
// A client holds at most one slot per scope: claiming a scope it already
// holds returns the same tenure (same slot, same fence), and releasing
// either copy ends both. To occupy several slots of one scope from one
// process, use one Client per concurrent claim; they are cheap. Run takes
// care of this for its own callers: concurrent Runs of one scope on one
// Client take turns.
type Client struct {
	db     pglease.DB
	q      *db.Queries
	pool   *pgxpool.Pool // non-nil when db is a pool: used to LISTEN
	holder string
	margin time.Duration
	logger *slog.Logger
	turns  turns
	purge  time.Duration // PurgeEvery, with its default

	// waiting, when set by a test, is called each time a blocking claim
	// has been refused and is about to wait.
	waiting func(scope string)
}

// New returns a Client that runs its queries on database. It does not take
// ownership: closing database stays the caller's job. Only a *pgxpool.Pool
// lets Claim, ClaimAll and Run wake up on release notifications (they share
// one LISTEN connection per pool, opened with the pool's settings); with a
// *pgx.Conn or a pgx.Tx they wait until the earliest expiry the server
// reported.
func New(database pglease.DB, cfg Config) (*Client, error) {
	if database == nil {
		return nil, invalidf("database must not be nil: pass a *pgxpool.Pool, *pgx.Conn or pgx.Tx")
	}
	holder := cmp.Or(cfg.Holder, pglease.NewHolderID())
	if err := checkText("holder", holder); err != nil {
		return nil, err
	}
	if cfg.SafetyMargin < 0 {
		return nil, invalidf("SafetyMargin must not be negative, got %s", cfg.SafetyMargin)
	}
	c := &Client{
		db:     database,
		q:      db.New(database),
		holder: holder,
		margin: cfg.SafetyMargin,
		logger: cmp.Or(cfg.Logger, slog.Default()),
		purge:  cmp.Or(cfg.PurgeEvery, purge.DefaultEvery),
	}
	if pool, ok := database.(*pgxpool.Pool); ok {
		c.pool = pool
	}
	return c, nil
}

// Holder returns the identity this client claims slots as.
func (c *Client) Holder() string { return c.holder }

// marginFor returns the safety margin for a slot of ttl.
func (c *Client) marginFor(ttl time.Duration) time.Duration {
	return cmp.Or(c.margin, ttl/10)
}

// checkClaim validates the arguments of a claim as the SQL does.
func (c *Client) checkClaim(scope string, capacity int, ttl time.Duration) error {
	if err := checkText("scope", scope); err != nil {
		return err
	}
	if err := checkCapacity("capacity", capacity); err != nil {
		return err
	}
	return c.checkTTL(ttl)
}

// checkText validates a scope or holder as the SQL does.
func checkText(arg, value string) error {
	if msg := check.Text(arg, value); msg != "" {
		return invalidf("%s", msg)
	}
	return nil
}

// checkCapacity validates a capacity as the SQL does.
func checkCapacity(arg string, capacity int) error {
	if capacity < 1 || capacity > MaxCapacity {
		return invalidf("%s must be from 1 to %d, got %d", arg, MaxCapacity, capacity)
	}
	return nil
}

// checkTTL validates a TTL as the SQL does, and against the safety margin.
func (c *Client) checkTTL(ttl time.Duration) error {
	if ttl < time.Microsecond || ttl > pglease.MaxTTL {
		return invalidf("ttl must be from 1µs to %s, got %s", pglease.MaxTTL, ttl)
	}
	if c.margin >= ttl {
		return invalidf("ttl %s must be longer than the client's SafetyMargin %s", ttl, c.margin)
	}
	return nil
}

// invalidf returns an error matching pglease.ErrInvalidArgument.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", pglease.ErrInvalidArgument, fmt.Sprintf(format, args...))
}
