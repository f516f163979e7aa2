package tenure

import (
	"cmp"
	"fmt"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Config is a client's configuration, shared by both kinds and by the
// supervisor: pglease.Config and runslots.Config document each field,
// supervisor.Config those it shares. Its rules (the defaults and the
// checks below) are the only ones: New applies them to a client, and the
// supervisor applies them to its own Config with WithDefaults and CheckTTL.
type Config struct {
	Holder        string
	SafetyMargin  time.Duration
	Logger        *slog.Logger
	RenewInterval time.Duration
	RetryDelay    time.Duration
	StopTimeout   time.Duration
	OnStuck       func(cause error)
	OnRelease     func(err error)
	OnWait        func(refusal error)
	Keeper        *Keeper
	MeterProvider metric.MeterProvider
	MetricsByName bool
}

// The pace of renewals when a Config leaves it zero: one rule for every
// tenure, every client and the Keeper.
const (
	// renewDivisor: the renew interval defaults to a third of the TTL (a
	// Keeper's Interval too).
	renewDivisor = 3
	// retryDivisor: the retry delay defaults to a fifth of the renew
	// interval (a Keeper's RetryDelay too, of its Interval).
	retryDivisor = 5
	// keptInterval is the renew interval of Run on a tenure a Keeper
	// renews: a kept Renew waits for the keeper's next round, so Run may
	// renew again at once, and so learns of each round as it ends.
	keptInterval = time.Millisecond
)

// pace returns the renew interval and retry delay of a tenure of ttl:
// renew and retry, or their defaults when zero.
func pace(ttl, renew, retry time.Duration) (time.Duration, time.Duration) {
	renew = cmp.Or(renew, ttl/renewDivisor)
	return renew, cmp.Or(retry, renew/retryDivisor)
}

// WithDefaults returns cfg with the defaults that need no TTL applied
// (Holder: the Keeper's, else NewHolderID(); Logger: slog.Default();
// MeterProvider: otel.GetMeterProvider()), or an error matching
// ErrInvalidArgument that names the first invalid field. With a Keeper, it also checks that the keeper's
// TTL suits cfg (CheckTTL) and leaves its rounds room.
func (cfg Config) WithDefaults() (Config, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"SafetyMargin", cfg.SafetyMargin}, {"RenewInterval", cfg.RenewInterval},
		{"RetryDelay", cfg.RetryDelay}, {"StopTimeout", cfg.StopTimeout},
	} {
		if d.v < 0 {
			return cfg, Invalidf("%s must not be negative, got %s", d.name, d.v)
		}
	}
	k := cfg.Keeper
	if k != nil {
		switch {
		case cfg.RenewInterval != 0 || cfg.RetryDelay != 0:
			return cfg, Invalidf("RenewInterval and RetryDelay must be zero with a Keeper (got %s and %s): the Keeper's Interval and RetryDelay apply",
				cfg.RenewInterval, cfg.RetryDelay)
		case cfg.Holder != "" && cfg.Holder != k.cfg.Holder:
			return cfg, Invalidf("Holder %q differs from the Keeper's holder %q: leave Holder empty to get the keeper's",
				cfg.Holder, k.cfg.Holder)
		}
		cfg.Holder = k.cfg.Holder
	}
	cfg.Holder = cmp.Or(cfg.Holder, NewHolderID())
	if err := CheckText("Holder", cfg.Holder); err != nil {
		return cfg, err
	}
	if cfg.RenewInterval > 0 && cfg.RetryDelay >= cfg.RenewInterval {
		return cfg, Invalidf("RetryDelay %s must be shorter than RenewInterval %s", cfg.RetryDelay, cfg.RenewInterval)
	}
	if k != nil {
		ttl := k.cfg.TTL
		if err := cfg.CheckTTL("ttl", ttl); err != nil {
			return cfg, fmt.Errorf("the Keeper's TTL does not suit this client: %w", err)
		}
		if left := ttl - cfg.Margin(ttl); k.cfg.Interval+k.cfg.RetryDelay >= left {
			return cfg, Invalidf("the Keeper's Interval %s plus RetryDelay %s must be shorter than its TTL minus the client's SafetyMargin (%s)",
				k.cfg.Interval, k.cfg.RetryDelay, left)
		}
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.MeterProvider = MeterProvider(cfg.MeterProvider)
	return cfg, nil
}

// CheckTTL reports whether a tenure of ttl (the argument or field called
// arg) can be granted and held with cfg: ttl is in range, no longer than
// the Keeper's TTL, longer than the safety margin, and leaves time to
// renew: the renew interval is shorter than ttl minus the margin, and the
// retry delay shorter than the renew interval.
func (cfg Config) CheckTTL(arg string, ttl time.Duration) error {
	if ttl < time.Microsecond || ttl > MaxTTL {
		return Invalidf("%s must be from 1µs to %s, got %s", arg, MaxTTL, ttl)
	}
	if k := cfg.Keeper; k != nil && ttl > k.cfg.TTL {
		// A round renews to the keeper's TTL: a longer grant would be
		// shortened on the server while, should the round's reply be
		// lost, its local deadline stayed where the grant put it.
		return Invalidf("%s %s is longer than the Keeper's TTL %s: a kept tenure is renewed to the Keeper's TTL, so ask for at most that",
			arg, ttl, k.cfg.TTL)
	}
	margin := cfg.Margin(ttl)
	if margin >= ttl {
		return Invalidf("%s %s must be longer than the client's SafetyMargin %s", arg, ttl, margin)
	}
	if cfg.Keeper != nil {
		return nil // WithDefaults checked the keeper's pace
	}
	renew, retry := cfg.Pace(ttl)
	if renew >= ttl-margin {
		return Invalidf("%s %s leaves no time to renew: the RenewInterval %s must be shorter than %s - SafetyMargin (%s)",
			arg, ttl, renew, arg, ttl-margin)
	}
	if retry >= renew {
		return Invalidf("RetryDelay %s must be shorter than the RenewInterval %s of a %s of %s", retry, renew, arg, ttl)
	}
	return nil
}

// Margin returns the safety margin of a tenure of ttl: SafetyMargin, or a
// tenth of ttl.
func (cfg Config) Margin(ttl time.Duration) time.Duration {
	return cmp.Or(cfg.SafetyMargin, ttl/10)
}

// Pace returns the renew interval and retry delay of Run on a tenure of
// ttl: RenewInterval, a third of ttl by default, and RetryDelay, a fifth of
// the renew interval by default. A kept tenure renews again as soon as a
// renewal returns (its renewals wait for the Keeper's rounds), and retries
// after the Keeper's RetryDelay.
func (cfg Config) Pace(ttl time.Duration) (renew, retry time.Duration) {
	if k := cfg.Keeper; k != nil {
		return keptInterval, k.cfg.RetryDelay
	}
	return pace(ttl, cfg.RenewInterval, cfg.RetryDelay)
}
