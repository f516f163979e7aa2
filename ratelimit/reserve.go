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

// Reservation is tokens of a key held ahead of a cost not yet known
// (Limiter.Reserve), to be settled with the cost once it is. Like a
// lease, it ends at ExpiresAt on the server's clock: the work it pays for
// must stop before then. Settled before ExpiresAt, it spends the actual
// cost and gives the rest back; never settled, its whole amount goes back
// to the key at ExpiresAt, and a Settle from then on reports false.
type Reservation struct {
	// Decision is the take's: Allowed is true when the tokens were
	// reserved (spent); the rest as for Take.
	Decision
	// ID identifies the reservation to Settle; zero when not reserved.
	ID int64
	// ExpiresAt is when, on the server's clock, the reservation ends:
	// unsettled, its tokens go back to the key then, and Settle reports
	// false from then on. Zero when not reserved.
	ExpiresAt time.Time
	// RefusedBy is, for ReserveAll, the key that refused the reservation
	// (its Decision is that key's); empty when reserved, and for Reserve.
	RefusedBy string
}

// Reserve takes n tokens of key as Take does and, when allowed, holds them
// as a reservation that Settle settles before ttl has passed on the
// server's clock; unsettled by then, they go back to the key. Takes and
// reservations of a key never spend more than its limit together. Errors
// as Take's.
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

// MaxReserveKeys is the most keys ReserveAll reserves at once.
const MaxReserveKeys = 64

// ReserveAll reserves n tokens of every key of keys at once, all or
// nothing: a user within a tenant within a pool ("pool/t1/u1", "pool/t1",
// "pool"). The server takes the keys narrowest first, the longest first;
// when one refuses, nothing is spent at any key and RefusedBy names it,
// with its Decision. When reserved, one ID settles every key (Settle with
// any of them), and the Decision is that of the key with the fewest
// tokens left. Through a PL/Proxy proxy the keys must share a routing tag
// ({t1}/pool, {t1}/u1), else ErrInvalidArgument. Errors as Reserve's.
func (l *Limiter) ReserveAll(ctx context.Context, keys []string, n int, ttl time.Duration) (Reservation, error) {
	if len(keys) < 1 || len(keys) > MaxReserveKeys {
		return Reservation{}, tenure.Invalidf("keys must hold 1 to %d keys, got %d", MaxReserveKeys, len(keys))
	}
	for _, key := range keys {
		if err := tenure.CheckText("key", key); err != nil {
			return Reservation{}, err
		}
	}
	if n < 1 || n > math.MaxInt32 {
		return Reservation{}, tenure.Invalidf("n must be from 1 to %d, got %d", math.MaxInt32, n)
	}
	if ttl <= 0 || ttl > MaxReserveTTL {
		return Reservation{}, tenure.Invalidf("ttl must be more than 0 and at most %v, got %v", MaxReserveTTL, ttl)
	}
	r, err := l.q.LimitReserveAll(ctx, db.LimitReserveAllParams{Keys: keys, Amount: int32(n), Ttl: ttl})
	if err != nil {
		return Reservation{}, interpret(ctx, err)
	}
	res := Reservation{Decision: decision(r.Reserved, r.Remaining, r.RetryIn, r.ResetIn, r.Burst, r.DecidedAt)}
	if r.Reserved {
		res.ID = r.Reservation.Int64
		res.ExpiresAt = *r.ExpiresAt
	}
	res.RefusedBy = r.RefusedBy.String
	for _, key := range keys {
		l.m.decided(ctx, key, r.Reserved, n)
	}
	return res, nil
}

// Settle settles reservation id of key at actual tokens used: actual are
// spent and the rest go back to the bucket (for a reservation of
// ReserveAll, key is any of its keys, and the rest go back to each of
// them). It reports false, changing nothing, when the reservation is not
// the caller's bucket's, was settled already, or has expired: at or after
// its ExpiresAt on the server's clock its whole amount went back at
// ExpiresAt, and work that went on past it was not counted. actual must be
// from 0 to the amount reserved.
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
