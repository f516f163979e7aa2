package contract

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// notice is the payload pglease sends on channel pglease: only what a
// waiter needs to try again, never who held the lease or slot (LISTEN
// cannot be restricted, so anyone who can connect hears it).
type notice struct {
	Kind  string `json:"kind"`
	Event string `json:"event"`
	Name  string `json:"name"`
}

func leaseNotice(event, name string) notice {
	return notice{Kind: "lease", Event: event, Name: name}
}

func slotNotice(event, scope string) notice {
	return notice{Kind: "slot", Event: event, Name: scope}
}

func (n notice) String() string {
	b, _ := json.Marshal(n)
	return string(b)
}

// listener is a dedicated connection listening on channel pglease. It
// hears every notification of its database and passes on those about names
// starting with prefix: the ones of its own test.
type listener struct {
	conn   *pgx.Conn
	prefix string
}

func listen(t testing.TB, url, prefix string) *listener {
	t.Helper()
	conn := connect(t, url)
	mustExec(t, conn, `LISTEN pglease`)
	return &listener{conn: conn, prefix: prefix}
}

// next waits up to timeout for the next notification of l's test and
// decodes it; ok is false when none came in time. The payload must have
// exactly pglease's keys.
func (l *listener) next(t testing.TB, timeout time.Duration) (got notice, ok bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	for {
		n, err := l.conn.WaitForNotification(ctx)
		if errors.Is(err, context.DeadlineExceeded) {
			return got, false
		}
		if err != nil {
			t.Fatalf("wait for notification: %v", err)
		}
		got = decodeNotice(t, n)
		if strings.HasPrefix(got.Name, l.prefix) {
			return got, true
		}
	}
}

func decodeNotice(t testing.TB, n *pgconn.Notification) notice {
	t.Helper()
	if n.Channel != "pglease" {
		t.Fatalf("notification channel: got %q, want pglease", n.Channel)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal([]byte(n.Payload), &keys); err != nil {
		t.Fatalf("payload %q is not a JSON object: %v", n.Payload, err)
	}
	for _, k := range []string{"kind", "event", "name"} {
		if _, ok := keys[k]; !ok {
			t.Fatalf("payload %s: missing key %q", n.Payload, k)
		}
	}
	if len(keys) != 3 {
		t.Fatalf("payload %s: got %d keys, want 3 (kind, event, name: no holder, fence or slot)", n.Payload, len(keys))
	}
	var got notice
	if err := json.Unmarshal([]byte(n.Payload), &got); err != nil {
		t.Fatalf("decode payload %q: %v", n.Payload, err)
	}
	return got
}

// requireNextNotice fails unless the next notification of l's test is
// want. Notifications arrive in commit order, so calling this for a marker
// sent after an operation proves that operation sent nothing.
func requireNextNotice(t testing.TB, l *listener, want notice) {
	t.Helper()
	got, ok := l.next(t, 10*time.Second)
	if !ok {
		t.Fatalf("notification: got none in 10s, want %s", want)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("notification: got %s, want %s", got, want)
	}
}

// sendMarker sends a notification of the test's own on channel pglease,
// which the caller then expects next: proof that what came before sent
// nothing.
func sendMarker(t testing.TB, q querier, marker string) notice {
	t.Helper()
	want := leaseNotice("marker", marker)
	mustExec(t, q, `SELECT pg_notify('pglease', $1)`, want.String())
	return want
}

// testNotifyLease: releases NOTIFY when a refused acquire registered as a
// waiter, and nothing else does (every NOTIFY makes its transaction commit
// under a cluster-wide lock).
func testNotifyLease(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	l := listen(t, db.url, n(""))
	ctx := testContext(t)

	// Acquire, re-entrant acquire, renew and a release nobody waits for
	// send nothing.
	mustAcquire(t, pool, n("n"), "a", 30*time.Second, 1)
	mustAcquire(t, pool, n("n"), "a", 30*time.Second, 1)
	if r := renew(t, pool, n("n"), "a", 1, 30*time.Second); !r.Renewed {
		t.Fatalf("renew: got false, want true")
	}
	release(t, pool, n("n"), "a", 1)
	requireNextNotice(t, l, sendMarker(t, pool, n("m1")))

	// A refused acquire registers a waiter: the release is heard.
	mustAcquire(t, pool, n("n"), "a", 30*time.Second, 2)
	if r := acquire(t, pool, n("n"), "b", 30*time.Second); r.Acquired {
		t.Fatalf("acquire by b: got true, want false")
	}
	release(t, pool, n("n"), "a", 2)
	requireNextNotice(t, l, leaseNotice("released", n("n")))

	// A rolled-back release sends nothing, even with a waiter.
	mustAcquire(t, pool, n("n"), "c", 30*time.Second, 3)
	if r := acquire(t, pool, n("n"), "b", 30*time.Second); r.Acquired {
		t.Fatalf("acquire by b: got true, want false")
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release(t, tx, n("n"), "c", 3)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	requireNextNotice(t, l, sendMarker(t, pool, n("m2")))

	// force_release is a release.
	if _, err := pool.Exec(ctx, `SELECT pglease.force_release($1)`, n("n")); err != nil {
		t.Fatal(err)
	}
	requireNextNotice(t, l, leaseNotice("released", n("n")))

	// A registration lasts until the holder's expiry it was told: after it,
	// a release is not announced (the waiter has retried by then).
	mustAcquire(t, pool, n("short"), "a", shortTTL, 1)
	if r := acquire(t, pool, n("short"), "b", 30*time.Second); r.Acquired {
		t.Fatalf("acquire by b: got true, want false")
	}
	waitLeaseState(t, pool, n("short"), "expired")
	mustAcquire(t, pool, n("short"), "a", 30*time.Second, 2)
	release(t, pool, n("short"), "a", 2)
	requireNextNotice(t, l, sendMarker(t, pool, n("m3")))

	// Names are JSON-escaped, not mangled.
	odd := "q\"u'o\\te;\n ß日本🔒 "
	mustAcquire(t, pool, n(odd), odd, 30*time.Second, 1)
	if r := acquire(t, pool, n(odd), "b", 30*time.Second); r.Acquired {
		t.Fatalf("acquire by b: got true, want false")
	}
	release(t, pool, n(odd), odd, 1)
	requireNextNotice(t, l, leaseNotice("released", n(odd)))

	// The one bounded wait: nothing at all follows a renewal.
	mustAcquire(t, pool, n("n"), "c", 30*time.Second, 4)
	if r := renew(t, pool, n("n"), "c", 4, 30*time.Second); !r.Renewed {
		t.Fatalf("renew: got false, want true")
	}
	if got, ok := l.next(t, 300*time.Millisecond); ok {
		t.Fatalf("after renew: got notification %s, want none", got)
	}
}

func testNotifySlot(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	l := listen(t, db.url, n(""))
	scope, a, b := n("s"), n("a"), n("b")

	// Claims, re-entrant claims, renewals and a release nobody waits for
	// send nothing.
	mustClaimSlot(t, pool, scope, a, 1, 30*time.Second, 1, 1)
	mustClaimSlot(t, pool, scope, a, 1, 30*time.Second, 1, 1)
	if r := renewSlot(t, pool, scope, 1, a, 1, 30*time.Second); !r.Renewed {
		t.Fatalf("renew_slot: got false, want true")
	}
	if r := renewHolder(t, pool, a, 30*time.Second); len(r.Slots) != 1 {
		t.Fatalf("renew_holder: got slots %v, want one", r.Slots)
	}
	releaseSlot(t, pool, scope, 1, a, 1)
	requireNextNotice(t, l, sendMarker(t, pool, n("m1")))

	// A refused claim registers a waiter: the release is heard.
	mustClaimSlot(t, pool, scope, a, 1, 30*time.Second, 1, 2)
	if r := claimSlot(t, pool, scope, b, 1, 30*time.Second); r.Claimed {
		t.Fatalf("claim by b with capacity 1: got %s, want refused", r)
	}
	releaseSlot(t, pool, scope, 1, a, 2)
	requireNextNotice(t, l, slotNotice("released", scope))

	// So does a refused claim_slots, for the scope that refused it.
	other := n("o")
	mustClaimSlot(t, pool, scope, a, 1, 30*time.Second, 1, 3)
	if r := claimSlots(t, pool, b, []string{other, scope}, []int32{5, 1}, 30*time.Second); r.Claimed {
		t.Fatalf("claim_slots by b: got %+v, want refused", r)
	}
	releaseSlot(t, pool, scope, 1, a, 3)
	requireNextNotice(t, l, slotNotice("released", scope))
}
