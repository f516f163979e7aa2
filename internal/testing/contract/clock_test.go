package contract

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// testServerClockPerCall checks that every call that sets an expiry reads the
// server clock when it runs: after two seconds inside a transaction, a
// 10-second TTL still leaves 10 seconds. With now() (the transaction start)
// about 8 would be left.
func testServerClockPerCall(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)

	mustAcquire(t, pool, n("renew"), "h", 10*time.Second, 1)
	mustClaimSlot(t, pool, n("renew-slot"), "h", 1, 10*time.Second, 1, 1)
	mustAcquire(t, pool, n("holder"), n("holder"), 10*time.Second, 1)

	cases := []struct {
		call   string // runs after pg_sleep(2) in the same transaction, on $1
		status string // reads expires_at and expires_in of $1 after commit
		arg    string
	}{
		{
			`SELECT acquired FROM pglease.acquire($1, 'h', '10 s')`,
			`SELECT expires_at, expires_in FROM pglease.lease_status WHERE name = $1`,
			n("acquire"),
		},
		{
			`SELECT renewed FROM pglease.renew($1, 'h', 1, '10 s')`,
			`SELECT expires_at, expires_in FROM pglease.lease_status WHERE name = $1`,
			n("renew"),
		},
		{
			`SELECT claimed FROM pglease.claim_slot($1, 'h', 1, '10 s')`,
			`SELECT expires_at, expires_in FROM pglease.slot_status WHERE scope = $1`,
			n("slot"),
		},
		{
			`SELECT claimed FROM pglease.claim_slots('h', ARRAY[$1], ARRAY[1], '10 s')`,
			`SELECT expires_at, expires_in FROM pglease.slot_status WHERE scope = $1`,
			n("slots"),
		},
		{
			`SELECT renewed FROM pglease.renew_slot($1, 1, 'h', 1, '10 s')`,
			`SELECT expires_at, expires_in FROM pglease.slot_status WHERE scope = $1`,
			n("renew-slot"),
		},
		{
			`SELECT cardinality(leases) = 1 FROM pglease.renew_holder($1, '10 s')`,
			`SELECT expires_at, expires_in FROM pglease.lease_status WHERE holder = $1`,
			n("holder"),
		},
	}

	// The cases run at the same time, so the test takes two seconds, not
	// twelve; each has its own connection and its own names.
	results := make([]clockResult, len(cases))
	errs := make([]error, len(cases))
	var wg sync.WaitGroup
	for i, tc := range cases {
		wg.Go(func() {
			results[i], errs[i] = sleepThenCall(ctx, pool, tc.call, tc.status, tc.arg)
		})
	}
	wg.Wait()

	for i, tc := range cases {
		if errs[i] != nil {
			t.Errorf("%s: %v", tc.call, errs[i])
			continue
		}
		r := results[i]
		// Exact: the call read the clock after the server clock said
		// before, so its expiry is at least before + 10s. With now() it
		// would be two seconds earlier.
		if got := r.expiresAt.Sub(r.before); got < 10*time.Second {
			t.Errorf("%s: expires_at - clock_timestamp() read just before the call: got %v, want at least 10s", tc.call, got)
		}
		// As seen right after commit; with now() about 8s would be left.
		// The margin allows for a loaded machine between commit and read.
		if r.left < 9500*time.Millisecond || r.left > 10*time.Second {
			t.Errorf("%s: expires_in right after commit: got %v, want about 10s (server clock per call, not now())",
				tc.call, r.left)
		}
		t.Logf("%s: expires_in right after commit: %v", tc.call, r.left)
	}
}

type clockResult struct {
	before    time.Time // server clock read in the transaction just before the call
	expiresAt time.Time
	left      time.Duration
}

func sleepThenCall(ctx context.Context, pool *pgxpool.Pool, call, status, arg string) (clockResult, error) {
	var r clockResult
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return r, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, `SELECT pg_sleep(2)`); err != nil {
		return r, err
	}
	if err := tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&r.before); err != nil {
		return r, err
	}
	var ok bool
	if err := tx.QueryRow(ctx, call, arg).Scan(&ok); err != nil {
		return r, err
	}
	if !ok {
		return r, fmt.Errorf("call returned false")
	}
	if err := tx.Commit(ctx); err != nil {
		return r, err
	}
	if err := conn.QueryRow(ctx, status, arg).Scan(&r.expiresAt, &r.left); err != nil {
		return r, err
	}
	return r, nil
}
