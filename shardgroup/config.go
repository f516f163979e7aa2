package shardgroup

import (
	"cmp"
	"fmt"
	"log/slog"
	"regexp"
	"time"

	"github.com/pglease/pglease/pglease"
)

// MaxShards is the largest number of shards a group may have (the SQL
// functions refuse more).
const MaxShards = 100000

// Config configures a Worker. Zero fields mean their defaults; New refuses
// an invalid Config with an error naming the field (matching
// pglease.ErrInvalidArgument).
type Config struct {
	// Group is the group's name: 1 to 100 bytes of letters, digits and
	// . _ : -, starting with a letter or digit. Required.
	Group string

	// Shards is the number of shards, named "0" to Shards-1, when Names is
	// empty. One of Shards and Names is required; every worker of a group
	// must give the same.
	Shards int

	// Names are the shards' names (1 to 128 bytes each, no duplicates),
	// instead of Shards.
	Names []string

	// Member is this worker's name in the group, unique per process.
	// Defaults to pglease.NewHolderID().
	Member string

	// MaxShards is the most shards this worker takes. Defaults to no
	// maximum (0); negative is refused.
	MaxShards int

	// TTL is how long the worker's membership and shards last after each
	// sync. Defaults to pglease.DefaultTTL (15s); at most pglease.MaxTTL
	// (24h).
	TTL time.Duration

	// Interval is the time between syncs. Defaults to a third of TTL; must
	// be shorter than TTL - SafetyMargin.
	Interval time.Duration

	// SafetyMargin is how long before the server's expiry a shard's
	// context ends when no sync succeeded. Defaults to a tenth of TTL; must
	// be shorter than TTL.
	SafetyMargin time.Duration

	// Logger receives failed syncs and workload errors. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

var groupName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]*$`)

func invalid(format string, args ...any) error {
	return fmt.Errorf("shardgroup: %w: "+format, append([]any{pglease.ErrInvalidArgument}, args...)...)
}

// normalize applies the defaults and checks the invariants.
func (cfg Config) normalize() (Config, error) {
	if len(cfg.Group) == 0 || len(cfg.Group) > 100 || !groupName.MatchString(cfg.Group) {
		return cfg, invalid("Config.Group %q is not a group name: 1 to 100 bytes of letters, digits and . _ : -, starting with a letter or digit", cfg.Group)
	}
	switch {
	case len(cfg.Names) > 0 && cfg.Shards != 0:
		return cfg, invalid("Config.Shards (%d) and Config.Names (%d names) are both set: give one", cfg.Shards, len(cfg.Names))
	case len(cfg.Names) == 0 && (cfg.Shards < 1 || cfg.Shards > MaxShards):
		return cfg, invalid("Config.Shards must be from 1 to %d (or give Config.Names), got %d", MaxShards, cfg.Shards)
	case len(cfg.Names) > MaxShards:
		return cfg, invalid("Config.Names must hold at most %d names, got %d", MaxShards, len(cfg.Names))
	}
	seen := make(map[string]bool, len(cfg.Names))
	for _, n := range cfg.Names {
		if len(n) < 1 || len(n) > 128 {
			return cfg, invalid("Config.Names: shard name %q must be 1 to 128 bytes long", n)
		}
		if seen[n] {
			return cfg, invalid("Config.Names: shard name %q is given more than once", n)
		}
		seen[n] = true
	}
	cfg.Member = cmp.Or(cfg.Member, pglease.NewHolderID())
	if len(cfg.Member) > 256 {
		return cfg, invalid("Config.Member must be at most 256 bytes long, got %d", len(cfg.Member))
	}
	if cfg.MaxShards < 0 || cfg.MaxShards > MaxShards {
		return cfg, invalid("Config.MaxShards must be from 1 to %d, or 0 for no maximum, got %d", MaxShards, cfg.MaxShards)
	}
	cfg.TTL = cmp.Or(cfg.TTL, pglease.DefaultTTL)
	if cfg.TTL < 0 || cfg.TTL > pglease.MaxTTL {
		return cfg, invalid("Config.TTL must be more than 0 and at most %s, got %s", pglease.MaxTTL, cfg.TTL)
	}
	cfg.SafetyMargin = cmp.Or(cfg.SafetyMargin, cfg.TTL/10)
	if cfg.SafetyMargin < 0 || cfg.SafetyMargin >= cfg.TTL {
		return cfg, invalid("Config.SafetyMargin %s must be more than 0 and shorter than Config.TTL %s", cfg.SafetyMargin, cfg.TTL)
	}
	cfg.Interval = cmp.Or(cfg.Interval, cfg.TTL/3)
	if cfg.Interval < 0 || cfg.Interval >= cfg.TTL-cfg.SafetyMargin {
		return cfg, invalid("Config.Interval %s must be more than 0 and shorter than Config.TTL - Config.SafetyMargin (%s)", cfg.Interval, cfg.TTL-cfg.SafetyMargin)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	return cfg, nil
}
