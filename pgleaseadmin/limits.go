package pgleaseadmin

import (
	"context"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// DefaultMaxLimits is how many limits Limits reports at most when its
// maxLimits is zero.
const DefaultMaxLimits = 1000

// maxMaxLimits is the most pglease.limit_status accepts.
const maxMaxLimits = 100_000

// LimitLevel is one configured rate limit (docs/limits.md) and how full
// its keys' buckets are, as computed by the server when read.
type LimitLevel struct {
	// Target is the key or prefix the limit is set for; Exact is true when
	// it covers the key equal to Target alone.
	Target string
	Exact  bool
	// Rate tokens per Per, at most Burst at once: the limit as set. For a
	// budget, Burst is the budget.
	Rate  int
	Per   time.Duration
	Burst int
	// Owner is the role owning Target's bound prefix; empty for a shared
	// name.
	Owner string
	// Buckets counts the keys' buckets under this limit (the keys it is the
	// longest match of) that are not full; Limited those of them with less
	// than one token, which refuse a take now.
	Buckets, Limited int64
	// MinRemaining is the fewest whole tokens left in any of its buckets
	// (Burst when none is spent): Burst - MinRemaining is the most any one
	// key has used.
	MinRemaining int
	// Reserved is the tokens its buckets' reservations hold, neither
	// settled nor expired.
	Reserved int64
}

// Limits returns the configured rate limits the caller may see, by target,
// the first maxLimits of them (DefaultMaxLimits when 0, at most 100,000),
// with their levels, and how many limits it may see in all (more than
// len(levels): the rest were left out). The schema owner and members of
// pglease_operator see every limit and bucket; any other role what
// pglease.peek shows it: shared limits and its own prefixes', and only its
// own buckets (docs/limits.md#levels). Read-only; it takes no lock.
func Limits(ctx context.Context, database pglease.DB, maxLimits int) (levels []LimitLevel, total int64, err error) {
	if maxLimits == 0 {
		maxLimits = DefaultMaxLimits
	}
	if maxLimits < 0 || maxLimits > maxMaxLimits {
		return nil, 0, tenure.Invalidf("maxLimits must be from 1 to %d (0: %d), got %d", maxMaxLimits, DefaultMaxLimits, maxLimits)
	}
	rows, err := db.New(database).LimitStatusList(ctx, int32(maxLimits))
	levels, err = tenure.List(ctx, prefix, rows, err, func(r db.LimitStatusListRow) LimitLevel {
		total = r.Limits
		return LimitLevel{
			Target: r.Target, Exact: r.Exact, Rate: int(r.Rate), Per: r.Per, Burst: int(r.Burst),
			Owner: r.OwnerRole, Buckets: r.Buckets, Limited: r.Limited, MinRemaining: int(r.MinRemaining),
			Reserved: r.Reserved,
		}
	})
	return levels, total, err
}
