package pgleaseadmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
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
		{"ForceRelease", func() error { _, _, err := pgleaseadmin.ForceRelease(ctx, bare, "x"); return err }, pglease.ErrNotMigrated, "apply the migrations"},
		{"Purge negative", func() error { _, err := pgleaseadmin.Purge(ctx, bare, -time.Second); return err },
			pglease.ErrInvalidArgument, "freeFor must not be negative"},
		{"ForceRelease empty name", func() error { _, _, err := pgleaseadmin.ForceRelease(ctx, bare, ""); return err },
			pglease.ErrInvalidArgument, "name must be 1 to 256 bytes"},
		{"PartitionOf empty key", func() error { _, err := pgleaseadmin.PartitionOf(ctx, bare, ""); return err },
			pglease.ErrInvalidArgument, "key must be 1 to 256 bytes"},
		{"ReadMetrics", func() error { _, err := pgleaseadmin.ReadMetrics(ctx, bare, pgleaseadmin.Filter{}); return err },
			pglease.ErrNotMigrated, "apply the migrations"},
		{"ReadMetrics long Names", func() error {
			_, err := pgleaseadmin.ReadMetrics(ctx, bare, pgleaseadmin.Filter{Names: strings.Repeat("x", 1025)})
			return err
		}, pglease.ErrInvalidArgument, "Names must be at most 1024 bytes"},
		{"ReadMetrics MaxNames", func() error {
			_, err := pgleaseadmin.ReadMetrics(ctx, bare, pgleaseadmin.Filter{MaxNames: 1_000_001})
			return err
		}, pglease.ErrInvalidArgument, "MaxNames must be at most 1000000"},
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

// TestReadMetrics reads a lease and a scope, the cap and its count of
// what was dropped, and the server's refusal of a bad expression.
func TestReadMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	c, err := pglease.New(pool, pglease.Config{Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"m/a", "m/b", "m/c"} {
		l, err := c.TryAcquire(ctx, name, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if name == "m/c" {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	m, err := pgleaseadmin.ReadMetrics(ctx, pool, pgleaseadmin.Filter{Names: "^m/", MaxNames: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Leases) != 2 || m.Leases[0].Name != "m/a" || !m.Leases[0].Held || m.Leases[0].Fence != 1 ||
		m.Leases[0].Expiry <= 50*time.Second || m.Leases[0].Expiry > time.Minute || m.LeasesDropped != 1 {
		t.Fatalf("ReadMetrics(^m/, 2): got %+v, %d dropped; want m/a and m/b held for about a minute, 1 dropped", m.Leases, m.LeasesDropped)
	}
	if m.LeaseStates != (pgleaseadmin.StateCounts{Held: 2, Free: 1}) || m.Version == "" || len(m.Tables) != 19 ||
		m.Tables[0].Name != "leases" || m.Tables[0].Rows != 3 || m.Tables[0].Bytes <= 0 {
		t.Fatalf("ReadMetrics: states %+v, version %q, tables %+v; want 2 held and 1 free, a version, 19 tables with leases first (3 rows)",
			m.LeaseStates, m.Version, m.Tables)
	}
	all, err := pgleaseadmin.ReadMetrics(ctx, pool, pgleaseadmin.Filter{MaxNames: -1})
	if err != nil || len(all.Leases) != 0 || all.LeasesDropped != 3 || all.LeaseStates.Held != 2 {
		t.Fatalf("ReadMetrics(MaxNames -1): got %d leases, %d dropped, states %+v (%v); want totals only, every name dropped",
			len(all.Leases), all.LeasesDropped, all.LeaseStates, err)
	}
	_, err = pgleaseadmin.ReadMetrics(ctx, pool, pgleaseadmin.Filter{Names: "("})
	if !errors.Is(err, pglease.ErrInvalidArgument) || !strings.Contains(err.Error(), "not a valid regular expression") {
		t.Fatalf("ReadMetrics with Names %q: got %v, want ErrInvalidArgument saying it is not a valid regular expression", "(", err)
	}
}
