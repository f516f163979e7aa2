package pgleaseadmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// TestErrors: bad arguments are refused before any round trip, a missing
// schema is ErrNotMigrated with a hint, and each error says "pglease:"
// once.
func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bare := pgtest.Pool(t, pgtest.NewDatabase(t))
	for _, tc := range []struct {
		name string
		call func() error
		is   error
		want string
	}{
		{"Leases", func() error { _, err := pgleaseadmin.Leases(ctx, bare); return err }, pglease.ErrNotMigrated, "apply the migrations"},
		{"Slots", func() error { _, err := pgleaseadmin.Slots(ctx, bare); return err }, pglease.ErrNotMigrated, "apply the migrations"},
		{"Scopes", func() error { _, err := pgleaseadmin.Scopes(ctx, bare); return err }, pglease.ErrNotMigrated, "apply the migrations"},
		{"Purge", func() error { _, err := pgleaseadmin.Purge(ctx, bare, time.Hour); return err }, pglease.ErrNotMigrated, "apply the migrations"},
		{"ForceRelease", func() error { _, err := pgleaseadmin.ForceRelease(ctx, bare, "x"); return err }, pglease.ErrNotMigrated, "apply the migrations"},
		{"Purge negative", func() error { _, err := pgleaseadmin.Purge(ctx, bare, -time.Second); return err },
			pglease.ErrInvalidArgument, "freeFor must not be negative"},
		{"ForceRelease empty name", func() error { _, err := pgleaseadmin.ForceRelease(ctx, bare, ""); return err },
			pglease.ErrInvalidArgument, "name must be 1 to 256 bytes"},
		{"PartitionOf empty key", func() error { _, err := pgleaseadmin.PartitionOf(ctx, bare, ""); return err },
			pglease.ErrInvalidArgument, "key must be 1 to 256 bytes"},
	} {
		err := tc.call()
		if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v, want an error matching %v saying %q", tc.name, err, tc.is, tc.want)
			continue
		}
		if n := strings.Count(err.Error(), "pglease:"); n != 1 {
			t.Errorf("%s = %q: says %q %d times, want once", tc.name, err, "pglease:", n)
		}
	}
}

// TestPartitionOfPlainDatabase: a database that is not a proxy has no
// partitions, and says so.
func TestPartitionOfPlainDatabase(t *testing.T) {
	t.Parallel()
	_, err := pgleaseadmin.PartitionOf(context.Background(), pgtest.NewPool(t), "x")
	if err == nil || !strings.Contains(err.Error(), "is this a pglease proxy database") {
		t.Fatalf("PartitionOf on a plain database = %v, want an error asking whether it is a proxy", err)
	}
}
