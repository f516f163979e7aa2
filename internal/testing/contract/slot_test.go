package contract

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSlots covers the slot functions: claim_slot, claim_slots, renew_slot,
// release_slot, renew_holder and the slot_status and slot_scope_status
// views.
func TestSlots(t *testing.T) {
	t.Parallel()
	runGroup(t, 24, []subtest{
		{"ClaimSlotIdempotent", testClaimSlotIdempotent},
		{"ReleasedSlotClaimedByAnother", testReleasedSlotClaimedByAnother},
		{"ExpiredSlotReclaimable", testExpiredSlotReclaimable},
		{"ClaimSlotCapacityShrinks", testClaimSlotCapacityShrinks},
		{"ClaimSlotAfterConcurrentRelease", testClaimSlotAfterConcurrentRelease},
		{"ClaimSlotRetryIn", testClaimSlotRetryIn},
		{"ClaimSlotRace", testClaimSlotRace},
		{"ClaimSlotsAllOrNothing", testClaimSlotsAllOrNothing},
		{"ClaimSlotsInputOrder", testClaimSlotsInputOrder},
		{"ClaimSlotsAfterConcurrentRelease", testClaimSlotsAfterConcurrentRelease},
		{"ClaimSlotsRace", testClaimSlotsRace},
		{"RenewSlotCompareAndSwap", testRenewSlotCompareAndSwap},
		{"ReleaseSlotCompareAndSwap", testReleaseSlotCompareAndSwap},
		{"RenewHolder", testRenewHolder},
		{"RenewHolderNeverShortens", testRenewHolderNeverShortens},
		{"RenewHolderOrderAndLockTimeout", testRenewHolderOrderAndLockTimeout},
		{"SlotStatusViews", testSlotStatusViews},
		{"NotifySlot", testNotifySlot},
	})
}

func testClaimSlotIdempotent(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	first := mustClaimSlot(t, pool, n("s"), "a", 3, 30*time.Second, 1, 1)
	if first.InUse != 1 || *first.ExpiresIn != 30*time.Second {
		t.Fatalf("first claim: got %s, want in_use 1 and expires_in 30s", first)
	}
	second := mustClaimSlot(t, pool, n("s"), "a", 3, 30*time.Second, 1, 1)
	if second.InUse != 1 || !second.ExpiresAt.After(*first.ExpiresAt) || *second.ExpiresIn != 30*time.Second {
		t.Fatalf("re-claim: got %s expires_at %v, want in_use 1, expires_at after %v, expires_in 30s",
			second, *second.ExpiresAt, *first.ExpiresAt)
	}
	// Re-pinned, not extended.
	third := mustClaimSlot(t, pool, n("s"), "a", 3, 2*time.Second, 1, 1)
	st := mustSlotStatus(t, pool, n("s"), 1)
	if !st.ExpiresAt.Equal(*third.ExpiresAt) {
		t.Fatalf("slot_status expires_at: got %v, want %v", *st.ExpiresAt, *third.ExpiresAt)
	}
	requireAtMostAbout(t, "expires_in after re-claim with 2s", *st.ExpiresIn, 2*time.Second, 2*time.Second)
	if inUse, slots := scopeStatus(t, pool, n("s")); inUse != 1 || slots != 1 {
		t.Fatalf("slot_scope_status: got in_use %d slots %d, want 1, 1 (re-claims leak nothing)", inUse, slots)
	}
}

func testReleasedSlotClaimedByAnother(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	// Capacity 1: the one slot comes back with fence + 1.
	mustClaimSlot(t, pool, n("one"), "a", 1, 30*time.Second, 1, 1)
	refused := claimSlot(t, pool, n("one"), "b", 1, 30*time.Second)
	if refused.Claimed || refused.Slot != nil || refused.Fence != nil || refused.ExpiresAt != nil ||
		refused.ExpiresIn != nil || refused.InUse != 1 || refused.RetryIn == nil || *refused.RetryIn <= 0 || *refused.RetryIn > 30*time.Second {
		t.Fatalf("claim of a full scope: got %s, want refused with NULL slot, fence, expiry, in_use 1 and retry_in in (0, 30s]", refused)
	}
	if !releaseSlot(t, pool, n("one"), 1, "a", 1) {
		t.Fatalf("release_slot: got false, want true")
	}
	mustClaimSlot(t, pool, n("one"), "b", 1, 30*time.Second, 1, 2)

	// Capacity 3: whichever slot is taken gets that slot's fence + 1.
	for i, h := range []string{"a", "b", "c"} {
		mustClaimSlot(t, pool, n("three"), h, 3, 30*time.Second, int32(i+1), 1)
	}
	releaseSlot(t, pool, n("three"), 2, "b", 1)
	releaseSlot(t, pool, n("three"), 1, "a", 1)
	mustClaimSlot(t, pool, n("three"), "a", 3, 30*time.Second, 2, 2) // longest free first
	before := map[int32]int64{}
	for slot := int32(1); slot <= 3; slot++ {
		before[slot] = mustSlotStatus(t, pool, n("three"), slot).Fence
	}
	r := claimSlot(t, pool, n("three"), "d", 3, 30*time.Second)
	if !r.Claimed || *r.Slot < 1 || *r.Slot > 3 || *r.Fence != before[*r.Slot]+1 {
		t.Fatalf("claim by d: got %s, want a slot 1..3 with that slot's fence + 1 (fences before: %v)", r, before)
	}
}

func testExpiredSlotReclaimable(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	mustClaimSlot(t, pool, n("s"), "a", 1, shortTTL, 1, 1)
	waitSlotState(t, pool, n("s"), 1, "expired")
	if inUse, _ := scopeStatus(t, pool, n("s")); inUse != 0 {
		t.Fatalf("in_use after expiry: got %d, want 0", inUse)
	}
	b := mustClaimSlot(t, pool, n("s"), "b", 1, 30*time.Second, 1, 2)
	if b.InUse != 1 {
		t.Fatalf("claim by b: got %s, want in_use 1", b)
	}
	requireNotRenewed(t, renewSlot(t, pool, n("s"), 1, "a", 1, 30*time.Second))
	if releaseSlot(t, pool, n("s"), 1, "a", 1) {
		t.Fatalf("release_slot by the expired holder: got true, want false")
	}
	if r := claimSlot(t, pool, n("s"), "a", 1, 30*time.Second); r.Claimed {
		t.Fatalf("claim by a: got %s, want refused while b holds the slot", r)
	}
}

func testClaimSlotCapacityShrinks(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	for i := int32(1); i <= 5; i++ {
		mustClaimSlot(t, pool, n("s"), fmt.Sprintf("h%d", i), 5, time.Minute, i, 1)
	}
	requireRefused := func(inUse int32) {
		t.Helper()
		r := claimSlot(t, pool, n("s"), "h6", 3, time.Minute)
		if r.Claimed || r.InUse != inUse || r.Slot != nil {
			t.Fatalf("claim with capacity 3: got %s, want refused with in_use %d", r, inUse)
		}
	}
	requireRefused(5)
	// Free the highest slots first: they are then the longest free, and a
	// claim with capacity 3 must still not take them.
	releaseSlot(t, pool, n("s"), 5, "h5", 1)
	releaseSlot(t, pool, n("s"), 4, "h4", 1)
	requireRefused(3)
	releaseSlot(t, pool, n("s"), 1, "h1", 1)
	r := claimSlot(t, pool, n("s"), "h6", 3, time.Minute)
	if !r.Claimed || *r.Slot > 3 || r.InUse != 3 {
		t.Fatalf("claim with capacity 3 and 2 live: got %s, want a slot numbered 1..3 and in_use 3", r)
	}
	if r := claimSlot(t, pool, n("s"), "h7", 3, time.Minute); r.Claimed || r.InUse != 3 {
		t.Fatalf("next claim with capacity 3: got %s, want refused with in_use 3", r)
	}
}

// testClaimSlotAfterConcurrentRelease covers a claim that waits for the
// scope lock while a slot is released: once it runs, fewer than capacity
// holders are live, so it must succeed. It also shows that claims in one
// scope are serialised by a lock a granted claim holds until its
// transaction ends.
func testClaimSlotAfterConcurrentRelease(t *testing.T, db *testDB) {
	url, pool := db.url, db.pool
	n := namer(t)
	connX := connect(t, url)
	connC := connect(t, url)
	ctx := testContext(t)

	mustClaimSlot(t, pool, n("s"), "a", 3, time.Minute, 1, 1)
	mustClaimSlot(t, pool, n("s"), "b", 3, time.Minute, 2, 1)

	// X's claim is granted and keeps the scope locked until X ends (a
	// refused claim keeps no lock a claim waits for).
	txX, err := connX.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txX.Rollback(context.Background()) }()
	if r := claimSlot(t, txX, n("s"), "x", 3, time.Minute); !r.Claimed {
		t.Fatalf("claim by x: got %s, want claimed", r)
	}

	pidX, pidC := backendPID(t, connX), backendPID(t, connC)
	type outcome struct {
		r   claimResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := tryClaimSlot(ctx, connC, n("s"), "c", 3, time.Minute)
		done <- outcome{r, err}
	}()
	waitBlockedBy(t, pool, pidC, pidX)

	if !releaseSlot(t, pool, n("s"), 1, "a", 1) {
		t.Fatalf("release_slot by a: got false, want true")
	}
	if err := txX.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("claim by c still blocked 10s after the scope lock was released")
	}
	if o.err != nil {
		t.Fatalf("claim by c: %v", o.err)
	}
	if !o.r.Claimed || *o.r.Slot != 1 || *o.r.Fence != 2 || o.r.InUse != 2 {
		t.Fatalf("claim by c with 1 of 3 live after x rolled back: got %s, want claimed slot 1 fence 2 in_use 2", o.r)
	}
}

// testClaimSlotsAfterConcurrentRelease covers a multi-scope claim that has
// read the clock and then waits (on its holder's own slot in the first
// scope, locked by a renewal) while a slot of the second scope is released:
// a released slot is free whatever time its release stamped on it, so the
// claim must take it.
func testClaimSlotsAfterConcurrentRelease(t *testing.T, db *testDB) {
	url, pool := db.url, db.pool
	n := namer(t)
	connR := connect(t, url)
	connC := connect(t, url)
	ctx := testContext(t)
	first, second, h := n("first"), n("second"), n("h")

	mustClaimSlot(t, pool, first, h, 5, time.Minute, 1, 1)
	mustClaimSlot(t, pool, second, "x", 2, time.Minute, 1, 1)
	mustClaimSlot(t, pool, second, "y", 2, time.Minute, 2, 1)

	// R renews h's slot in the first scope and keeps the row locked.
	txR, err := connR.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = txR.Rollback(context.Background()) }()
	if r := renewSlot(t, txR, first, 1, h, 1, time.Minute); !r.Renewed {
		t.Fatalf("renew_slot in R: got false, want true")
	}

	pidR, pidC := backendPID(t, connR), backendPID(t, connC)
	type outcome struct {
		r   claimSlotsResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		var r claimSlotsResult
		err := connC.QueryRow(ctx, `SELECT claimed, slots, fences, in_use, refused_scope, refused_in_use,
				expires_at, expires_in, retry_in
			FROM pglease.claim_slots($1, $2, ARRAY[5, 2], '1 min')`, h, []string{first, second}).
			Scan(&r.Claimed, &r.Slots, &r.Fences, &r.InUse, &r.RefusedScope, &r.RefusedInUse,
				&r.ExpiresAt, &r.ExpiresIn, &r.RetryIn)
		done <- outcome{r, err}
	}()
	waitBlockedBy(t, pool, pidC, pidR)

	if !releaseSlot(t, pool, second, 1, "x", 1) {
		t.Fatalf("release_slot by x: got false, want true")
	}
	if err := txR.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var o outcome
	select {
	case o = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("claim_slots still blocked 10s after R committed")
	}
	if o.err != nil {
		t.Fatalf("claim_slots: %v", o.err)
	}
	if !o.r.Claimed || !slices.Equal(derefAll(o.r.Slots), []string{"1", "1"}) || !slices.Equal(derefAll(o.r.Fences), []string{"1", "2"}) {
		t.Fatalf("claim_slots with 1 of 2 live in the second scope: got claimed=%v slots=%v fences=%v refused_scope=%s refused_in_use=%s, want true, [1 1], [1 2]",
			o.r.Claimed, derefAll(o.r.Slots), derefAll(o.r.Fences), ptrString(o.r.RefusedScope), ptrString(o.r.RefusedInUse))
	}
}

type claimSlotsResult struct {
	Claimed      bool
	Slots        []*int32
	Fences       []*int64
	InUse        []*int32
	RefusedScope *string
	RefusedInUse *int32
	ExpiresAt    *time.Time
	ExpiresIn    *time.Duration
	RetryIn      *time.Duration
}

func claimSlots(t testing.TB, q querier, holder string, scopes []string, capacities []int32, ttl time.Duration) claimSlotsResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var r claimSlotsResult
	err := q.QueryRow(ctx, `SELECT claimed, slots, fences, in_use, refused_scope, refused_in_use,
			expires_at, expires_in, retry_in
		FROM pglease.claim_slots($1, $2, $3, $4)`, holder, scopes, capacities, ttl).
		Scan(&r.Claimed, &r.Slots, &r.Fences, &r.InUse, &r.RefusedScope, &r.RefusedInUse,
			&r.ExpiresAt, &r.ExpiresIn, &r.RetryIn)
	if err != nil {
		t.Fatalf("claim_slots(%q, %q, %v, %v): %v", holder, scopes, capacities, ttl, err)
	}
	return r
}

func derefAll[T any](ps []*T) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = ptrString(p)
	}
	return out
}

func testClaimSlotsAllOrNothing(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	l := listen(t, db.url, n(""))
	ctx := testContext(t)
	global, tenant1, tenant2 := n("global"), n("tenant-1"), n("tenant-2")
	h, h2 := n("h"), n("h2")

	mustClaimSlot(t, pool, tenant1, "x", 1, time.Minute, 1, 1)
	mustClaimSlot(t, pool, tenant2, "y", 1, time.Minute, 1, 1)
	// h2 already holds a global slot: a refused call must not re-pin it.
	h2Slot := mustClaimSlot(t, pool, global, h2, 10, time.Minute, 1, 1)

	// Global capacity free, tenant capacity full.
	r := claimSlots(t, pool, h, []string{global, tenant1}, []int32{10, 1}, time.Hour)
	requireClaimSlotsRefused(t, r, tenant1, time.Minute)
	var held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pglease.slot_status WHERE holder = $1`, h).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("slots recorded for h after the refused claim: got %d, want 0", held)
	}
	if inUse, _ := scopeStatus(t, pool, global); inUse != 1 {
		t.Fatalf("global in_use after the refused claim: got %d, want 1 (h2 only)", inUse)
	}

	r = claimSlots(t, pool, h2, []string{global, tenant1}, []int32{10, 1}, time.Hour)
	requireClaimSlotsRefused(t, r, tenant1, time.Minute)
	if st := mustSlotStatus(t, pool, global, 1); !st.ExpiresAt.Equal(*h2Slot.ExpiresAt) {
		t.Fatalf("h2's global slot after a refused claim_slots: expires_at %v, want unchanged %v", *st.ExpiresAt, *h2Slot.ExpiresAt)
	}

	// The first full scope in the order given is named.
	for _, tc := range []struct {
		scopes []string
		caps   []int32
		want   string
	}{
		{[]string{tenant1, tenant2}, []int32{1, 1}, tenant1},
		{[]string{tenant2, tenant1}, []int32{1, 1}, tenant2},
		{[]string{global, tenant2, tenant1}, []int32{10, 1, 1}, tenant2},
	} {
		r := claimSlots(t, pool, h, tc.scopes, tc.caps, time.Hour)
		requireClaimSlotsRefused(t, r, tc.want, time.Minute)
	}

	// None of the refused calls sent a notification.
	requireNextNotice(t, l, sendMarker(t, pool, n("marker")))
}

// requireClaimSlotsRefused fails unless r refuses at scope refused, whose one
// live holder's slot expires within ttl.
func requireClaimSlotsRefused(t testing.TB, r claimSlotsResult, refused string, ttl time.Duration) {
	t.Helper()
	if r.Claimed || ptrString(r.RefusedScope) != refused || ptrString(r.RefusedInUse) != "1" ||
		r.ExpiresAt != nil || r.ExpiresIn != nil {
		t.Fatalf("claim_slots: got claimed=%v refused_scope=%s refused_in_use=%s expires_at=%s expires_in=%s, want false, %s, 1, NULL, NULL",
			r.Claimed, ptrString(r.RefusedScope), ptrString(r.RefusedInUse), ptrString(r.ExpiresAt), ptrString(r.ExpiresIn), refused)
	}
	if r.Slots == nil || len(r.Slots) != 0 || r.Fences == nil || len(r.Fences) != 0 || r.InUse == nil || len(r.InUse) != 0 {
		t.Fatalf("refused claim_slots: got slots=%v fences=%v in_use=%v, want empty arrays", r.Slots, r.Fences, r.InUse)
	}
	if r.RetryIn == nil || *r.RetryIn <= 0 || *r.RetryIn > ttl {
		t.Fatalf("refused claim_slots: got retry_in %s, want in (0, %v]", ptrString(r.RetryIn), ttl)
	}
}

func testClaimSlotsInputOrder(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	// zeta has two live holders, alpha a released slot 1 (fence 1), mid one
	// live holder.
	mustClaimSlot(t, pool, n("zeta"), "z1", 5, time.Minute, 1, 1)
	mustClaimSlot(t, pool, n("zeta"), "z2", 5, time.Minute, 2, 1)
	mustClaimSlot(t, pool, n("alpha"), "a1", 5, time.Minute, 1, 1)
	releaseSlot(t, pool, n("alpha"), 1, "a1", 1)
	mustClaimSlot(t, pool, n("mid"), "m1", 5, time.Minute, 1, 1)

	scopes := []string{n("zeta"), n("alpha"), n("mid")}
	r := claimSlots(t, pool, "h", scopes, []int32{5, 5, 5}, 30*time.Second)
	if !r.Claimed || r.RefusedScope != nil || r.RefusedInUse != nil || r.RetryIn != nil ||
		r.ExpiresIn == nil || *r.ExpiresIn != 30*time.Second {
		t.Fatalf("claim_slots: got claimed=%v refused_scope=%s refused_in_use=%s retry_in=%s expires_in=%s, want true, NULL, NULL, NULL, 30s",
			r.Claimed, ptrString(r.RefusedScope), ptrString(r.RefusedInUse), ptrString(r.RetryIn), ptrString(r.ExpiresIn))
	}
	for _, c := range []struct {
		what string
		got  []string
		want []string
	}{
		{"slots", derefAll(r.Slots), []string{"3", "1", "2"}},
		{"fences", derefAll(r.Fences), []string{"1", "2", "1"}},
		{"in_use", derefAll(r.InUse), []string{"3", "1", "2"}},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Fatalf("claim_slots %s in input order %v: got %v, want %v", c.what, scopes, c.got, c.want)
		}
	}
	for i, scope := range scopes {
		st := mustSlotStatus(t, pool, scope, *r.Slots[i])
		if ptrString(st.Holder) != "h" || st.Fence != *r.Fences[i] || !st.ExpiresAt.Equal(*r.ExpiresAt) {
			t.Fatalf("%s slot %d: got holder %s fence %d expires_at %v, want h, %d, %v",
				scope, *r.Slots[i], ptrString(st.Holder), st.Fence, *st.ExpiresAt, *r.Fences[i], *r.ExpiresAt)
		}
	}

	// Claiming again is idempotent.
	again := claimSlots(t, pool, "h", scopes, []int32{5, 5, 5}, 30*time.Second)
	if !again.Claimed || !slices.Equal(derefAll(again.Slots), derefAll(r.Slots)) ||
		!slices.Equal(derefAll(again.Fences), derefAll(r.Fences)) {
		t.Fatalf("claim_slots again: got slots %v fences %v, want %v, %v",
			derefAll(again.Slots), derefAll(again.Fences), derefAll(r.Slots), derefAll(r.Fences))
	}
}

func testRenewSlotCompareAndSwap(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	held := mustClaimSlot(t, pool, n("s"), "a", 3, 10*time.Second, 1, 1)
	mustClaimSlot(t, pool, n("s"), "r", 3, 10*time.Second, 2, 1)
	releaseSlot(t, pool, n("s"), 2, "r", 1)
	mustClaimSlot(t, pool, n("e"), "a", 1, shortTTL, 1, 1)
	waitSlotState(t, pool, n("e"), 1, "expired")

	for _, tc := range []struct {
		desc   string
		scope  string
		slot   int32
		holder string
		fence  int64
	}{
		{"wrong holder", "s", 1, "b", 1},
		{"wrong fence", "s", 1, "a", 2},
		{"wrong slot", "s", 3, "a", 1},
		{"released", "s", 2, "r", 1},
		{"expired", "e", 1, "a", 1},
		{"unknown scope", "unknown", 1, "a", 1},
	} {
		requireNotRenewed(t, renewSlot(t, pool, n(tc.scope), tc.slot, tc.holder, tc.fence, time.Hour))
	}
	st := mustSlotStatus(t, pool, n("s"), 1)
	if st.State != "held" || !st.ExpiresAt.Equal(*held.ExpiresAt) {
		t.Fatalf("slot after refused renewals: got %s expires_at %v, want held until %v", st.State, *st.ExpiresAt, *held.ExpiresAt)
	}
	if st := mustSlotStatus(t, pool, n("e"), 1); st.State != "expired" {
		t.Fatalf("expired slot after refused renewal: got %s, want expired", st.State)
	}

	r := renewSlot(t, pool, n("s"), 1, "a", 1, time.Second)
	if !r.Renewed || *r.ExpiresIn != time.Second || !r.ExpiresAt.Before(*held.ExpiresAt) {
		t.Fatalf("renew_slot with 1s: got renewed=%v expires_in=%s, want true, 1s (re-pinned, not added)",
			r.Renewed, ptrString(r.ExpiresIn))
	}
	requireAtMostAbout(t, "slot expires_in after renewing with 1s", *mustSlotStatus(t, pool, n("s"), 1).ExpiresIn,
		time.Second, 900*time.Millisecond)
}

func testReleaseSlotCompareAndSwap(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	held := mustClaimSlot(t, pool, n("s"), "a", 2, 30*time.Second, 1, 1)
	for _, tc := range []struct {
		desc   string
		slot   int32
		holder string
		fence  int64
	}{
		{"wrong holder", 1, "b", 1},
		{"wrong fence", 1, "a", 2},
		{"wrong slot", 2, "a", 1},
	} {
		if releaseSlot(t, pool, n("s"), tc.slot, tc.holder, tc.fence) {
			t.Fatalf("release_slot with %s: got true, want false", tc.desc)
		}
	}
	if st := mustSlotStatus(t, pool, n("s"), 1); st.State != "held" || !st.ExpiresAt.Equal(*held.ExpiresAt) {
		t.Fatalf("slot after refused releases: got %s expires_at %v, want unchanged", st.State, *st.ExpiresAt)
	}
	if !releaseSlot(t, pool, n("s"), 1, "a", 1) {
		t.Fatalf("release_slot by the holder: got false, want true")
	}
	st := mustSlotStatus(t, pool, n("s"), 1)
	if st.State != "free" || st.Holder != nil || st.Fence != 1 || st.ExpiresAt == nil || !st.ExpiresAt.Before(*held.ExpiresAt) ||
		st.ExpiresIn == nil || *st.ExpiresIn != 0 {
		t.Fatalf("released slot: got state %s holder %s fence %d expires_at %s expires_in %s, want free, NULL, 1, the release time, 0",
			st.State, ptrString(st.Holder), st.Fence, ptrString(st.ExpiresAt), ptrString(st.ExpiresIn))
	}
	if releaseSlot(t, pool, n("s"), 1, "a", 1) {
		t.Fatalf("second release_slot: got true, want false")
	}
	if inUse, slots := scopeStatus(t, pool, n("s")); inUse != 0 || slots != 1 {
		t.Fatalf("slot_scope_status: got in_use %d slots %d, want 0, 1", inUse, slots)
	}
	mustClaimSlot(t, pool, n("s"), "b", 2, 30*time.Second, 1, 2)
}

type renewHolderResult struct {
	Leases         []string
	LeaseFences    []int64
	SlotScopes     []string
	Slots          []int32
	SlotFences     []int64
	LostLeases     []string
	LostSlotScopes []string
	LostSlots      []int32
	ExpiresAt      time.Time
	ExpiresIn      time.Duration
}

func renewHolder(t testing.TB, q querier, holder string, ttl time.Duration) renewHolderResult {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var r renewHolderResult
	err := q.QueryRow(ctx, `SELECT leases, lease_fences, slot_scopes, slots, slot_fences,
			lost_leases, lost_slot_scopes, lost_slots, expires_at, expires_in
		FROM pglease.renew_holder($1, $2)`, holder, ttl).
		Scan(&r.Leases, &r.LeaseFences, &r.SlotScopes, &r.Slots, &r.SlotFences,
			&r.LostLeases, &r.LostSlotScopes, &r.LostSlots, &r.ExpiresAt, &r.ExpiresIn)
	if err != nil {
		t.Fatalf("renew_holder(%q, %v): %v", holder, ttl, err)
	}
	return r
}

// testRenewHolderOrderAndLockTimeout: renew_holder returns a holder's
// leases in byte order of their names, each with its own fence, whichever
// order they were taken in, on both of its lease paths: the single UPDATE
// (no row locked) and, when another transaction holds a row past the
// UPDATE's 20 ms bound, the pass that skips locked rows and then waits
// for them. The caller's lock_timeout is its own again after either path
// (had the 20 ms bound stayed, the wait for the locked row would fail).
func testRenewHolderOrderAndLockTimeout(t *testing.T, db *testDB) {
	n := namer(t)
	ctx := testContext(t)
	holder := n("h")
	// Names whose byte order is neither the order taken nor a linguistic
	// one; every third lease taken twice, so the fences differ.
	var want []string
	wantFence := map[string]int64{}
	for i := 299; i >= 0; i-- {
		name := n(fmt.Sprintf("%c-%03d", "aB_"[i%3], (i*7)%300))
		mustAcquire(t, db.pool, name, holder, time.Hour, 1)
		wantFence[name] = 1
		if i%3 == 0 {
			release(t, db.pool, name, holder, 1)
			mustAcquire(t, db.pool, name, holder, time.Hour, 2)
			wantFence[name] = 2
		}
		want = append(want, name)
	}
	sort.Strings(want) // byte order
	locked := want[len(want)/2]

	renewer, locker := connect(t, db.url), connect(t, db.url)
	renewerPID, lockerPID := backendPID(t, renewer), backendPID(t, locker)
	for _, lockOne := range []bool{false, true} {
		tx, err := renewer.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, tx, `SET LOCAL lock_timeout = '7s'`)
		var lockTx pgx.Tx
		if lockOne {
			if lockTx, err = locker.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			mustExec(t, lockTx, `SELECT 1 FROM pglease.leases WHERE name = $1 FOR SHARE`, locked)
		}
		got := make(chan renewHolderResult, 1)
		go func() { got <- renewHolder(t, tx, holder, time.Minute) }()
		if lockOne {
			// Blocked, and then past the UPDATE's 20 ms bound on the
			// server's clock (a lease taken after the wait began has
			// expired): the UPDATE gave way and the slow path waits.
			waitBlockedBy(t, db.pool, renewerPID, lockerPID)
			mustAcquire(t, db.pool, n("clock"), n("clock"), 200*time.Millisecond, 1)
			waitLeaseState(t, db.pool, n("clock"), "expired")
			if err := lockTx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r := <-got
		if !reflect.DeepEqual(r.Leases, want) {
			t.Fatalf("lock one row %v: renew_holder leases not all in byte order:\ngot  %v\nwant %v", lockOne, r.Leases, want)
		}
		for i, name := range r.Leases {
			if r.LeaseFences[i] != wantFence[name] {
				t.Fatalf("lock one row %v: %s: got fence %d, want %d", lockOne, name, r.LeaseFences[i], wantFence[name])
			}
		}
		var timeout string
		if err := tx.QueryRow(ctx, `SELECT current_setting('lock_timeout')`).Scan(&timeout); err != nil {
			t.Fatal(err)
		}
		if timeout != "7s" {
			t.Fatalf("lock one row %v: lock_timeout after renew_holder: got %s, want the caller's 7s", lockOne, timeout)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// testRenewHolderNeverShortens: renew_holder moves no tenure's end
// earlier. A tenure that already ends later than now + p_ttl (granted
// with a longer TTL, or while the call ran) keeps its end and is renewed;
// the call's expires_at is a lower bound of every renewed tenure's end,
// not that end.
func testRenewHolderNeverShortens(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	a := n("a")
	mustAcquire(t, pool, n("L-long"), a, time.Hour, 1)
	mustClaimSlot(t, pool, n("S-long"), a, 1, time.Hour, 1, 1)
	lease, slot := mustLeaseStatus(t, pool, n("L-long")), mustSlotStatus(t, pool, n("S-long"), 1)
	r := renewHolder(t, pool, a, time.Minute)
	if !reflect.DeepEqual(r.Leases, []string{n("L-long")}) || !reflect.DeepEqual(r.SlotScopes, []string{n("S-long")}) {
		t.Fatalf("renew_holder renewed leases %v, slots of %v; want %s and %s", r.Leases, r.SlotScopes, n("L-long"), n("S-long"))
	}
	if got := mustLeaseStatus(t, pool, n("L-long")); !got.ExpiresAt.Equal(*lease.ExpiresAt) {
		t.Errorf("lease taken for 1h, renew_holder for 1m: expires_at %v, want it kept at %v", *got.ExpiresAt, *lease.ExpiresAt)
	}
	if got := mustSlotStatus(t, pool, n("S-long"), 1); !got.ExpiresAt.Equal(*slot.ExpiresAt) {
		t.Errorf("slot claimed for 1h, renew_holder for 1m: expires_at %v, want it kept at %v", *got.ExpiresAt, *slot.ExpiresAt)
	}
	if r.ExpiresIn != time.Minute || !r.ExpiresAt.Before(*lease.ExpiresAt) || !r.ExpiresAt.Before(*slot.ExpiresAt) {
		t.Errorf("renew_holder for 1m: got expires_at %v, expires_in %v; want 1m and a lower bound of the tenures' ends %v, %v",
			r.ExpiresAt, r.ExpiresIn, *lease.ExpiresAt, *slot.ExpiresAt)
	}
}

func testRenewHolder(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	a := n("a") // renew_holder touches every row of a: a holder of its own

	// Holder a has, of each kind: live ones, expired ones, ones taken over
	// by b after they expired, and released ones.
	mustAcquire(t, pool, n("L-live-1"), a, 30*time.Second, 1)
	mustAcquire(t, pool, n("L-live-2"), a, 30*time.Second, 1)
	release(t, pool, n("L-live-2"), a, 1)
	mustAcquire(t, pool, n("L-live-2"), a, 30*time.Second, 2)
	mustAcquire(t, pool, n("L-exp"), a, shortTTL, 1)
	mustAcquire(t, pool, n("L-taken"), a, shortTTL, 1)
	mustAcquire(t, pool, n("L-rel"), a, 30*time.Second, 1)
	release(t, pool, n("L-rel"), a, 1)
	mustAcquire(t, pool, n("L-other"), "b", 30*time.Second, 1)
	mustClaimSlot(t, pool, n("S-live"), "x", 2, 30*time.Second, 1, 1)
	mustClaimSlot(t, pool, n("S-live"), a, 2, 30*time.Second, 2, 1)
	mustClaimSlot(t, pool, n("S-exp"), a, 1, shortTTL, 1, 1)
	mustClaimSlot(t, pool, n("S-taken"), a, 1, shortTTL, 1, 1)
	mustClaimSlot(t, pool, n("S-rel"), a, 1, 30*time.Second, 1, 1)
	releaseSlot(t, pool, n("S-rel"), 1, a, 1)
	waitLeaseState(t, pool, n("L-taken"), "expired")
	waitLeaseState(t, pool, n("L-exp"), "expired")
	waitSlotState(t, pool, n("S-taken"), 1, "expired")
	waitSlotState(t, pool, n("S-exp"), 1, "expired")
	mustAcquire(t, pool, n("L-taken"), "b", 30*time.Second, 2)
	mustClaimSlot(t, pool, n("S-taken"), "b", 1, 30*time.Second, 1, 2)
	bLease := mustLeaseStatus(t, pool, n("L-other"))

	r := renewHolder(t, pool, a, time.Minute)
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"leases", r.Leases, []string{n("L-live-1"), n("L-live-2")}},
		{"lease_fences", r.LeaseFences, []int64{1, 2}},
		{"slot_scopes", r.SlotScopes, []string{n("S-live")}},
		{"slots", r.Slots, []int32{2}},
		{"slot_fences", r.SlotFences, []int64{1}},
		{"lost_leases", r.LostLeases, []string{n("L-exp")}},
		{"lost_slot_scopes", r.LostSlotScopes, []string{n("S-exp")}},
		{"lost_slots", r.LostSlots, []int32{1}},
		{"expires_in", r.ExpiresIn, time.Minute},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("renew_holder %s: got %v, want %v", c.what, c.got, c.want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	for _, name := range []string{n("L-live-1"), n("L-live-2")} {
		if st := mustLeaseStatus(t, pool, name); !st.ExpiresAt.Equal(r.ExpiresAt) {
			t.Fatalf("%s expires_at: got %v, want %v", name, *st.ExpiresAt, r.ExpiresAt)
		}
	}
	if st := mustSlotStatus(t, pool, n("S-live"), 2); !st.ExpiresAt.Equal(r.ExpiresAt) {
		t.Fatalf("S-live slot 2 expires_at: got %v, want %v", *st.ExpiresAt, r.ExpiresAt)
	}
	if st := mustSlotStatus(t, pool, n("S-live"), 1); st.ExpiresAt.Equal(r.ExpiresAt) {
		t.Fatalf("x's slot was renewed by renew_holder(a)")
	}
	if st := mustLeaseStatus(t, pool, n("L-exp")); st.State != "expired" {
		t.Fatalf("L-exp after renew_holder: got %s, want still expired", st.State)
	}
	if st := mustSlotStatus(t, pool, n("S-exp"), 1); st.State != "expired" {
		t.Fatalf("S-exp after renew_holder: got %s, want still expired", st.State)
	}
	if st := mustLeaseStatus(t, pool, n("L-taken")); *st.Holder != "b" || st.Fence != 2 {
		t.Fatalf("L-taken after renew_holder: got %s fence %d, want b, 2", ptrString(st.Holder), st.Fence)
	}
	if st := mustLeaseStatus(t, pool, n("L-other")); !st.ExpiresAt.Equal(*bLease.ExpiresAt) {
		t.Fatalf("b's lease was renewed by renew_holder(a)")
	}

	// Nothing at all: empty arrays, not NULL.
	none := renewHolder(t, pool, n("nobody"), time.Minute)
	for what, arr := range map[string]int{
		"leases": len(none.Leases), "slots": len(none.Slots), "lost_leases": len(none.LostLeases), "lost_slots": len(none.LostSlots),
	} {
		if arr != 0 {
			t.Fatalf("renew_holder(nobody) %s: got %d elements, want 0", what, arr)
		}
	}
	if none.Leases == nil || none.LeaseFences == nil || none.SlotScopes == nil || none.Slots == nil || none.SlotFences == nil ||
		none.LostLeases == nil || none.LostSlotScopes == nil || none.LostSlots == nil {
		t.Fatalf("renew_holder(nobody): got NULL arrays %+v, want empty arrays", none)
	}
}

// testClaimSlotRetryIn checks that a refused claim says when the earliest
// live slot expires.
func testClaimSlotRetryIn(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)

	mustClaimSlot(t, pool, n("s"), "long", 2, time.Minute, 1, 1)
	short := mustClaimSlot(t, pool, n("s"), "short", 2, 10*time.Second, 2, 1)
	r := claimSlot(t, pool, n("s"), "c", 2, time.Minute)
	if r.Claimed || r.InUse != 2 || r.RetryIn == nil {
		t.Fatalf("claim of a full scope: got %s, want refused with in_use 2 and retry_in", r)
	}
	requireAtMostAbout(t, "retry_in", *r.RetryIn, 10*time.Second, 2*time.Second)
	if st := mustSlotStatus(t, pool, n("s"), 2); !st.ExpiresAt.Equal(*short.ExpiresAt) {
		t.Fatalf("the refused claim changed slot 2")
	}
}

func testSlotStatusViews(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)
	v := n("v")

	// The views read the clock, not the transaction start: a transaction
	// begun before the slots were claimed sees slot 3 expire.
	tx := beginBefore(t, pool)
	mustClaimSlot(t, pool, v, "held", 3, 30*time.Second, 1, 1)
	mustClaimSlot(t, pool, v, "freed", 3, 30*time.Second, 2, 1)
	mustClaimSlot(t, pool, v, "gone", 3, shortTTL, 3, 1)
	releaseSlot(t, pool, v, 2, "freed", 1)
	waitSlotState(t, pool, v, 3, "expired")
	if st := mustSlotStatus(t, tx, v, 3); st.State != "expired" {
		t.Fatalf("slot_status in a transaction begun before the expiry: got %s, want expired", st.State)
	}
	if inUse, _ := scopeStatus(t, tx, v); inUse != 1 {
		t.Fatalf("slot_scope_status in a transaction begun before the expiry: got in_use %d, want 1", inUse)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	held := mustSlotStatus(t, pool, v, 1)
	if held.State != "held" || ptrString(held.Holder) != "held" || held.ExpiresIn == nil {
		t.Fatalf("held slot: got %s %s", held.State, ptrString(held.Holder))
	}
	requireAtMostAbout(t, "held slot expires_in", *held.ExpiresIn, 30*time.Second, 5*time.Second)
	if st := mustSlotStatus(t, pool, v, 2); st.State != "free" || st.Holder != nil || st.ExpiresAt == nil ||
		st.ExpiresIn == nil || *st.ExpiresIn != 0 {
		t.Fatalf("free slot: got %s %s expires_at %s expires_in %s, want free, NULL, when released, 0",
			st.State, ptrString(st.Holder), ptrString(st.ExpiresAt), ptrString(st.ExpiresIn))
	}
	if st := mustSlotStatus(t, pool, v, 3); st.State != "expired" || ptrString(st.Holder) != "gone" ||
		st.ExpiresAt == nil || st.ExpiresIn == nil || *st.ExpiresIn != 0 {
		t.Fatalf("expired slot: got %s %s expires_in %s, want expired, gone, 0", st.State, ptrString(st.Holder), ptrString(st.ExpiresIn))
	}
	if inUse, slots := scopeStatus(t, pool, v); inUse != 1 || slots != 3 {
		t.Fatalf("slot_scope_status: got in_use %d slots %d, want 1, 3", inUse, slots)
	}
}
