package ratelimit

import (
	"context"
	"math"
	"time"

	"github.com/pglease/pglease/internal/db"
	"github.com/pglease/pglease/internal/tenure"
)

// MaxReserveTTL is the longest a reservation can wait for its settlement.
const MaxReserveTTL = tenure.MaxTTL

// Reservation is tokens of a key spent ahead of a cost not yet known
// (Limiter.Reserve), to be settled with the cost once it is.
type Reservation struct {
	// Decision is the take's: Allowed is true when the tokens were
	// reserved (spent); the rest as for Take.
	Decision
	// ID identifies the reservation to Settle; zero when not reserved.
	ID int64
	// ExpiresAt is when, on the server's clock, the reservation can no
	// longer be settled: its tokens then stay spent. Zero when not
	// reserved.
	ExpiresAt time.Time
}

// Reserve takes n tokens of key as Take does and, when allowed, records
// them as a reservation that Settle can give back in part until ttl has
// passed on the server's clock. Takes and reservations of a key never
// spend more than its limit together. Errors as Take's.
func (l *Limiter) Reserve(ctx context.Context, key string, n int, ttl time.Duration) (Reservation, error) {
	if err := tenure.CheckText("key", key); err != nil {
		return Reservation{}, err
	}
	if n < 1 || n > math.MaxInt32 {
		return Reservation{}, tenure.Invalidf("n must be from 1 to %d, got %d", math.MaxInt32, n)
	}
	if ttl <= 0 || ttl > MaxReserveTTL {
		return Reservation{}, tenure.Invalidf("ttl must be more than 0 and at most %v, got %v", MaxReserveTTL, ttl)
	}
	r, err := l.q.LimitReserve(ctx, db.LimitReserveParams{Key: key, Amount: int32(n), Ttl: ttl})
	if err != nil {
		return Reservation{}, interpret(ctx, err)
	}
	res := Reservation{Decision: decision(r.Reserved, r.Remaining, r.RetryIn, r.ResetIn, r.Burst, r.DecidedAt)}
	if r.Reserved {
		res.ID = r.Reservation.Int64
		res.ExpiresAt = *r.ExpiresAt
	}
	l.m.decided(ctx, key, r.Reserved, n)
	return res, nil
}

// Settle settles reservation id of key at actual tokens used: the rest go
// back to the bucket. It reports false, changing nothing, when the
// reservation is not the caller's bucket's, was settled already, or has
// expired (its tokens stay spent). actual must be from 0 to the amount
// reserved.
func (l *Limiter) Settle(ctx context.Context, key string, id int64, actual int) (settled bool, err error) {
	if err := tenure.CheckText("key", key); err != nil {
		return false, err
	}
	if id < 1 || actual < 0 || actual > math.MaxInt32 {
		return false, tenure.Invalidf("id must be 1 or more and actual from 0 to %d, got %d and %d", math.MaxInt32, id, actual)
	}
	r, err := l.q.LimitSettle(ctx, db.LimitSettleParams{Key: key, Reservation: id, Actual: int32(actual)})
	if err != nil {
		return false, interpret(ctx, err)
	}
	return r.Settled, nil
}
