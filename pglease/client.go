package pglease

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/tenure"
)

// Limits enforced by the SQL functions, checked here before a round trip.
const (
	// MaxNameLen is the longest lease name, holder or slot scope, in bytes.
	MaxNameLen = 256
	// MaxTTL is the longest TTL a lease or slot can be granted for.
	MaxTTL = 24 * time.Hour
)

// DefaultTTL is the TTL of a Config field TTL left zero, in every package:
// KeeperConfig.TTL, supervisor.Config.TTL (without a Keeper: with one, the
// keeper's TTL) and shardgroup.Config.TTL.
const DefaultTTL = 15 * time.Second

// DB is what a Client, WithFence and SendFenced run their queries on. A
// *pgxpool.Pool, a *pgxpool.Conn, a *pgx.Conn and a pgx.Tx all satisfy it.
//
// Blocking calls (Acquire, runslots' Claim, ClaimAll and Run, the
// supervisor's standby) wake at a release NOTIFY when the client can open a
// dedicated connection to LISTEN on: when the DB is a *pgxpool.Pool (the
// connection is made as the pool makes its own, with its BeforeConnect and
// AfterConnect hooks, but outside the pool, so waiting never takes a pool
// connection) or implements Listener (a wrapped pool, say). The waiters of
// one client share that connection; it is opened by the first waiter and
// closed DefaultNotifyLinger after the last one left. Without it, they wait
// until the expiry the server reported: correct, only slower after a
// release. When it cannot be opened (the server's connection limit, say;
// logged once at warn), they try again to open it, and look again, after a
// backoff from 100ms doubling to 2s, each wait ending at the expiry at the
// latest. A LISTEN connection that goes through a pooler (its backend PID
// is not the server's) is closed without a LISTEN, and the client stops
// trying (logged once at warn): there, give a Listener that connects to
// the server directly.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Listener is implemented by a DB that can open a dedicated connection for
// release notifications (see DB). A *pgxpool.Pool needs not implement it.
type Listener interface {
	// ListenConn opens a new connection that nothing else uses, with the
	// settings and credentials of the DB's own connections. The client
	// runs LISTEN on it and closes it.
	ListenConn(ctx context.Context) (*pgx.Conn, error)
}

// DefaultNotifyLinger is how long a client keeps its LISTEN connection
// open after its last waiter left, so that the next one does not pay a new
// connection.
const DefaultNotifyLinger = 30 * time.Second

// Config configures a Client. The zero value is usable: zero fields mean
// their defaults. New refuses an invalid Config with an error that names
// the field. runslots.Config has these fields but ObserveInterval;
// supervisor.Config has Holder, SafetyMargin, Logger, RenewInterval,
// RetryDelay, StopTimeout, Keeper and MeterProvider. A field of the same
// name has the same default and the same rule in all three.
type Config struct {
	// Holder identifies this client in the lease table. Two clients with
	// the same holder share tenures (acquire is re-entrant per holder), so
	// it must be unique per client. Defaults to NewHolderID(), or with a
	// Keeper to the keeper's holder.
	Holder string

	// SafetyMargin is subtracted from a tenure's TTL to compute its local
	// deadline (see Lease.Deadline). It covers clock-rate differences
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

	// StopTimeout is how long after cancelling its workload Run waits
	// before reporting it as stuck (Run keeps waiting: it never releases
	// nor returns while the workload may still run). Defaults to the TTL.
	StopTimeout time.Duration

	// OnStuck, when set, is called once when Run's workload has not
	// returned StopTimeout after its context was cancelled, with the cause.
	OnStuck func(cause error)

	// OnRelease, when set, is called after Run's release with its error
	// (nil when the tenure was released).
	OnRelease func(err error)

	// OnWait, when set, is called each time a blocking Acquire has been
	// refused and is about to wait (listening for the release), with the
	// refusal: a *HeldError. It is called on the waiting goroutine and must
	// return quickly.
	OnWait func(refusal error)

	// Keeper, when set, renews every tenure this client grants, with the
	// keeper's other tenures in one round trip per interval (see Keeper):
	// the client makes no renewal calls of its own. Holder defaults to the
	// keeper's and must equal it; RenewInterval and RetryDelay must be
	// zero; the keeper's TTL must suit SafetyMargin as every TTL does.
	// Acquire with the keeper's TTL.
	Keeper *Keeper

	// MeterProvider gives the client's instruments (tenures held, granted,
	// refused, released and lost, renewal round trips and the margin each
	// renewal leaves; docs/observability.md lists them). Defaults to
	// otel.GetMeterProvider(): the global provider, a no-op until the
	// service installs an OpenTelemetry SDK.
	MeterProvider metric.MeterProvider

	// MetricsByName, when true, adds the lease name to the client's
	// measurements as the attribute pglease.name: one time series per
	// name. Leave it false (the default) when names are per entity
	// ("order:<id>"), or a series would be made per entity; the
	// measurements then carry the kind only.
	MetricsByName bool

	// ObserveInterval is how often Observe reads the lease when no
	// notification came: the longest a change can go unseen when
	// notifications are lost (no LISTEN connection, as behind a pooler in
	// transaction mode). Defaults to DefaultObserveInterval (2s); must not
	// be negative.
	ObserveInterval time.Duration
}

// core returns cfg in the words of the core.
func (cfg Config) core() tenure.Config {
	return tenure.Config{
		Holder: cfg.Holder, SafetyMargin: cfg.SafetyMargin, Logger: cfg.Logger,
		RenewInterval: cfg.RenewInterval, RetryDelay: cfg.RetryDelay, StopTimeout: cfg.StopTimeout,
		OnStuck: cfg.OnStuck, OnRelease: cfg.OnRelease, OnWait: cfg.OnWait, Keeper: cfg.Keeper.tenureKeeper(),
		MeterProvider: cfg.MeterProvider, MetricsByName: cfg.MetricsByName,
	}
}

// Client acquires leases in the pglease schema of one database. It is safe
// for concurrent use.
type Client struct {
	c            *tenure.Core
	db           DB
	observeEvery time.Duration // Config.ObserveInterval with its default
	batch        *batching     // on a pool: concurrent calls coalesced
}

// leases is the lease kind of tenure.
var leases = tenure.Kind{
	Noun: "lease", Prefix: "pglease", Lost: ErrLeaseLost,
	LostError: func(t *tenure.Tenure, cause, workErr error) error {
		return &LostError{Name: t.Name(), Fence: t.Fence(), Cause: cause, WorkErr: workErr}
	},
}

// New returns a Client that runs its queries on database. It does not take
// ownership: closing database stays the caller's job. It returns an error
// matching ErrInvalidArgument, naming the field, when cfg is invalid.
func New(database DB, cfg Config) (*Client, error) {
	if cfg.ObserveInterval < 0 {
		return nil, tenure.Invalidf("ObserveInterval must not be negative, got %s", cfg.ObserveInterval)
	}
	c, err := tenure.New(database, leases, cfg.core())
	if err != nil {
		return nil, err
	}
	client := &Client{c: c, db: database, observeEvery: cmp.Or(cfg.ObserveInterval, DefaultObserveInterval)}
	if pool, ok := database.(*pgxpool.Pool); ok {
		client.batch = newBatching(client, pool)
		c.ReleaseLease = func(ctx context.Context, name string, fence int64) (bool, error) {
			return client.batch.releases.Do(ctx, releaseCall{name: name, fence: fence})
		}
	}
	return client, nil
}

// CloseIdle closes the connection the client LISTENs on for release
// notifications, if no blocking call waits on it, instead of
// DefaultNotifyLinger after the last one left: for a client that is done
// waiting (a short-lived one, say). The client stays usable; a later
// blocking call opens a new connection. The connection of a Keeper, which
// its clients share, stays open.
func (c *Client) CloseIdle() { c.c.CloseIdle() }

// Holder returns the identity this client acquires leases as.
func (c *Client) Holder() string { return c.c.Holder() }

// NewHolderID returns a holder identity unique to this call:
// "host/pid/random". The random part keeps two processes apart even when they
// share a host name and PID (two containers that both run as PID 1).
func NewHolderID() string { return tenure.NewHolderID() }
