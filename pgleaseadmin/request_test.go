package pgleaseadmin_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pglease/pglease/internal/testing/pgtest"
	"github.com/pglease/pglease/pglease"
	"github.com/pglease/pglease/pgleaseadmin"
)

// TestRequestReleaseNotOperator: a pglease_client member that is not in
// pglease_operator is refused with an error that matches
// ErrPermissionDenied and names the role it lacks, not the one it has;
// nothing is asked of the holder.
func TestRequestReleaseNotOperator(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.NewMigrated(t)
	owner := pgtest.Pool(t, url)
	login := newRole(t, "LOGIN PASSWORD 'prefix-pw' IN ROLE pglease_client")
	client := poolAs(t, url, login)
	leader, err := pglease.New(owner, pglease.Config{Holder: "leader"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.TryAcquire(ctx, "lead", time.Hour); err != nil {
		t.Fatal(err)
	}

	_, _, err = pgleaseadmin.RequestRelease(ctx, client, "lead", pgleaseadmin.ReleaseRequest{})
	const want = "requesting a release needs role pglease_operator"
	if !errors.Is(err, pglease.ErrPermissionDenied) || !strings.Contains(err.Error(), want) {
		t.Fatalf("RequestRelease as %s = %v, want an error matching ErrPermissionDenied saying %q", login, err, want)
	}
	if strings.Contains(err.Error(), "grant role pglease_client") {
		t.Fatalf("RequestRelease as %s = %q: asks for pglease_client, which the role has", login, err)
	}
	if n := strings.Count(err.Error(), "pglease:"); n != 1 {
		t.Fatalf("RequestRelease = %q: says %q %d times, want once", err, "pglease:", n)
	}
	// The owner's request is the first: the refused one asked nothing.
	r, requested, err := pgleaseadmin.RequestRelease(ctx, owner, "lead", pgleaseadmin.ReleaseRequest{})
	if err != nil || !requested {
		t.Fatalf("RequestRelease as the owner after the refusal = %+v (requested %t), %v; want requested", r, requested, err)
	}
}
