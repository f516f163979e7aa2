package pgleaseadmin_test

import (
	"errors"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// TestArchiveHistory: with archiving on, a purge moves a tenure whose
// keep has passed to its month of pglease.tenures_archive, where Tenures
// still finds it; DropHistoryBefore drops months that are over, refuses a
// time to come, and a client role may do neither.
func TestArchiveHistory(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewMigrated(t)
	owner := pgtest.Pool(t, url)
	client := poolAs(t, url, newRole(t, "LOGIN PASSWORD 'archive-pw' IN ROLE pglease_operator"))

	if _, err := pgleaseadmin.EnableHistory(ctx, owner, "arch/", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, want := range []bool{false, true} { // the default, then what was set
		prev, err := pgleaseadmin.ArchiveHistory(ctx, owner, true)
		if err != nil || prev != want {
			t.Fatalf("ArchiveHistory(true) = %v, %v; want previous %v", prev, err, want)
		}
	}
	// A tenure that ended last month (its times moved back by hand).
	if _, err := owner.Exec(ctx, `SELECT pglease.release('arch/job', 'h', a.fence)
		FROM pglease.acquire('arch/job', 'h', interval '1 minute') AS a`); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Exec(ctx, `UPDATE pglease.tenures
		SET granted_at = date_trunc('month', now()) - interval '2 days',
		    ended_at = date_trunc('month', now()) - interval '1 day' WHERE name = 'arch/job'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pgleaseadmin.Purge(ctx, owner, time.Hour); err != nil {
		t.Fatal(err)
	}
	var archived int
	if err := owner.QueryRow(ctx, `SELECT count(*) FROM pglease.tenures_archive WHERE name = 'arch/job'`).Scan(&archived); err != nil || archived != 1 {
		t.Fatalf("archived tenures of arch/job = %d, %v; want 1", archived, err)
	}
	if got, err := pgleaseadmin.Tenures(ctx, owner, "arch/job", time.Time{}); err != nil || len(got) != 1 || got[0].Ended != "released" {
		t.Fatalf("Tenures(arch/job) after the move = %+v, %v; want the released tenure", got, err)
	}

	if _, err := pgleaseadmin.DropHistoryBefore(ctx, owner, time.Now().Add(time.Hour)); !errors.Is(err, pglease.ErrInvalidArgument) {
		t.Fatalf("DropHistoryBefore(an hour ahead) = %v, want ErrInvalidArgument", err)
	}
	if _, err := pgleaseadmin.ArchiveHistory(ctx, client, false); !errors.Is(err, pglease.ErrPermissionDenied) {
		t.Fatalf("ArchiveHistory as pglease_operator = %v, want ErrPermissionDenied", err)
	}
	if _, err := pgleaseadmin.DropHistoryBefore(ctx, client, time.Now()); !errors.Is(err, pglease.ErrPermissionDenied) {
		t.Fatalf("DropHistoryBefore as pglease_operator = %v, want ErrPermissionDenied", err)
	}
	if n, err := pgleaseadmin.DropHistoryBefore(ctx, owner, time.Now()); err != nil || n != 1 {
		t.Fatalf("DropHistoryBefore(now) = %d, %v; want last month dropped (1)", n, err)
	}
	if got, err := pgleaseadmin.Tenures(ctx, owner, "arch/job", time.Time{}); err != nil || len(got) != 0 {
		t.Fatalf("Tenures(arch/job) after the drop = %+v, %v; want none", got, err)
	}
}
