package runslots_test

import (
	"context"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/runslots"
)

// TestRunPurges checks that Run purges in the background while fn runs: a
// slot scope free for two days is gone, and its fences raised the floor.
func TestRunPurges(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := pool.Exec(ctx, `
		INSERT INTO pglease.slot_scopes (scope) VALUES ('old');
		INSERT INTO pglease.slots (scope, slot, holder, fence, acquired_at, expires_at)
		VALUES ('old', 1, NULL, 5, now() - interval '3 days', now() - interval '2 days'),
		       ('old', 2, NULL, 9, now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	logger, removed := pgtest.LogSignal("removed")
	c, err := runslots.New(pool, runslots.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	err = claimRun(ctx, c, "new", 1, 5*time.Second, func(ctx context.Context) error {
		select {
		case n := <-removed:
			if n != 3 {
				t.Errorf("the background purge removed %d rows, want 3 (two slots and their scope)", n)
			}
		case <-ctx.Done():
			t.Error("Run did not purge while fn ran")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var scopes []string
	rows, err := pool.Query(ctx, `SELECT scope FROM pglease.slot_scopes ORDER BY scope`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		scopes = append(scopes, s)
	}
	if rows.Err() != nil || len(scopes) != 1 || scopes[0] != "new" {
		t.Fatalf("scopes after the purge: %q (%v), want only Run's own, new", scopes, rows.Err())
	}
	s, err := c.TryClaim(ctx, runslots.Want{Scope: "old", Capacity: 1}, time.Minute)
	if err != nil || s.Fence() != 10 {
		t.Fatalf("claim of the purged scope: %v, fence %d; want fence 10, above every purged fence", err, fenceOf(s))
	}
}

func fenceOf(s *runslots.Slot) int64 {
	if s == nil {
		return 0
	}
	return s.Fence()
}
