package runslots

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/tenure"
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
// their defaults. New refuses an invalid Config with an error that names
// the field. Its fields are fields of pglease.Config, with the same
// defaults and rules, applied by the same code: slots and leases are two
// kinds of one tenure. pglease.Config's ObserveInterval has no
// counterpart here.
type Config struct {
	// Holder identifies this client in the slot table. Claims are
	// re-entrant per holder and scope (a holder has at most one slot of a
	// scope, and claiming again returns it), so it must be unique per
	// client. Defaults to pglease.NewHolderID(), or with a Keeper to the
	// keeper's holder.
	Holder string

	// SafetyMargin is subtracted from a tenure's TTL to compute its local
	// deadline (see Slot.Deadline). It covers clock-rate differences
	// between this machine and the server and the time between a check of
	// the deadline and the work it guards. Defaults to a tenth of each
	// tenure's TTL. Must be smaller than every TTL used with this client.
	SafetyMargin time.Duration

	// Logger receives Run's renewal failures, stuck workloads and failed
	// releases, and the fallback from release notifications to expiry
	// waits. Defaults to slog.Default().
	Logger *slog.Logger

	// RenewInterval is the time between Run's renewals. Defaults to a third
	// of the tenure's TTL. Every TTL used with this client must exceed it
	// plus the safety margin. Must be zero with a Keeper, whose rounds renew
	// instead (its Interval applies).
	RenewInterval time.Duration

	// RetryDelay is the pause before Run retries a renewal whose outcome is
	// unknown (connection error, timeout), while the deadline allows.
	// Defaults to a fifth of RenewInterval; must be shorter than it. Must
	// be zero with a Keeper, whose RetryDelay applies.
	RetryDelay time.Duration

	// StopTimeout is how long after cancelling fn Run waits before
	// reporting it as stuck (Run keeps waiting: it never releases nor
	// returns while fn may still run). Defaults to the TTL.
	StopTimeout time.Duration

	// OnStuck, when set, is called once when Run's fn has not returned
	// StopTimeout after its context was cancelled, with the cause.
	OnStuck func(cause error)

	// OnRelease, when set, is called after Run's release with its error
	// (nil when the slot was released).
	OnRelease func(err error)

	// OnWait, when set, is called each time a blocking Claim or ClaimAll
	// has been refused and is about to wait (listening for a release),
	// with the refusal: a *FullError. It is called on the waiting goroutine
	// and must return quickly.
	OnWait func(refusal error)

	// Keeper, when set, renews every slot this client claims, with the
	// keeper's other leases and slots in one round trip per interval (see
	// pglease.Keeper): the client makes no renewal calls of its own.
	// Holder defaults to the keeper's and must equal it; RenewInterval and
	// RetryDelay must be zero; the keeper's TTL must suit SafetyMargin as
	// every TTL does. Claim with the keeper's TTL.
	Keeper *pglease.Keeper

	// MeterProvider gives the client's instruments (tenures held, granted,
	// refused, released and lost, renewal round trips and the margin each
	// renewal leaves; docs/observability.md lists them). Defaults to
	// otel.GetMeterProvider(): the global provider, a no-op until the
	// service installs an OpenTelemetry SDK.
	MeterProvider metric.MeterProvider

	// MetricsByName, when true, adds the slot scope to the client's
	// measurements as the attribute pglease.name: one time series per
	// scope. Leave it false (the default) when scopes are per entity
	// ("tenant:<id>"), or a series would be made per entity; the
	// measurements then carry the kind only.
	MetricsByName bool
}

// core returns cfg in the words of the core.
func (cfg Config) core() tenure.Config {
	return tenure.Config{
		Holder: cfg.Holder, SafetyMargin: cfg.SafetyMargin, Logger: cfg.Logger,
		RenewInterval: cfg.RenewInterval, RetryDelay: cfg.RetryDelay, StopTimeout: cfg.StopTimeout,
		OnStuck: cfg.OnStuck, OnRelease: cfg.OnRelease, OnWait: cfg.OnWait, Keeper: tenure.KeeperOf(cfg.Keeper),
		MeterProvider: cfg.MeterProvider, MetricsByName: cfg.MetricsByName,
	}
}

// Client claims slots in the pglease schema of one database as one holder.
// It is safe for concurrent use.
//
// A client holds at most one slot per scope: claiming a scope it already
// holds returns the same tenure (same slot, same fence), and releasing
// either copy ends both. To occupy several slots of one scope from one
// process, use one Client per concurrent claim; they are cheap.
//
// With Config.Keeper (a pglease.Keeper), the client's slots are renewed
// with every other lease and slot of the keeper's holder in one round trip
// per interval. Every client of a keeper has the keeper's holder, so a
// process holds at most one slot per scope through one keeper; use a
// keeper per holder to occupy more.
type Client struct {
	c *tenure.Core
}

// slots is the slot kind of tenure.
var slots = tenure.Kind{
	Noun: "slot", Prefix: "runslots", Lost: ErrSlotLost,
	LostError: func(t *tenure.Tenure, cause, workErr error) error {
		return &LostError{Scope: t.Name(), Slot: t.Slot(), Fence: t.Fence(), Cause: cause, WorkErr: workErr}
	},
}

// New returns a Client that runs its queries on database. It does not take
// ownership: closing database stays the caller's job. Claim and ClaimAll
// wake up on release notifications when database is a *pgxpool.Pool or
// a pglease.Listener (the client's waiters share one LISTEN connection; see
// pglease.DB); otherwise they wait until the earliest expiry the server
// reported. It returns an error matching pglease.ErrInvalidArgument, naming
// the field, when cfg is invalid.
func New(database pglease.DB, cfg Config) (*Client, error) {
	c, err := tenure.New(database, slots, cfg.core())
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
