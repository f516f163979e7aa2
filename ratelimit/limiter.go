package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/sqlerr"
	"github.com/pglease/pglease/internal/tenure"
)

// Limits enforced by the SQL functions, checked here before a round trip.
const (
	// MaxKeyLen is the longest key or target, in bytes.
	MaxKeyLen = tenure.MaxNameLen
	// MaxRate is the largest rate and burst of a limit.
	MaxRate = 1_000_000_000
	// MaxPer is the longest interval of a limit.
	MaxPer = 366 * 24 * time.Hour
)

// Config configures a Limiter. The zero value is usable: zero fields mean
// their defaults.
type Config struct {
	// MeterProvider gives the limiter's instruments (takes allowed and
	// limited, time spent in Wait; docs/limits.md lists them). Defaults to
	// otel.GetMeterProvider(): the global provider, a no-op until the
	// service installs an OpenTelemetry SDK.
	MeterProvider metric.MeterProvider

	// MetricsByName, when true, adds the key to the limiter's
	// measurements as the attribute pglease.name: one time series per
	// key. Leave it false (the default) when keys are per entity
	// ("tenant/<id>"), or a series would be made per entity.
	MetricsByName bool
}

// DB is what a Limiter runs its queries on: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx (pglease.DB satisfies it).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Limiter takes tokens of rate-limited keys in the pglease schema of one
// database. It is safe for concurrent use, and holds no state of its own:
// any number of Limiters, in any number of processes, share each key's
// budget.
type Limiter struct {
	q *db.Queries
	m *meters
}

// New returns a Limiter that runs its queries on database. It does not
// take ownership: closing database stays the caller's job.
func New(database DB, cfg Config) (*Limiter, error) {
	if database == nil {
		return nil, tenure.Invalidf("ratelimit.New: database must not be nil")
	}
	return &Limiter{q: db.New(database), m: newMeters(cfg.MeterProvider, cfg.MetricsByName)}, nil
}

// Decision is the server's answer to a take (or, from Peek, to a take of
// one token that would be made now).
type Decision struct {
	// Allowed is true when the tokens were spent.
	Allowed bool
	// Remaining is how many whole tokens the bucket holds after the
	// decision: after the spend when allowed, fewer than asked for when
	// not.
	Remaining int
	// RetryIn is, when not allowed, how long after At the tokens asked for
	// are there (a take then is allowed unless others spend first); zero
	// when allowed.
	RetryIn time.Duration
	// ResetIn is how long after At the bucket is full again.
	ResetIn time.Duration
	// Burst is the key's burst: the most tokens it holds.
	Burst int
	// At is the server's clock reading the decision was made on. Compare
	// RetryIn and ResetIn with a local monotonic clock from the call's
	// send time, never At with the local wall clock.
	At time.Time
}

// Limit is the limit of a target: Rate tokens per Per, at most Burst at
// once.
type Limit struct {
	// Rate is how many tokens come per Per: 1 to MaxRate, at most one per
	// microsecond of Per.
	Rate int
	// Per is the interval Rate is counted over: more than 0, at most
	// MaxPer.
	Per time.Duration
	// Burst is the most tokens the bucket holds: 1 to MaxRate. Filling it
	// (Burst * Per / Rate) must take at most 100 years.
	Burst int
	// Exact limits the key equal to the target only; false (the default)
	// limits every key starting with the target.
	Exact bool
}

// Allow takes one token of key, and reports whether it was there.
func (l *Limiter) Allow(ctx context.Context, key string) (bool, error) {
	d, err := l.Take(ctx, key, 1)
	return d.Allowed, err
}

// AllowN takes n tokens of key, all or none, and reports whether they
// were there.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (bool, error) {
	d, err := l.Take(ctx, key, n)
	return d.Allowed, err
}

// Take takes n tokens of key, all or none, and returns the server's
// decision: refused is not an error. It returns ErrNoLimit when no limit
// is set for key, ErrCostExceedsBurst when n is more than its burst, and
// pglease.ErrPermissionDenied when key is under a prefix bound to another
// role.
func (l *Limiter) Take(ctx context.Context, key string, n int) (Decision, error) {
	return l.take(ctx, l.q, key, n)
}

// TakeTx is Take inside the caller's transaction tx: the spend commits or
// rolls back with tx, and the key's row stays locked until then (other
// takes of the key wait for tx to end: keep tx short).
func (l *Limiter) TakeTx(ctx context.Context, tx pgx.Tx, key string, n int) (Decision, error) {
	return l.take(ctx, l.q.WithTx(tx), key, n)
}

// Peek returns the decision a take of one token of key would get now,
// spending nothing.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	if err := tenure.CheckText("key", key); err != nil {
		return Decision{}, err
	}
	r, err := l.q.LimitPeek(ctx, key)
	if err != nil {
		return Decision{}, interpret(ctx, err)
	}
	return decision(r.Allowed, r.Remaining, r.RetryIn, r.ResetIn, r.Burst, r.DecidedAt), nil
}

// Wait takes one token of key, waiting until it is there.
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN takes n tokens of key, waiting until they are there: it sleeps
// each refusal's RetryIn on the client (holding no connection) and takes
// again. It returns ctx.Err() unchanged when ctx ends first, having spent
// nothing, and Take's errors as Take does.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	start := time.Now()
	for {
		d, err := l.take(ctx, l.q, key, n)
		if err != nil {
			return err
		}
		if d.Allowed {
			l.m.waited(ctx, key, time.Since(start))
			return nil
		}
		t := time.NewTimer(d.RetryIn)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Set sets target's limit: of every key starting with target, or with
// lim.Exact of the key target alone. It reports whether it replaced a
// limit. Only the schema owner, and members of the role a prefix is bound
// to for targets under it, may: others get pglease.ErrPermissionDenied.
func (l *Limiter) Set(ctx context.Context, target string, lim Limit) (replaced bool, err error) {
	if err := tenure.CheckText("target", target); err != nil {
		return false, err
	}
	switch {
	case lim.Rate < 1 || lim.Rate > MaxRate:
		return false, tenure.Invalidf("Rate must be from 1 to %d, got %d", MaxRate, lim.Rate)
	case lim.Per <= 0 || lim.Per > MaxPer:
		return false, tenure.Invalidf("Per must be more than 0 and at most %v, got %v", MaxPer, lim.Per)
	case lim.Burst < 1 || lim.Burst > MaxRate:
		return false, tenure.Invalidf("Burst must be from 1 to %d, got %d", MaxRate, lim.Burst)
	}
	replaced, err = l.q.LimitSet(ctx, db.LimitSetParams{
		Target: target, Rate: int32(lim.Rate), Per: lim.Per, Burst: int32(lim.Burst), Exact: lim.Exact,
	})
	return replaced, interpret(ctx, err)
}

// Unset removes target's limit, and reports whether it had one. Who may:
// as Set.
func (l *Limiter) Unset(ctx context.Context, target string) (removed bool, err error) {
	if err := tenure.CheckText("target", target); err != nil {
		return false, err
	}
	removed, err = l.q.LimitUnset(ctx, target)
	return removed, interpret(ctx, err)
}

// Reset refills key's bucket (every role's bucket of a shared key, for
// the schema owner), and returns how many buckets it refilled. Who may:
// as Set.
func (l *Limiter) Reset(ctx context.Context, key string) (int, error) {
	if err := tenure.CheckText("key", key); err != nil {
		return 0, err
	}
	n, err := l.q.LimitReset(ctx, key)
	return int(n), interpret(ctx, err)
}

// take is Take on q.
func (l *Limiter) take(ctx context.Context, q *db.Queries, key string, n int) (Decision, error) {
	if err := tenure.CheckText("key", key); err != nil {
		return Decision{}, err
	}
	if n < 1 || n > math.MaxInt32 {
		return Decision{}, tenure.Invalidf("n must be from 1 to %d, got %d", math.MaxInt32, n)
	}
	r, err := q.LimitTake(ctx, db.LimitTakeParams{Key: key, Cost: int32(n)})
	if err != nil {
		return Decision{}, interpret(ctx, err)
	}
	d := decision(r.Allowed, r.Remaining, r.RetryIn, r.ResetIn, r.Burst, r.DecidedAt)
	l.m.decided(ctx, key, d.Allowed, n)
	return d, nil
}

func decision(allowed bool, remaining int32, retryIn *time.Duration, resetIn time.Duration, burst int32, at time.Time) Decision {
	d := Decision{Allowed: allowed, Remaining: int(remaining), ResetIn: resetIn, Burst: int(burst), At: at}
	if retryIn != nil {
		d.RetryIn = *retryIn
	}
	return d
}

// SQLSTATEs of the limit functions (docs/sql.md).
const (
	noLimit     = "PGL20"
	overBurst   = "PGL21"
	prefixOther = "42501"
)

// interpret maps err to the package's sentinels and pglease's; ctx.Err()
// unchanged when ctx has ended.
func interpret(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pgErr.Code {
		case noLimit:
			return fmt.Errorf("%w: %w", ErrNoLimit, sqlerr.Trim(pgErr))
		case overBurst:
			return fmt.Errorf("%w: %w", ErrCostExceedsBurst, sqlerr.Trim(pgErr))
		case prefixOther:
			return fmt.Errorf("%w: %w", tenure.ErrPermissionDenied, sqlerr.Trim(pgErr))
		}
	}
	return tenure.Interpret(ctx, "ratelimit", errInvalid, err)
}
