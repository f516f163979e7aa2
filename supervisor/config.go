package supervisor

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/purge"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// ExitPolicy says what the supervisor does when the workload returns on
// its own (not because its context was cancelled).
type ExitPolicy int

const (
	// Handover releases the lease and stands by again, after RestartDelay,
	// so that another instance may take over. The default.
	Handover ExitPolicy = iota
	// Restart runs the workload again after RestartDelay, still holding
	// (and renewing) the lease.
	Restart
	// Return releases the lease and makes Run return the workload's error.
	Return
)

// String returns the policy's name.
func (p ExitPolicy) String() string {
	switch p {
	case Handover:
		return "handover"
	case Restart:
		return "restart"
	case Return:
		return "return"
	}
	return fmt.Sprintf("ExitPolicy(%d)", int(p))
}

// DefaultRestartDelay is the pause of Config.RestartDelay left zero.
const DefaultRestartDelay = time.Second

// The backoff of a standby whose acquire failed.
const (
	maxBackoff = 5 * time.Second
	minBackoff = 100 * time.Millisecond
)

// Config configures a Supervisor of a lease (NewLease) or of a slot
// (NewSlot). Zero fields mean their defaults. The fields it shares with
// pglease.Config (Holder, SafetyMargin, RenewInterval, RetryDelay,
// StopTimeout, Logger, Keeper, MeterProvider) have the same defaults and
// rules, applied by the same code; NewLease and NewSlot refuse an invalid
// Config with an error that names the field.
type Config struct {
	// TTL is the lease's time to live on the server. Defaults to
	// pglease.DefaultTTL (15s); with a Keeper, to the keeper's TTL, and
	// must not exceed it. At most pglease.MaxTTL.
	TTL time.Duration

	// RenewInterval is the time between renewals. Defaults to TTL/3. Must
	// be shorter than TTL - SafetyMargin, so that a renewal is due well
	// before the local deadline. Must be zero with a Keeper, whose
	// Interval applies.
	RenewInterval time.Duration

	// RetryDelay is the pause before retrying a renewal whose outcome is
	// unknown (connection error, timeout). Defaults to RenewInterval/5;
	// must be shorter than RenewInterval. Must be zero with a Keeper, whose
	// RetryDelay applies.
	RetryDelay time.Duration

	// Keeper, when set, renews this supervisor's lease (or slot) together
	// with every other tenure of the keeper's holder, in one round trip per
	// keeper interval (see pglease.Keeper): a process running a supervisor
	// per shard or tenant makes one renewal call per interval, not one per
	// supervisor. Serve the keeper (Keeper.Serve) for as long as its
	// supervisors run: without its rounds, a leader's workload is cancelled
	// at its deadline. Holder defaults to the keeper's and must equal it.
	// Every supervisor of a keeper shares its holder, and tenures are
	// re-entrant per holder, so Run refuses to run two of them with the
	// same lease (or scope) at once: several slots of one scope need a
	// keeper (a holder) each.
	Keeper *pglease.Keeper

	// SafetyMargin is how long before the server's expiry the local
	// deadline falls (see pglease.Lease.Deadline). Defaults to TTL/10.
	SafetyMargin time.Duration

	// StopTimeout is how long to wait for the workload to return after its
	// context is cancelled before reporting it (log and EventStuck). The
	// supervisor keeps waiting: it never releases the lease, nor returns,
	// while the workload may still run. Defaults to TTL.
	StopTimeout time.Duration

	// HardStop, when more than 0, makes the process exit (status
	// HardStopExitCode) if the workload has not returned HardStop after
	// its context was cancelled because the tenure ended: a renewal was
	// refused, or the local deadline passed with no renewal confirmed.
	// The workload must return when its context is done; HardStop is the
	// backstop for one that does not (a blocking call that ignores its
	// context), so that it cannot run on after the lease can have expired
	// on the server and another holder started. Must be shorter than
	// SafetyMargin: the deadline cancels the workload SafetyMargin before
	// the server's expiry, so the process is gone before it. A shutdown
	// (Run's ctx ending) never triggers it. EventHardStop is observed and
	// logged just before the exit. 0 (the default) turns it off.
	HardStop time.Duration

	// OnExit says what to do when the workload returns on its own.
	// Defaults to Handover.
	OnExit ExitPolicy

	// RestartDelay is the pause before restarting a workload (Restart) or
	// standing by again (Handover). Defaults to DefaultRestartDelay (1s).
	RestartDelay time.Duration

	// Value is published with each tenure this supervisor takes (NewLease
	// only; NewSlot refuses it): who leads and where, an address say, for the
	// followers (pglease.Client.Observe, pglease.HeldError.Value, the
	// standbys' EventLeaderSeen). At most pglease.MaxValueLen bytes;
	// empty means none; a value needs schema 0.3.0 (on an earlier one the
	// supervisor cannot acquire: pglease.ErrNotMigrated). docs/leadership.md.
	Value string

	// Holder is this supervisor's identity. Defaults to
	// pglease.NewHolderID(), with a Keeper to the keeper's holder; must be
	// unique per supervisor of a lease or scope (tenures are re-entrant
	// per holder).
	Holder string

	// PurgeEvery is how often Run calls pglease.purge_due to delete what
	// has been free for a day (see pgleaseadmin.Purge); the server lets one
	// call per interval through across every caller of the database, so a
	// fleet purges once per interval. Defaults to an hour; negative
	// disables it. It runs only when the database is a *pgxpool.Pool.
	PurgeEvery time.Duration

	// Logger receives structured logs (acquired, renewed, lost, standby),
	// with the lease name, holder and fence. Defaults to slog.Default().
	Logger *slog.Logger

	// Observer, when set, is called with each Event, synchronously from
	// Run's goroutine (EventHardStop from a timer's): it must return
	// quickly.
	Observer func(Event)

	// MeterProvider gives the supervisor's instruments: whether it leads
	// and its transitions, and those of its lease or slot client
	// (docs/observability.md lists them). Every measurement carries the
	// supervisor's lease name (or scope) as the attribute pglease.name: one
	// series per supervisor. Defaults to otel.GetMeterProvider(): the
	// global provider, a no-op until the service installs an
	// OpenTelemetry SDK.
	MeterProvider metric.MeterProvider
}

// withDefaults returns cfg with defaults applied, or an error naming the
// first invalid field. The fields a supervisor shares with a client follow
// the client's rules (package pglease's Config), applied by the same code.
func (cfg Config) withDefaults() (Config, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"TTL", cfg.TTL}, {"RestartDelay", cfg.RestartDelay}, {"HardStop", cfg.HardStop}} {
		if d.v < 0 {
			return cfg, tenure.Invalidf("%s must not be negative, got %s", d.name, d.v)
		}
	}
	if cfg.OnExit < Handover || cfg.OnExit > Return {
		return cfg, tenure.Invalidf("OnExit must be Handover, Restart or Return, got %s", cfg.OnExit)
	}
	if k := cfg.Keeper; k != nil {
		cfg.TTL = cmp.Or(cfg.TTL, k.TTL())
	}
	cfg.TTL = cmp.Or(cfg.TTL, pglease.DefaultTTL)
	core, err := cfg.core().WithDefaults()
	if err != nil {
		return cfg, err
	}
	if err := core.CheckTTL("TTL", cfg.TTL); err != nil {
		return cfg, err
	}
	cfg.Holder, cfg.Logger, cfg.MeterProvider = core.Holder, core.Logger, core.MeterProvider
	cfg.PurgeEvery = cmp.Or(cfg.PurgeEvery, purge.DefaultEvery)
	cfg.SafetyMargin = core.Margin(cfg.TTL)
	if cfg.Keeper == nil {
		cfg.RenewInterval, cfg.RetryDelay = core.Pace(cfg.TTL)
	}
	if cfg.HardStop >= cfg.SafetyMargin {
		return cfg, tenure.Invalidf("HardStop %s must be shorter than SafetyMargin %s: the process must exit before the lease can expire on the server",
			cfg.HardStop, cfg.SafetyMargin)
	}
	cfg.StopTimeout = cmp.Or(cfg.StopTimeout, cfg.TTL)
	cfg.RestartDelay = cmp.Or(cfg.RestartDelay, DefaultRestartDelay)
	return cfg, nil
}

// core returns the settings cfg shares with a client, in the words of the
// core.
func (cfg Config) core() tenure.Config {
	return tenure.Config{
		Holder: cfg.Holder, SafetyMargin: cfg.SafetyMargin, Logger: cfg.Logger,
		RenewInterval: cfg.RenewInterval, RetryDelay: cfg.RetryDelay, StopTimeout: cfg.StopTimeout,
		Keeper: tenure.KeeperOf(cfg.Keeper), MeterProvider: cfg.MeterProvider,
	}
}

// observe passes e to the Observer, if any.
func (cfg Config) observe(e Event) {
	if cfg.Observer != nil {
		cfg.Observer(e)
	}
}
