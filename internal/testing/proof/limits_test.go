//go:build proof

package proof

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/history"
	"github.com/pglease/pglease/internal/testing/pgtest"
)

// EnvLimitsDuration sets how long TestLimitsChaos runs: 10s by default
// (make proof, in CI); make stress sets it to minutes.
const EnvLimitsDuration = "PGLEASE_LIMITS_DURATION"

// The limits' shape: fast limits (so that buckets empty and refill many
// times a second), 16 clients on 8 connections, a backend killed every
// 100-300 ms, one transaction in five rolled back on purpose.
const (
	limitsClients  = 16
	limitsConns    = 8
	limitsApp      = "pglease-proof-limits"
	limitsRollback = 5 // one in limitsRollback transactions rolls back
)

var (
	// Single keys, under limit 'g/': takes, reservations and settles,
	// each decided at its own clock reading (replayed exactly).
	limitsSingle = []string{"g/k0", "g/k1", "g/k2"}
	// A pool, its tenants and their users under limits 'h' and 'h/',
	// reserved all at once (reserve_all) and settled through any level.
	limitsPool    = "h"
	limitsTenants = []string{"h/t1", "h/t2"}
	limitsUsers   = map[string][]string{"h/t1": {"h/t1/u1", "h/t1/u2"}, "h/t2": {"h/t2/u1", "h/t2/u2"}}
)

// TestLimitsChaos has 16 clients take, reserve, settle and reserve_all
// over fast rate limits, each call in a transaction of its own that one
// time in five rolls back, while a killer terminates one of their backends
// every 100-300 ms. Each call logs its decisions in its own transaction,
// with the server's clock readings, so the log holds exactly the
// committed decisions: a rolled-back or cut-off spend leaves nothing.
// The history checker (history.CheckLimits) then checks that over every
// span the net tokens spent of each key (takes, settled actuals, and the
// amounts of reservations still live: a reservation gives back amount -
// actual at its settle, or its whole amount at its expiry when never
// settled) never exceed burst + elapsed / emission, that settles settle
// only before the expiry and once, and replays the single keys' decisions
// and expiries exactly, to the microsecond, against the server's final
// state. The clients check that nothing allowed is lost: every call they
// saw commit is in the log, none they saw roll back is, and a settle is
// settled exactly when it decided before the reservation's expiry on the
// server's clock.
func TestLimitsChaos(t *testing.T) {
	dur := envDuration(t, EnvLimitsDuration, 10*time.Second)
	url := pgtest.NewMigrated(t)
	pool := openPool(t, url, limitsConns, limitsApp, map[string]string{"synchronous_commit": "off"})
	admin := openPool(t, url, 1, "pglease-proof-killer")
	setup := context.Background()
	for _, q := range []string{
		`CREATE TABLE proof_limit_log (op bigint NOT NULL, key text NOT NULL, delta integer NOT NULL,
			allowed boolean NOT NULL, lo timestamptz NOT NULL, hi timestamptz NOT NULL,
			reservation bigint NOT NULL DEFAULT 0, expires timestamptz, settle boolean NOT NULL DEFAULT false)`,
		`SELECT pglease.limit_set('g/', 50, '1 second', 8)`,
		`SELECT pglease.limit_set('h', 60, '1 second', 12)`,
		`SELECT pglease.limit_set('h/', 30, '1 second', 6)`,
	} {
		if _, err := admin.Exec(setup, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var (
		wg    sync.WaitGroup
		opSeq atomic.Int64
		stats = make([]limitsStats, limitsClients)
	)
	for i := range limitsClients {
		c := &limitsClient{pool: pool, ops: &opSeq, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i)))}
		wg.Go(func() { c.run(ctx, &stats[i]) })
	}
	var killed int64
	wg.Go(func() {
		rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 51))
		for ctx.Err() == nil {
			sleep(ctx, stressKillMin+time.Duration(rng.Int64N(int64(stressKillMax-stressKillMin))))
			var n int64
			if admin.QueryRow(ctx, `
				SELECT count(pg_terminate_backend(pid)) FROM (
					SELECT pid FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = $1
					ORDER BY random() LIMIT 1) AS victim`, limitsApp).Scan(&n) == nil {
				killed += n
			}
		}
	})
	wg.Wait()

	var total limitsStats
	for _, s := range stats {
		total.add(s)
	}
	read := context.Background()
	logged := map[int64]bool{}
	var events []history.LimitEvent
	rows, err := admin.Query(read, `SELECT op, key, delta, allowed, lo, hi, reservation, expires, settle FROM proof_limit_log`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var (
			e       history.LimitEvent
			expires *time.Time
		)
		if err := rows.Scan(&e.Op, &e.Key, &e.Delta, &e.Allowed, &e.Lo, &e.Hi, &e.Reservation, &expires, &e.Settle); err != nil {
			t.Fatal(err)
		}
		if expires != nil {
			e.Expires = *expires
		}
		events = append(events, e)
		logged[e.Op] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Each key's state as peek reports it: what the log's calls left, and
	// the reservations expired since given back.
	limits := map[string]history.Limit{}
	final := map[string]history.LimitFinal{}
	rows, err = admin.Query(read, `
		SELECT k.key, l.emission_us, l.burst, p.decided_at, p.decided_at + p.reset_in
		FROM (SELECT DISTINCT key FROM proof_limit_log) AS k
		CROSS JOIN LATERAL pglease._limit_find(k.key) AS l
		CROSS JOIN LATERAL pglease.peek(k.key) AS p`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var (
			key   string
			emit  int64
			burst int
			f     history.LimitFinal
		)
		if err := rows.Scan(&key, &emit, &burst, &f.At, &f.Tat); err != nil {
			t.Fatal(err)
		}
		limits[key] = history.Limit{Emission: time.Duration(emit) * time.Microsecond, Burst: burst}
		final[key] = f
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	rep := history.CheckLimits(events, limits, final)
	var lost []history.Violation
	for _, s := range stats {
		for _, op := range s.committed {
			if !logged[op] {
				lost = append(lost, history.Violation{Rule: "limit-lost", Detail: fmt.Sprintf("op %d committed but is not in the log", op)})
			}
		}
		for _, op := range s.rolledBack {
			if logged[op] {
				lost = append(lost, history.Violation{Rule: "limit-lost", Detail: fmt.Sprintf("op %d rolled back but is in the log", op)})
			}
		}
		lost = append(lost, s.violations...)
	}
	t.Logf("limits: %d clients on %d connections, %s, %d backends terminated", limitsClients, limitsConns, dur, killed)
	t.Logf("limits: %s", total)
	t.Logf("history: %s (checked in %s)", rep.Summary(), time.Since(start).Round(time.Millisecond))
	failViolations(t, "limits history", rep.Violations)
	failViolations(t, "limits clients", lost)
	if total.allowed < 200 || total.refused < 50 || total.settled < 20 || total.late < 1 || total.all < 20 ||
		total.nRolledBack < 20 || total.unknown < 5 || killed < 10 {
		t.Errorf("too little happened to prove much: %s; %d backends terminated", total, killed)
	}
}

// limitsStats counts what one client did, and what it knows of each call.
type limitsStats struct {
	allowed, refused, settled, late, all, nRolledBack, unknown int
	committed, rolledBack                                      []int64
	violations                                                 []history.Violation
}

func (s *limitsStats) add(o limitsStats) {
	s.allowed += o.allowed
	s.refused += o.refused
	s.settled += o.settled
	s.late += o.late
	s.all += o.all
	s.nRolledBack += len(o.rolledBack)
	s.unknown += o.unknown
}

func (s limitsStats) String() string {
	return fmt.Sprintf("%d spends allowed and committed, %d refused, %d settles settled, %d settles after the expiry (false, 0), "+
		"%d reserve_all committed, %d transactions rolled back on purpose, %d outcomes unknown (backend killed)",
		s.allowed, s.refused, s.settled, s.late, s.all, s.nRolledBack, s.unknown)
}

// limitsReservation is a reservation a client saw commit.
type limitsReservation struct {
	key     string // the key to settle it with
	id      int64
	amount  int
	expires time.Time
}

// limitsClient makes one call at a time, each in a transaction of its own.
type limitsClient struct {
	pool  *pgxpool.Pool
	ops   *atomic.Int64
	rng   *rand.Rand
	open  []limitsReservation
	stats *limitsStats
}

func (c *limitsClient) run(ctx context.Context, st *limitsStats) {
	c.stats = st
	for ctx.Err() == nil {
		switch n := c.rng.IntN(10); {
		case n < 4:
			c.take()
		case n < 6:
			c.reserve()
		case n < 8 && len(c.open) > 0:
			c.settle()
		default:
			c.reserveAll()
		}
	}
}

// txOutcome is what a client knows of its transaction.
type txOutcome int

const (
	txCommitted  txOutcome = iota
	txRolledBack           // rolled back: certainly nothing of it stays
	txUnknown              // an error (a killed backend): committed or not
)

// tx runs fn in a transaction of its own and commits it, or one time in
// limitsRollback rolls it back; op goes to the client's committed or
// rolled-back list, or nowhere when the outcome is unknown (an error: a
// killed backend, at any point, the COMMIT included).
func (c *limitsClient) tx(op int64, fn func(ctx context.Context, tx pgx.Tx) error) txOutcome {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		c.stats.unknown++
		return txUnknown
	}
	if err := fn(ctx, tx); err != nil {
		if errors.Is(err, errNothing) && tx.Rollback(ctx) == nil {
			return txRolledBack
		}
		_ = tx.Rollback(ctx)
		c.stats.unknown++
		return txUnknown
	}
	if c.rng.IntN(limitsRollback) == 0 {
		if tx.Rollback(ctx) != nil {
			c.stats.unknown++
			return txUnknown
		}
		c.stats.rolledBack = append(c.stats.rolledBack, op)
		return txRolledBack
	}
	if tx.Commit(ctx) != nil {
		c.stats.unknown++
		return txUnknown
	}
	c.stats.committed = append(c.stats.committed, op)
	return txCommitted
}

// errNothing: the call logged nothing (a reserve_all refused, a settle of
// nothing); its transaction is rolled back and not counted.
var errNothing = errors.New("nothing logged")

func (c *limitsClient) key() string { return limitsSingle[c.rng.IntN(len(limitsSingle))] }

func (c *limitsClient) take() {
	op := c.ops.Add(1)
	var allowed bool
	if c.tx(op, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
			WITH t AS (SELECT * FROM pglease.take($2, $3))
			INSERT INTO proof_limit_log SELECT $1, $2, $3, t.allowed, t.decided_at, t.decided_at FROM t
			RETURNING allowed`, op, c.key(), 1+c.rng.IntN(3)).Scan(&allowed)
	}) == txCommitted {
		c.count(allowed)
	}
}

func (c *limitsClient) count(allowed bool) {
	if allowed {
		c.stats.allowed++
	} else {
		c.stats.refused++
	}
}

// ttl is a reservation's: 50-400 ms, so that some settles come late.
func (c *limitsClient) ttl() time.Duration {
	return 50*time.Millisecond + time.Duration(c.rng.Int64N(int64(350*time.Millisecond)))
}

func (c *limitsClient) reserve() {
	op := c.ops.Add(1)
	key, amount := c.key(), 1+c.rng.IntN(4)
	var (
		ok      bool
		id      *int64
		expires *time.Time
	)
	if c.tx(op, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
			WITH r AS (SELECT * FROM pglease.reserve($2, $3, $4)),
			     w AS (INSERT INTO proof_limit_log
			           SELECT $1, $2, $3, r.reserved, r.decided_at, r.decided_at, coalesce(r.reservation, 0), r.expires_at FROM r)
			SELECT reserved, reservation, expires_at FROM r`,
			op, key, amount, c.ttl()).Scan(&ok, &id, &expires)
	}) == txCommitted {
		c.count(ok)
		if ok {
			c.open = append(c.open, limitsReservation{key: key, id: *id, amount: amount, expires: *expires})
		}
	}
}

func (c *limitsClient) reserveAll() {
	op := c.ops.Add(1)
	tenant := limitsTenants[c.rng.IntN(len(limitsTenants))]
	user := limitsUsers[tenant][c.rng.IntN(2)]
	keys := []string{user, tenant, limitsPool}
	amount := 1 + c.rng.IntN(3)
	var (
		id      int64
		expires time.Time
	)
	if c.tx(op, func(ctx context.Context, tx pgx.Tx) error {
		// The user's key, taken first, decided at decided_at; the others
		// between it and the clock read after the call.
		err := tx.QueryRow(ctx, `
			WITH r AS (SELECT * FROM pglease.reserve_all($2, $3, $4)),
			     w AS (INSERT INTO proof_limit_log
			           SELECT $1, k, $3, true, r.decided_at,
			                  CASE WHEN k = ($2::text[])[1] THEN r.decided_at ELSE clock_timestamp() END,
			                  r.reservation, r.expires_at
			           FROM r, unnest($2::text[]) AS k WHERE r.reserved)
			SELECT reservation, expires_at FROM r WHERE reserved`,
			op, keys, amount, c.ttl()).Scan(&id, &expires)
		if errors.Is(err, pgx.ErrNoRows) {
			c.stats.refused++
			return errNothing
		}
		return err
	}) == txCommitted {
		c.stats.all++
		c.stats.allowed++
		// Settled through any of its keys.
		c.open = append(c.open, limitsReservation{key: keys[c.rng.IntN(3)], id: id, amount: amount, expires: expires})
	}
}

func (c *limitsClient) settle() {
	// Mostly the newest, so that most settles come in time.
	i := len(c.open) - 1
	if c.rng.IntN(4) == 0 {
		i = c.rng.IntN(len(c.open))
	}
	r := c.open[i]
	op := c.ops.Add(1)
	actual := c.rng.IntN(r.amount + 1)
	var (
		settled  bool
		refunded int
		at       time.Time
	)
	// Half the settles wait a little first, so that some come after the
	// reservation's expiry.
	if c.rng.IntN(2) == 0 {
		time.Sleep(time.Duration(c.rng.Int64N(int64(100 * time.Millisecond))))
	}
	outcome := c.tx(op, func(ctx context.Context, tx pgx.Tx) error {
		// One settle event per key of the reservation, at the settle's
		// one clock reading, when it settled (refunded 0 included: the
		// reservation then never comes back at its expiry).
		return tx.QueryRow(ctx, `
			WITH s AS (SELECT * FROM pglease.settle($2, $3, $4)),
			     w AS (INSERT INTO proof_limit_log
			           SELECT $1, k.key, -s.refunded, true, s.decided_at, s.decided_at, $3, NULL, true
			           FROM s, pglease.limit_reservations AS k
			           WHERE k.id = $3 AND s.settled)
			SELECT settled, refunded, decided_at FROM s`, op, r.key, r.id, actual).Scan(&settled, &refunded, &at)
	})
	if outcome == txRolledBack {
		return // settle it again later
	}
	c.open = append(c.open[:i], c.open[i+1:]...)
	if outcome == txUnknown {
		return // settled or not: its answer is unknown
	}
	if !settled {
		// Refused: nothing logged (committed, but no event).
		c.stats.committed = c.stats.committed[:len(c.stats.committed)-1]
	}
	if settled != at.Before(r.expires) || (settled && refunded != r.amount-actual) || (!settled && refunded != 0) {
		c.stats.violations = append(c.stats.violations, history.Violation{Rule: "limit-settle",
			Detail: fmt.Sprintf("settle of reservation %d (%d tokens, expiring %s) at %d, decided at %s: got settled=%v refunded=%d",
				r.id, r.amount, r.expires.Format(time.RFC3339Nano), actual, at.Format(time.RFC3339Nano), settled, refunded)})
	}
	if settled {
		c.stats.settled++
	} else {
		c.stats.late++
	}
}
