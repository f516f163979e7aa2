package pgleaseadmin_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	neturl "net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// newRole creates a role named after t with options (such as "LOGIN IN
// ROLE pglease_client"), dropped when the test ends, and returns its name.
// Call it before opening a pool as the role: cleanups run last first, so
// the pool is closed before the role is dropped.
func newRole(t *testing.T, options string) string {
	t.Helper()
	ctx := t.Context()
	admin, err := pgx.Connect(ctx, pgtest.AdminURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	role := fmt.Sprintf("pglease_admin_prefix_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` `+options); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), pgtest.AdminURL(t))
		if err != nil {
			t.Errorf("drop role %s: %v", role, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), `DROP ROLE `+role); err != nil {
			t.Errorf("drop role %s: %v", role, err)
		}
	})
	return role
}

// poolAs opens a pool on the database at url as role, a LOGIN role.
func poolAs(t *testing.T, url, role string) *pgxpool.Pool {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.UserPassword(role, "prefix-pw")
	return pgtest.Pool(t, u.String())
}

// TestPrefixRoundTrip binds a prefix, moves it to another role, reads it
// back through Prefixes, OwnerOf and Leases, and unbinds it.
func TestPrefixRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	billing, reports := newRole(t, "NOLOGIN"), newRole(t, "NOLOGIN")
	pool := pgtest.NewPool(t) // as the schema owner

	before := time.Now()
	if prev, err := pgleaseadmin.BindPrefix(ctx, pool, "billing/", billing); err != nil || prev != "" {
		t.Fatalf("BindPrefix(billing/, %s) = %q, %v; want \"\", nil", billing, prev, err)
	}
	if prev, err := pgleaseadmin.BindPrefix(ctx, pool, "billing/", reports); err != nil || prev != billing {
		t.Fatalf("BindPrefix(billing/, %s) again = %q, %v; want %q, nil", reports, prev, err, billing)
	}
	if _, err := pgleaseadmin.BindPrefix(ctx, pool, "a/", billing); err != nil {
		t.Fatal(err)
	}
	got, err := pgleaseadmin.Prefixes(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Prefix != "a/" || got[0].Role != billing || got[1].Prefix != "billing/" || got[1].Role != reports {
		t.Fatalf("Prefixes = %+v, want a/ of %s and billing/ of %s", got, billing, reports)
	}
	if at := got[1].BoundAt; at.Before(before.Add(-time.Minute)) || at.After(time.Now().Add(time.Minute)) {
		t.Fatalf("Prefixes: billing/ bound at %v, want about now", at)
	}

	for name, want := range map[string]string{"billing/nightly": reports, "a/b": billing, "shared": "", "billing": ""} {
		if owner, err := pgleaseadmin.OwnerOf(ctx, pool, name); err != nil || owner != want {
			t.Errorf("OwnerOf(%q) = %q, %v; want %q, nil", name, owner, err, want)
		}
	}

	// The schema owner is a superuser here, a member of every role.
	client, err := pglease.New(pool, pglease.Config{Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"billing/nightly", "shared"} {
		if _, err := client.TryAcquire(ctx, name, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	leases, err := pgleaseadmin.Leases(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(leases) != 2 || leases[0].Name != "billing/nightly" || leases[0].Owner != reports || leases[1].Owner != "" {
		t.Fatalf("Leases = %+v, want billing/nightly owned by %s and shared by nobody", leases, reports)
	}

	if prev, err := pgleaseadmin.UnbindPrefix(ctx, pool, "billing/"); err != nil || prev != reports {
		t.Fatalf("UnbindPrefix(billing/) = %q, %v; want %q, nil", prev, err, reports)
	}
	if prev, err := pgleaseadmin.UnbindPrefix(ctx, pool, "billing/"); err != nil || prev != "" {
		t.Fatalf("UnbindPrefix(billing/) again = %q, %v; want \"\", nil", prev, err)
	}
	if owner, err := pgleaseadmin.OwnerOf(ctx, pool, "billing/nightly"); err != nil || owner != "" {
		t.Fatalf("OwnerOf(billing/nightly) after unbind = %q, %v; want shared", owner, err)
	}
	if got, err := pgleaseadmin.Prefixes(ctx, pool); err != nil || len(got) != 1 || got[0].Prefix != "a/" {
		t.Fatalf("Prefixes after unbind = %+v, %v; want a/ alone", got, err)
	}
}

// TestPrefixErrors: bad arguments are refused before any round trip, an
// unknown role is named, a missing schema is ErrNotMigrated, and each
// error says "pglease:" once.
func TestPrefixErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.NewPool(t)
	bare := pgtest.Pool(t, pgtest.NewDatabase(t))
	for _, tc := range []struct {
		name string
		call func() error
		is   error
		want string
	}{
		{"BindPrefix unknown role", func() error {
			_, err := pgleaseadmin.BindPrefix(ctx, pool, "x/", "pglease_no_such_role")
			return err
		}, pgleaseadmin.ErrUnknownRole, "role pglease_no_such_role does not exist"},
		{"BindPrefix empty prefix", func() error { _, err := pgleaseadmin.BindPrefix(ctx, pool, "", "r"); return err },
			pglease.ErrInvalidArgument, "prefix must be 1 to 256 bytes"},
		{"BindPrefix empty role", func() error { _, err := pgleaseadmin.BindPrefix(ctx, pool, "x/", ""); return err },
			pglease.ErrInvalidArgument, "role must be 1 to 256 bytes"},
		{"UnbindPrefix long prefix", func() error {
			_, err := pgleaseadmin.UnbindPrefix(ctx, pool, strings.Repeat("x", 257))
			return err
		}, pglease.ErrInvalidArgument, "prefix must be 1 to 256 bytes"},
		{"OwnerOf empty name", func() error { _, err := pgleaseadmin.OwnerOf(ctx, pool, ""); return err },
			pglease.ErrInvalidArgument, "name must be 1 to 256 bytes"},
		{"BindPrefix not migrated", func() error { _, err := pgleaseadmin.BindPrefix(ctx, bare, "x/", "postgres"); return err },
			pglease.ErrNotMigrated, "apply the migrations"},
		{"UnbindPrefix not migrated", func() error { _, err := pgleaseadmin.UnbindPrefix(ctx, bare, "x/"); return err },
			pglease.ErrNotMigrated, "apply the migrations"},
		{"Prefixes not migrated", func() error { _, err := pgleaseadmin.Prefixes(ctx, bare); return err },
			pglease.ErrNotMigrated, "apply the migrations"},
		{"OwnerOf not migrated", func() error { _, err := pgleaseadmin.OwnerOf(ctx, bare, "x"); return err },
			pglease.ErrNotMigrated, "apply the migrations"},
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
	if got, err := pgleaseadmin.Prefixes(ctx, pool); err != nil || len(got) != 0 {
		t.Fatalf("Prefixes after refused calls = %+v, %v; want none", got, err)
	}
}

// TestPrefixNotOwner: a client login role is refused binding, unbinding
// and listing with an error that says to run as the schema owner, and may
// still ask whose a name is.
func TestPrefixNotOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewMigrated(t)
	owner := pgtest.Pool(t, url)
	service := newRole(t, "NOLOGIN")
	login := newRole(t, "LOGIN PASSWORD 'prefix-pw' IN ROLE pglease_client")
	client := poolAs(t, url, login)
	if _, err := pgleaseadmin.BindPrefix(ctx, owner, "billing/", service); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"BindPrefix", func() error { _, err := pgleaseadmin.BindPrefix(ctx, client, "billing/", login); return err },
			"binding a prefix is the schema owner's: run as the role that owns schema pglease"},
		{"UnbindPrefix", func() error { _, err := pgleaseadmin.UnbindPrefix(ctx, client, "billing/"); return err },
			"unbinding a prefix is the schema owner's: run as the role that owns schema pglease"},
		{"Prefixes", func() error { _, err := pgleaseadmin.Prefixes(ctx, client); return err },
			"listing the bound prefixes is the schema owner's: run as the role that owns schema pglease"},
	} {
		err := tc.call()
		if !errors.Is(err, pglease.ErrPermissionDenied) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s as %s = %v, want an error matching ErrPermissionDenied saying %q", tc.name, login, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "grant role pglease_client") {
			t.Errorf("%s as %s = %q: asks for pglease_client, which the role has", tc.name, login, err)
		}
		if n := strings.Count(err.Error(), "pglease:"); n != 1 {
			t.Errorf("%s = %q: says %q %d times, want once", tc.name, err, "pglease:", n)
		}
	}
	if got, err := pgleaseadmin.Prefixes(ctx, owner); err != nil || len(got) != 1 || got[0].Role != service {
		t.Fatalf("Prefixes after the refusals = %+v, %v; want billing/ of %s unchanged", got, err, service)
	}

	if o, err := pgleaseadmin.OwnerOf(ctx, client, "billing/nightly"); err != nil || o != service {
		t.Fatalf("OwnerOf as a client = %q, %v; want %q, nil", o, err, service)
	}
	// And the binding holds: the client may not take a lease under it.
	c, err := pglease.New(client, pglease.Config{Holder: "h"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryAcquire(ctx, "billing/nightly", time.Minute); !errors.Is(err, pglease.ErrPermissionDenied) {
		t.Fatalf("TryAcquire(billing/nightly) as %s = %v, want ErrPermissionDenied", login, err)
	}
}

// ExampleBindPrefix gives the names under "billing/" to a role, as
// `pglease prefix bind` does: from then on only its members take the
// leases and claim the slot scopes under it. It runs as the owner of
// schema pglease.
func ExampleBindPrefix() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	if _, err := pgleaseadmin.BindPrefix(ctx, pool, "billing/", "pglease_client"); err != nil {
		log.Fatal(err)
	}
	owner, err := pgleaseadmin.OwnerOf(ctx, pool, "billing/invoices")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("billing/invoices belongs to", owner)

	previous, err := pgleaseadmin.UnbindPrefix(ctx, pool, "billing/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("unbound billing/ from", previous)
	// Output:
	// billing/invoices belongs to pglease_client
	// unbound billing/ from pglease_client
}
