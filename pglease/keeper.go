package pglease

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/tenure"
)

// KeeperConfig configures a Keeper. The zero value is usable: zero fields
// mean their defaults. NewKeeper refuses an invalid KeeperConfig with an
// error that names the field.
type KeeperConfig struct {
	// Holder is the holder whose leases and slots the keeper renews. Every
	// client using the keeper has it (leave their Config.Holder empty to
	// get it). Defaults to NewHolderID().
	Holder string

	// TTL is what each round renews every tenure of the holder to.
	// Acquire and claim with the same TTL: the TTL passed to them holds
	// only until the first round after the grant, and a longer one is
	// refused (ErrInvalidArgument). Defaults to DefaultTTL (15s).
	TTL time.Duration

	// Interval is the time between rounds. Defaults to a third of TTL.
	// Must be shorter than TTL minus a tenth, and, with RetryDelay, leave
	// room for each client's SafetyMargin (New checks).
	Interval time.Duration

	// RetryDelay is the pause before retrying a round whose outcome is
	// unknown (connection error, timeout). Defaults to a fifth of
	// Interval; must be shorter than it.
	RetryDelay time.Duration

	// Logger receives failed rounds. Defaults to slog.Default().
	Logger *slog.Logger

	// MeterProvider gives the keeper's instruments (the duration of each
	// round and the tenures it renewed; docs/observability.md lists them).
	// Defaults to otel.GetMeterProvider(): the global provider, a no-op
	// until the service installs an OpenTelemetry SDK. The tenures a
	// keeper renews are measured by their clients, with the clients'
	// MeterProvider.
	MeterProvider metric.MeterProvider
}

// Keeper renews every lease and slot one holder holds in one round trip per
// interval (the SQL function pglease.renew_holder), instead of one renewal
// per tenure: a process holding 10,000 leases makes one call every
// Interval, not 10,000. Build it with NewKeeper, pass it to pglease.New and
// runslots.New in Config.Keeper, and call Serve for as long as those clients'
// tenures should be kept. It is safe for concurrent use.
//
// Every tenure such a client grants registers with the keeper. Each round
// renews all of them to TTL and settles each one:
//   - renewed: its Deadline moves to when the round was sent, plus TTL,
//     minus the client's safety margin (the rule of Lease.Renew);
//   - not renewed (force-released by an operator, taken over, expired): it ends,
//     Done closes, and Renew and Run report an error matching ErrLeaseLost
//     (runslots.ErrSlotLost for a slot) that names it and its fence.
//
// A round whose outcome is unknown extends nothing and is retried after
// RetryDelay; each tenure ends at its own Deadline if no round succeeds
// before. A tenure granted while a round runs is settled by the next one.
// Release leaves the keeper. Lease.Run and Slot.Run on a kept tenure make
// no renewal calls of their own: their renewals wait for the keeper's next
// round, and their workload is cancelled when it reports the tenure lost
// or the Deadline passes. So are Renew calls.
//
// The clients of a keeper also share one LISTEN connection for their
// blocking calls (Acquire, Claim, a supervisor standing by), opened on the
// keeper's database when it is a *pgxpool.Pool or a Listener: a process
// with a hundred supervisors standing by holds one connection for their
// wake-ups, not a hundred.
//
// renew_holder renews every live tenure of the holder taken by the
// connecting role (session_user): build the keeper on a database that
// connects as the same role as its clients' (the same pool, usually).
// Tenures of the holder that the program dropped without releasing are
// renewed too, as long as Serve runs; release what you no longer use.
// A tenure whose Deadline passed although the server still had it (the
// keeper could not reach the server in time) is released by the first
// round that renews it again.
type Keeper struct {
	core *tenure.Keeper
}

func init() {
	// runslots and supervisor take a *Keeper in their Config and hand its
	// core to theirs, through this hook rather than an exported accessor.
	tenure.KeeperOf = func(public any) *tenure.Keeper {
		k, _ := public.(*Keeper)
		return k.tenureKeeper()
	}
}

// tenureKeeper returns k's core, nil for a nil k.
func (k *Keeper) tenureKeeper() *tenure.Keeper {
	if k == nil {
		return nil
	}
	return k.core
}

// NewKeeper returns a Keeper that renews on database. It does not take
// ownership: closing database stays the caller's job. It returns an error
// matching ErrInvalidArgument, naming the field, when cfg is invalid.
func NewKeeper(database DB, cfg KeeperConfig) (*Keeper, error) {
	k, err := tenure.NewKeeper(database, tenure.KeeperConfig(cfg))
	if err != nil {
		return nil, err
	}
	return &Keeper{core: k}, nil
}

// Holder returns the holder the keeper renews: KeeperConfig.Holder, or the
// one NewKeeper chose.
func (k *Keeper) Holder() string { return k.core.Holder() }

// TTL returns the TTL each round renews to: KeeperConfig.TTL, or its
// default.
func (k *Keeper) TTL() time.Duration { return k.core.TTL() }

// Len returns how many tenures the keeper keeps: granted by its clients and
// neither released nor settled as ended.
func (k *Keeper) Len() int { return k.core.Len() }

// Serve renews every Interval until ctx ends, then returns ctx.Err(). It
// renews at once when it starts. A round whose outcome is unknown is logged
// and retried after RetryDelay. Tenures are not renewed while Serve is not
// running: they end at their Deadline. Serve refuses to start while another
// Serve of the same keeper runs.
func (k *Keeper) Serve(ctx context.Context) error { return k.core.Serve(ctx) }
