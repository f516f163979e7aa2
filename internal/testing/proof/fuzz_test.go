//go:build proof

package proof

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/runslots"
)

// Documented SQLSTATEs of the pglease functions, and the one Postgres
// raises itself for text it cannot store.
const (
	codeNull     = "22004" // NULL argument
	codeInvalid  = "22023" // argument out of range
	codeNotHeld  = "PGL01" // assert_held: fence not current
	codeEncoding = "22021" // invalid byte sequence (NUL, invalid UTF-8): raised before the function runs
)

// fuzzer is one fuzz target's database and what it saw.
type fuzzer struct {
	pool *pgxpool.Pool

	mu    sync.Mutex
	codes map[string]int
}

// newFuzzer gives a fuzz target a migrated database of its own (one per
// fuzzing worker process).
func newFuzzer(f *testing.F) *fuzzer {
	url := pgtest.NewMigrated(f)
	z := &fuzzer{pool: openPool(f, url, 4, "pglease-proof-fuzz"), codes: map[string]int{}}
	f.Cleanup(func() {
		z.mu.Lock()
		defer z.mu.Unlock()
		if len(z.codes) > 0 { // empty in the coordinator of -fuzz: its workers run the inputs
			f.Logf("errors seen, by SQLSTATE (client: rejected before any round trip, or a refusal): %v", z.codes)
		}
	})
	return z
}

// snapshot returns a digest of every pglease table.
func (z *fuzzer) snapshot(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	var s string
	err := z.pool.QueryRow(ctx, `SELECT concat_ws('/',
		(SELECT md5(coalesce(string_agg(l::text, ',' ORDER BY l.name), '')) FROM pglease.leases AS l),
		(SELECT md5(coalesce(string_agg(s::text, ',' ORDER BY s.scope, s.slot), '')) FROM pglease.slots AS s),
		(SELECT md5(coalesce(string_agg(c::text, ',' ORDER BY c.scope), '')) FROM pglease.slot_scopes AS c))`).Scan(&s)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s
}

// call runs fn and checks its error: nil, a domain refusal, a client-side
// ErrInvalidArgument, or a server error with a documented SQLSTATE (or
// 22021 for text Postgres cannot hold). On an error the tables must be
// unchanged. refusals lists the domain errors fn may return.
func (z *fuzzer) call(t *testing.T, what string, fn func(ctx context.Context) error, refusals ...error) error {
	t.Helper()
	before := z.snapshot(t)
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	err := fn(ctx)
	if err == nil {
		return nil
	}
	code := "client"
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		code = pgErr.Code
	}
	z.mu.Lock()
	z.codes[code]++
	z.mu.Unlock()
	switch {
	case code == codeNull || code == codeInvalid || code == codeNotHeld || code == codeEncoding:
	case code == "client" && errors.Is(err, pglease.ErrInvalidArgument):
	case code == "client" && isAny(err, refusals):
	default:
		t.Fatalf("%s: unexpected error (SQLSTATE %s): %v", what, code, err)
	}
	if strings.Contains(err.Error(), "panic") {
		t.Fatalf("%s: %v", what, err)
	}
	if after := z.snapshot(t); after != before && !isAny(err, refusals) {
		t.Fatalf("%s failed (%v) but changed the tables", what, err)
	}
	return err
}

func isAny(err error, targets []error) bool {
	for _, target := range targets {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// rawErr runs one SQL call and returns its error (rows discarded).
func rawErr(ctx context.Context, db interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) error {
	_, err := db.Exec(ctx, sql, args...)
	return err
}

// textSeeds are edge cases for names, holders and scopes.
var textSeeds = []string{
	"", "a", strings.Repeat("n", 256), strings.Repeat("n", 257),
	strings.Repeat("é", 128), strings.Repeat("é", 129), // 256 and 258 bytes
	"a\x00b", "\x00", "\xff\xfe", "caf\xc3", "ok 🔒", " ", "'; DROP TABLE pglease.leases; --",
}

// ttlSeeds are edge cases for TTLs, in nanoseconds.
var ttlSeeds = []int64{0, -1, 1, 999, int64(time.Microsecond), int64(time.Second), int64(24 * time.Hour),
	int64(24*time.Hour + time.Microsecond), math.MaxInt64, math.MinInt64}

// FuzzAcquire: the lease client and pglease.acquire, renew, release and
// assert_held over any name, holder and TTL.
func FuzzAcquire(f *testing.F) {
	for i, s := range textSeeds {
		f.Add(s, "holder", ttlSeeds[i%len(ttlSeeds)])
		f.Add("lease", s, int64(time.Second))
	}
	for _, ttl := range ttlSeeds {
		f.Add("lease", "holder", ttl)
	}
	z := newFuzzer(f)
	f.Fuzz(func(t *testing.T, name, holder string, ttlNanos int64) {
		ttl := time.Duration(ttlNanos)
		c, err := pglease.New(z.pool, pglease.Config{Holder: holder})
		if err != nil {
			if !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Fatalf("New: %v", err)
			}
			c, _ = pglease.New(z.pool, pglease.Config{Holder: "fuzz"})
		}
		var l *pglease.Lease
		z.call(t, "TryAcquire", func(ctx context.Context) (err error) {
			l, err = c.TryAcquire(ctx, name, ttl)
			return err
		}, pglease.ErrLeaseHeld)
		if l != nil {
			z.call(t, "Renew", l.Renew, pglease.ErrLeaseLost)
			z.call(t, "WithFence", func(ctx context.Context) error {
				return pglease.WithFence(ctx, z.pool, l.Name(), l.Fence(), func(pgx.Tx) error { return nil })
			})
			z.call(t, "Release", l.Release, pglease.ErrLeaseLost)
		}
		z.call(t, "pglease.acquire", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.acquire($1, $2, $3)`, name, holder, ttl)
		})
	})
}

// FuzzFenced: pglease.renew, release, assert_held and force_release, and
// the package function WithFence, over any name, holder, fence and TTL.
func FuzzFenced(f *testing.F) {
	for i, s := range textSeeds {
		f.Add(s, "holder", int64(i), ttlSeeds[i%len(ttlSeeds)])
	}
	for _, fence := range []int64{0, 1, -1, math.MaxInt64, math.MinInt64} {
		f.Add("lease", "holder", fence, int64(time.Second))
	}
	z := newFuzzer(f)
	f.Fuzz(func(t *testing.T, name, holder string, fence, ttlNanos int64) {
		ttl := time.Duration(ttlNanos)
		z.call(t, "pglease.renew", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.renew($1, $2, $3, $4)`, name, holder, fence, ttl)
		})
		z.call(t, "pglease.release", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.release($1, $2, $3)`, name, holder, fence)
		})
		z.call(t, "pglease.assert_held", func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, z.pool, func(tx pgx.Tx) error {
				return rawErr(ctx, tx, `SELECT pglease.assert_held($1, $2)`, name, fence)
			})
		})
		z.call(t, "WithFence", func(ctx context.Context) error {
			return pglease.WithFence(ctx, z.pool, name, fence, func(pgx.Tx) error { return nil })
		}, pglease.ErrLeaseLost)
		z.call(t, "pglease.force_release", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.force_release($1)`, name)
		})
		z.call(t, "pglease.renew_holder", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.renew_holder($1, $2)`, holder, ttl)
		})
	})
}

// FuzzInterval: TTLs the Go clients cannot express (months and days, as
// well as microseconds) through every SQL function that takes one.
func FuzzInterval(f *testing.F) {
	for _, s := range [][3]int64{{0, 0, 0}, {0, 0, 1}, {0, 0, -1}, {0, 1, 0}, {0, 1, 1}, {1, 0, 0}, {-1, 31, 0},
		{0, 0, math.MaxInt64}, {math.MaxInt32, math.MaxInt32, math.MaxInt64}, {math.MinInt32, math.MinInt32, math.MinInt64},
		{0, -1, int64(25 * time.Hour / time.Microsecond)}} {
		f.Add(int32(s[0]), int32(s[1]), s[2])
	}
	z := newFuzzer(f)
	f.Fuzz(func(t *testing.T, months, days int32, micros int64) {
		iv := pgtype.Interval{Months: months, Days: days, Microseconds: micros, Valid: true}
		for _, q := range []struct{ what, sql string }{
			{"pglease.acquire", `SELECT * FROM pglease.acquire('iv', 'h', $1)`},
			{"pglease.renew", `SELECT * FROM pglease.renew('iv', 'h', 1, $1)`},
			{"pglease.claim_slot", `SELECT * FROM pglease.claim_slot('iv', 'h', 2, $1)`},
			{"pglease.claim_slots", `SELECT * FROM pglease.claim_slots('h2', '{iv2}', '{2}', $1)`},
			{"pglease.renew_slot", `SELECT * FROM pglease.renew_slot('iv', 1, 'h', 1, $1)`},
			{"pglease.renew_holder", `SELECT * FROM pglease.renew_holder('h', $1)`},
		} {
			z.call(t, q.what, func(ctx context.Context) error { return rawErr(ctx, z.pool, q.sql, iv) })
		}
	})
}

// FuzzClaimSlot: the slot client and pglease.claim_slot, renew_slot and
// release_slot over any scope, holder, capacity, slot, fence and TTL.
func FuzzClaimSlot(f *testing.F) {
	for i, s := range textSeeds {
		f.Add(s, "holder", int64(2), int32(1), int64(1), ttlSeeds[i%len(ttlSeeds)])
		f.Add("scope", s, int64(2), int32(1), int64(1), int64(time.Second))
	}
	for _, n := range []int64{0, -1, 1, 1_000_000, 1_000_001, math.MaxInt32, math.MaxInt32 + 1, math.MinInt64} {
		f.Add("scope", "holder", n, int32(n), n, int64(time.Second))
	}
	z := newFuzzer(f)
	f.Fuzz(func(t *testing.T, scope, holder string, capacity int64, slot int32, fence, ttlNanos int64) {
		ttl := time.Duration(ttlNanos)
		c, err := runslots.New(z.pool, runslots.Config{Holder: holder, Logger: quiet})
		if err != nil {
			if !errors.Is(err, pglease.ErrInvalidArgument) {
				t.Fatalf("New: %v", err)
			}
			c, _ = runslots.New(z.pool, runslots.Config{Holder: "fuzz", Logger: quiet})
		}
		var s *runslots.Slot
		z.call(t, "TryClaim", func(ctx context.Context) (err error) {
			s, err = c.TryClaim(ctx, runslots.Want{Scope: scope, Capacity: int(capacity)}, ttl)
			return err
		}, runslots.ErrFull)
		if s != nil {
			z.call(t, "Slot.Renew", s.Renew, runslots.ErrSlotLost)
			z.call(t, "Slot.Release", s.Release, runslots.ErrSlotLost)
		}
		capacity32 := int32(capacity)
		z.call(t, "pglease.claim_slot", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.claim_slot($1, $2, $3, $4)`, scope, holder, capacity32, ttl)
		})
		z.call(t, "pglease.renew_slot", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.renew_slot($1, $2, $3, $4, $5)`, scope, slot, holder, fence, ttl)
		})
		z.call(t, "pglease.release_slot", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.release_slot($1, $2, $3, $4)`, scope, slot, holder, fence)
		})
	})
}

// FuzzClaimSlots: TryClaimAll and pglease.claim_slots over any list of
// scopes (split on ','; "<null>" is a NULL element) and capacities (one
// per byte, signed, scaled), including NULL elements, lengths that differ,
// empty and over-long lists, and repeated scopes.
func FuzzClaimSlots(f *testing.F) {
	f.Add("h", "a,b", []byte{2, 3}, int64(time.Second))
	f.Add("h", "a,a", []byte{2, 2}, int64(time.Second))
	f.Add("h", "", []byte{}, int64(time.Second))
	f.Add("h", "a,<null>", []byte{2, 2}, int64(time.Second))
	f.Add("h", "a,b", []byte{2}, int64(time.Second))
	f.Add("h", "a", []byte{0x80}, int64(time.Second))
	f.Add("", "a", []byte{1}, int64(0))
	f.Add("h", strings.Repeat("s,", 64)+"s", []byte(strings.Repeat("\x01", 65)), int64(time.Second))
	f.Add("h", "a\x00,b", []byte{1, 1}, int64(time.Second))
	z := newFuzzer(f)
	f.Fuzz(func(t *testing.T, holder, scopes string, caps []byte, ttlNanos int64) {
		ttl := time.Duration(ttlNanos)
		var names []*string
		if scopes != "" {
			for _, s := range strings.Split(scopes, ",") {
				if s == "<null>" {
					names = append(names, nil)
				} else {
					names = append(names, &s)
				}
			}
		}
		capacities := make([]*int32, len(caps))
		for i, b := range caps {
			v := int32(int8(b))
			if b == 0xff {
				capacities[i] = nil
				continue
			}
			if b&0x40 != 0 {
				v *= 100_000
			}
			capacities[i] = &v
		}
		z.call(t, "pglease.claim_slots", func(ctx context.Context) error {
			return rawErr(ctx, z.pool, `SELECT * FROM pglease.claim_slots($1, $2, $3, $4)`, holder, names, capacities, ttl)
		})
		c, err := runslots.New(z.pool, runslots.Config{Holder: "fuzz-all", Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var wants []runslots.Want
		for i, n := range names {
			w := runslots.Want{}
			if n != nil {
				w.Scope = *n
			}
			if i < len(capacities) && capacities[i] != nil {
				w.Capacity = int(*capacities[i])
			}
			wants = append(wants, w)
		}
		var slots []*runslots.Slot
		z.call(t, "TryClaimAll", func(ctx context.Context) (err error) {
			slots, err = c.TryClaimAll(ctx, wants, ttl)
			return err
		}, runslots.ErrFull)
		for _, s := range slots {
			z.call(t, "Slot.Release", s.Release, runslots.ErrSlotLost)
		}
	})
}
