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

// notice is the payload pglease sends on channel pglease.
type notice struct {
	Kind   string `json:"kind"`
	Event  string `json:"event"`
	Name   string `json:"name"`
	Slot   *int32 `json:"slot"`
	Fence  int64  `json:"fence"`
	Holder string `json:"holder"`
}

func leaseNotice(event, name string, fence int64, holder string) notice {
	return notice{Kind: "lease", Event: event, Name: name, Fence: fence, Holder: holder}
}

func slotNotice(event, scope string, slot int32, fence int64, holder string) notice {
	return notice{Kind: "slot", Event: event, Name: scope, Slot: &slot, Fence: fence, Holder: holder}
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
	for _, k := range []string{"kind", "event", "name", "slot", "fence", "holder"} {
		if _, ok := keys[k]; !ok {
			t.Fatalf("payload %s: missing key %q", n.Payload, k)
		}
	}
	if len(keys) != 6 {
		t.Fatalf("payload %s: got %d keys, want 6", n.Payload, len(keys))
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

// sendMarker acquires a fresh lease named marker, whose notification the
// caller then expects next.
func sendMarker(t testing.TB, q querier, marker string) notice {
	t.Helper()
	mustAcquire(t, q, marker, "marker", time.Minute, 1)
	return leaseNotice("acquired", marker, 1, "marker")
}

func testNotifyLease(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	l := listen(t, db.url, n(""))
	ctx := testContext(t)

	mustAcquire(t, pool, n("n"), "a", 30*time.Second, 1)
	requireNextNotice(t, l, leaseNotice("acquired", n("n"), 1, "a"))

	// Re-entrant acquire, renew and a refused acquire send nothing: the
	// next notification is the release.
	mustAcquire(t, pool, n("n"), "a", 30*time.Second, 1)
	if r := renew(t, pool, n("n"), "a", 1, 30*time.Second); !r.Renewed {
		t.Fatalf("renew: got false, want true")
	}
	if r := acquire(t, pool, n("n"), "b", 30*time.Second); r.Acquired {
		t.Fatalf("acquire by b: got true, want false")
	}
	release(t, pool, n("n"), "a", 1)
	requireNextNotice(t, l, leaseNotice("released", n("n"), 1, "a"))

	// A rolled-back acquire sends nothing.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, tx, n("n"), "b", 30*time.Second, 2)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	requireNextNotice(t, l, sendMarker(t, pool, n("marker")))

	// The rollback also took the fence back: the next tenure is 2 again.
	mustAcquire(t, pool, n("n"), "b", shortTTL, 2)
	requireNextNotice(t, l, leaseNotice("acquired", n("n"), 2, "b"))

	// A takeover after expiry is a new tenure; force_release is a release.
	waitLeaseState(t, pool, n("n"), "expired")
	mustAcquire(t, pool, n("n"), "c", 30*time.Second, 3)
	requireNextNotice(t, l, leaseNotice("acquired", n("n"), 3, "c"))
	if _, err := pool.Exec(ctx, `SELECT pglease.force_release($1)`, n("n")); err != nil {
		t.Fatal(err)
	}
	requireNextNotice(t, l, leaseNotice("released", n("n"), 3, "c"))

	// The last holder acquiring again after expiry is a new tenure too.
	mustAcquire(t, pool, n("n"), "c", shortTTL, 4)
	requireNextNotice(t, l, leaseNotice("acquired", n("n"), 4, "c"))
	waitLeaseState(t, pool, n("n"), "expired")
	mustAcquire(t, pool, n("n"), "c", 30*time.Second, 5)
	requireNextNotice(t, l, leaseNotice("acquired", n("n"), 5, "c"))

	// Names are JSON-escaped, not mangled.
	odd := "q\"u'o\\te;\n ß日本🔒 "
	mustAcquire(t, pool, n(odd), odd, 30*time.Second, 1)
	requireNextNotice(t, l, leaseNotice("acquired", n(odd), 1, odd))

	// The one bounded wait: nothing at all follows a renewal.
	if r := renew(t, pool, n("n"), "c", 5, 30*time.Second); !r.Renewed {
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

	mustClaimSlot(t, pool, scope, a, 2, 30*time.Second, 1, 1)
	requireNextNotice(t, l, slotNotice("acquired", scope, 1, 1, a))

	// Re-entrant claim, renew_slot, renew_holder and a refused claim send
	// nothing.
	mustClaimSlot(t, pool, scope, a, 2, 30*time.Second, 1, 1)
	if r := renewSlot(t, pool, scope, 1, a, 1, 30*time.Second); !r.Renewed {
		t.Fatalf("renew_slot: got false, want true")
	}
	if r := renewHolder(t, pool, a, 30*time.Second); len(r.Slots) != 1 {
		t.Fatalf("renew_holder: got slots %v, want one", r.Slots)
	}
	if r := claimSlot(t, pool, scope, b, 1, 30*time.Second); r.Claimed {
		t.Fatalf("claim by b with capacity 1: got %s, want refused", r)
	}
	releaseSlot(t, pool, scope, 1, a, 1)
	requireNextNotice(t, l, slotNotice("released", scope, 1, 1, a))

	mustClaimSlot(t, pool, scope, b, 2, 30*time.Second, 1, 2)
	requireNextNotice(t, l, slotNotice("acquired", scope, 1, 2, b))
}
