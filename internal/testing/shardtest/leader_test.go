//go:build sharded

package shardtest

import (
	"testing"
	"time"
)

// TestLeadershipThroughProxy: the leadership functions (0.3.0) route by
// lease name: a value published and read back, set_value, observe, a
// release request only an operator may make (the client's role gets
// 42501 across the hop), renew_lease reporting it, and the preferred
// holder's reservation.
func TestLeadershipThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "leader"))
	admin := pool(t, s.ProxyURL, "")
	ctx := testContext(t)
	var (
		ok    bool
		fence int64
		value *string
	)
	if err := proxy.QueryRow(ctx, `SELECT acquired, fence FROM pglease.acquire('lead', 'a', '1 minute', 'addr-a')`).Scan(&ok, &fence); err != nil || !ok || fence != 1 {
		t.Fatalf("acquire with a value: got %v fence %d, %v", ok, fence, err)
	}
	if err := proxy.QueryRow(ctx, `SELECT acquired, value FROM pglease.acquire('lead', 'b', '1 minute', 'addr-b')`).Scan(&ok, &value); err != nil || ok || value == nil || *value != "addr-a" {
		t.Fatalf("refused acquire: got %v value %v, %v; want the holder's addr-a", ok, value, err)
	}
	if err := proxy.QueryRow(ctx, `SELECT value_set FROM pglease.set_value('lead', 'a', 1, 'addr-a2')`).Scan(&ok); err != nil || !ok {
		t.Fatalf("set_value: got %v, %v", ok, err)
	}
	var state string
	if err := proxy.QueryRow(ctx, `SELECT state, value FROM pglease.observe('lead', '1 minute')`).Scan(&state, &value); err != nil || state != "held" || value == nil || *value != "addr-a2" {
		t.Fatalf("observe: got %s %v, %v", state, value, err)
	}
	_, err := proxy.Exec(ctx, `SELECT * FROM pglease.request_release('lead', 'b')`)
	requirePgError(t, err, "42501")
	if err := admin.QueryRow(ctx, `SELECT requested FROM pglease.request_release('lead', 'b')`).Scan(&ok); err != nil || !ok {
		t.Fatalf("request_release by the owner: got %v, %v", ok, err)
	}
	if err := proxy.QueryRow(ctx, `SELECT release_requested FROM pglease.renew_lease('lead', 'a', 1, '1 minute')`).Scan(&ok); err != nil || !ok {
		t.Fatalf("renew_lease after the request: got %v, %v", ok, err)
	}
	if !release(t, proxy, "lead", "a", 1) {
		t.Fatal("release refused")
	}
	if r := acquire(t, proxy, "lead", "c", time.Minute); r.Acquired || r.Holder != "b" {
		t.Fatalf("acquire by another during the reservation: got %+v, want refused for b", r)
	}
	mustAcquire(t, proxy, "lead", "b", time.Minute, 2)
	if err := proxy.QueryRow(ctx, `SELECT value FROM pglease.lease_status WHERE name = 'lead'`).Scan(&value); err != nil || value != nil {
		t.Fatalf("lease_status value of b's tenure: got %v, %v; want NULL", value, err)
	}
}
