//go:build sharded

package shardtest

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestProxyHasThePartitionsSignatures checks the proxy's catalog against a
// partition's: every public function with the same arguments and result,
// every view with the same columns and types. (scripts/gen-proxy.sh copies
// the signatures; this proves the copy is what Postgres sees.)
func TestProxyHasThePartitionsSignatures(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 2)
	const functions = `SELECT p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ') -> ' ||
			pg_catalog.pg_get_function_result(p.oid)
		FROM pg_catalog.pg_proc AS p WHERE p.pronamespace = 'pglease'::regnamespace AND p.proname !~ '^_'
		ORDER BY 1`
	const views = `SELECT c.relname || '.' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
		FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid
		WHERE c.relnamespace = 'pglease'::regnamespace AND c.relkind = 'v' AND a.attnum > 0
		ORDER BY c.relname, a.attnum`
	for _, q := range []string{functions, views} {
		partition := column(t, s.Partitions[0].URL, q)
		proxy := column(t, s.ProxyURL, q)
		// partition_of is the proxy's own.
		proxy = slices.DeleteFunc(proxy, func(f string) bool { return strings.HasPrefix(f, "partition_of(") })
		if !slices.Equal(partition, proxy) {
			t.Fatalf("catalog differs:\n partition %q\n proxy     %q", partition, proxy)
		}
	}
	// And the proxy answers with the partitions' schema version (head).
	const version = `SELECT pglease.version()`
	if p, x := column(t, s.Partitions[0].URL, version), column(t, s.ProxyURL, version); !slices.Equal(p, x) || len(p) != 1 {
		t.Fatalf("pglease.version(): partition %q, proxy %q; want one and the same", p, x)
	}
}

// column runs q on url and returns its one text column.
func column(t *testing.T, url, q string) []string {
	t.Helper()
	conn, err := pgx.Connect(testContext(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(testContext(t)) }()
	rows, _ := conn.Query(testContext(t), q)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return out
}

// TestRouting checks that names spread over every partition, on both
// clusters, and that each lives only on the partition partition_of names.
func TestRouting(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "route"))
	perPartition := make([]int, len(s.Partitions))
	for i := range 64 {
		name := "route-" + string(rune('a'+i%26)) + time.Duration(i).String()
		mustAcquire(t, proxy, name, "h", time.Minute, 1)
		p := partitionOf(t, proxy, name)
		perPartition[p]++
		for _, part := range s.Partitions {
			var n int
			conn := pool(t, part.URL, "")
			if err := conn.QueryRow(testContext(t), `SELECT count(*) FROM pglease.leases WHERE name = $1`, name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 1, false: 0}[part.Index == p]; n != want {
				t.Fatalf("lease %q: %d rows on partition %d, want %d (partition_of says %d)", name, n, part.Index, want, p)
			}
		}
	}
	for i, n := range perPartition {
		if n == 0 {
			t.Fatalf("partition %d got none of 64 names: %v", i, perPartition)
		}
	}
	t.Logf("64 names over 4 partitions on 2 clusters: %v", perPartition)
}

// TestLeaseContract runs the lease contract through the proxy.
func TestLeaseContract(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "lease"))
	ttl := time.Minute

	t.Run("acquire, refuse, re-enter, renew, release, re-acquire", func(t *testing.T) {
		mustAcquire(t, proxy, "job", "a", ttl, 1)
		if r := acquire(t, proxy, "job", "b", ttl); r.Acquired || r.Holder != "a" || r.Fence != 1 || r.ExpiresIn <= 0 {
			t.Fatalf("second holder: got %+v, want refused, held by a with fence 1", r)
		}
		mustAcquire(t, proxy, "job", "a", ttl, 1)
		if !renew(t, proxy, "job", "a", 1, ttl) {
			t.Fatal("renew by the holder: refused")
		}
		if renew(t, proxy, "job", "b", 1, ttl) {
			t.Fatal("renew by another holder: granted")
		}
		if !release(t, proxy, "job", "a", 1) {
			t.Fatal("release by the holder: refused")
		}
		if release(t, proxy, "job", "a", 1) {
			t.Fatal("second release: granted")
		}
		mustAcquire(t, proxy, "job", "b", ttl, 2)
	})
	t.Run("expiry and takeover", func(t *testing.T) {
		mustAcquire(t, proxy, "short", "a", 100*time.Millisecond, 1)
		deadline := time.Now().Add(10 * time.Second)
		for {
			r := acquire(t, proxy, "short", "b", ttl)
			if r.Acquired {
				if r.Fence != 2 {
					t.Fatalf("takeover after expiry: fence %d, want 2", r.Fence)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("lease of 100ms TTL not expired after 10s")
			}
			time.Sleep(20 * time.Millisecond)
		}
		if renew(t, proxy, "short", "a", 1, ttl) {
			t.Fatal("renew of an expired tenure: granted")
		}
	})
	t.Run("assert_held", func(t *testing.T) {
		mustAcquire(t, proxy, "fenced", "a", ttl, 1)
		if _, err := proxy.Exec(testContext(t), `SELECT pglease.assert_held($1, $2)`, "fenced", 1); err != nil {
			t.Fatalf("assert_held with the current fence: %v", err)
		}
		_, err := proxy.Exec(testContext(t), `SELECT pglease.assert_held($1, $2)`, "fenced", 2)
		requirePgError(t, err, "PGL01", "fenced")
	})
	t.Run("a call commits on its partition whatever the caller's transaction", func(t *testing.T) {
		tx, err := proxy.Begin(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		mustAcquire(t, tx, "rolled-back", "a", ttl, 1)
		if err := tx.Rollback(testContext(t)); err != nil {
			t.Fatal(err)
		}
		if r := acquire(t, proxy, "rolled-back", "b", ttl); r.Acquired || r.Holder != "a" {
			t.Fatalf("after ROLLBACK on the proxy: got %+v, want the lease still held by a", r)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		_, err := tryAcquire(testContext(t), proxy, "", "a", ttl)
		requirePgError(t, err, "22023", "p_name")
		_, err = proxy.Exec(testContext(t), `SELECT * FROM pglease.acquire(NULL, 'a', '1 minute')`)
		requirePgError(t, err, "22004", "p_name")
		_, err = tryAcquire(testContext(t), proxy, "x", "a", 48*time.Hour)
		requirePgError(t, err, "22023", "p_ttl")
		_, err = proxy.Exec(testContext(t), `SELECT * FROM pglease.renew('x', 'a', -1, '1 minute')`)
		requirePgError(t, err, "22023", "p_fence")
	})
	t.Run("force_release is not a client's", func(t *testing.T) {
		_, err := proxy.Exec(testContext(t), `SELECT * FROM pglease.force_release('job')`)
		requirePgError(t, err, "42501")
		admin := pool(t, s.ProxyURL, "")
		var released bool
		var fence int64
		if err := admin.QueryRow(testContext(t), `SELECT released, fence FROM pglease.force_release('job')`).Scan(&released, &fence); err != nil || !released || fence != 2 {
			t.Fatalf("force_release by the owner: got released=%v fence=%d err=%v, want true, 2", released, fence, err)
		}
	})
}

// TestSlotContract runs the slot contract through the proxy, and the
// proxy's rule for claim_slots: all scopes share one routing tag.
func TestSlotContract(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "slot"))
	ttl := time.Minute
	claim := func(scope, holder string, capacity int) (claimed bool, slot *int32, inUse int32) {
		t.Helper()
		err := proxy.QueryRow(testContext(t), `SELECT claimed, slot, in_use FROM pglease.claim_slot($1, $2, $3, $4)`,
			scope, holder, capacity, ttl).Scan(&claimed, &slot, &inUse)
		if err != nil {
			t.Fatalf("claim_slot(%q, %q): %v", scope, holder, err)
		}
		return claimed, slot, inUse
	}

	t.Run("capacity", func(t *testing.T) {
		for i, h := range []string{"a", "b"} {
			if ok, slot, _ := claim("gpu", h, 2); !ok || slot == nil || *slot != int32(i+1) {
				t.Fatalf("claim %d: got claimed=%v slot=%v, want slot %d", i+1, ok, slot, i+1)
			}
		}
		if ok, _, inUse := claim("gpu", "c", 2); ok || inUse != 2 {
			t.Fatalf("third claim at capacity 2: got claimed=%v in_use=%d, want refused with 2 in use", ok, inUse)
		}
		var released bool
		if err := proxy.QueryRow(testContext(t), `SELECT released FROM pglease.release_slot('gpu', 1, 'a', 1)`).Scan(&released); err != nil || !released {
			t.Fatalf("release_slot: got %v, %v", released, err)
		}
		if ok, slot, _ := claim("gpu", "c", 2); !ok || *slot != 1 {
			t.Fatalf("claim after a release: got claimed=%v slot=%v, want slot 1", ok, slot)
		}
		var renewed bool
		if err := proxy.QueryRow(testContext(t), `SELECT renewed FROM pglease.renew_slot('gpu', 2, 'b', 1, '1 minute')`).Scan(&renewed); err != nil || !renewed {
			t.Fatalf("renew_slot: got %v, %v", renewed, err)
		}
	})
	t.Run("claim_slots within one tag", func(t *testing.T) {
		var claimed bool
		var slots []int32
		err := proxy.QueryRow(testContext(t), `SELECT claimed, slots FROM pglease.claim_slots('h', ARRAY['{t1}/cpu', '{t1}/gpu'], ARRAY[1, 1], '1 minute')`).
			Scan(&claimed, &slots)
		if err != nil || !claimed || !slices.Equal(slots, []int32{1, 1}) {
			t.Fatalf("claim_slots in one tag: got claimed=%v slots=%v err=%v", claimed, slots, err)
		}
		var refused *string
		err = proxy.QueryRow(testContext(t), `SELECT claimed, refused_scope FROM pglease.claim_slots('h2', ARRAY['{t1}/cpu', '{t1}/io'], ARRAY[2, 1], '1 minute')`).
			Scan(&claimed, &refused)
		if err != nil || claimed || refused == nil || *refused != "{t1}/cpu" {
			t.Fatalf("claim_slots with a full scope: got claimed=%v refused=%v err=%v", claimed, refused, err)
		}
		// All or nothing: {t1}/io was not kept.
		var inUse int32
		if err := proxy.QueryRow(testContext(t), `SELECT coalesce(max(in_use), 0) FROM pglease.slot_scope_status WHERE scope = '{t1}/io'`).Scan(&inUse); err != nil || inUse != 0 {
			t.Fatalf("scope {t1}/io after a refused claim_slots: in_use %d (%v), want 0", inUse, err)
		}
	})
	t.Run("claim_slots across tags is refused", func(t *testing.T) {
		_, err := proxy.Exec(testContext(t), `SELECT * FROM pglease.claim_slots('h', ARRAY['cpu', 'gpu'], ARRAY[1, 1], '1 minute')`)
		requirePgError(t, err, "22023", "routed by different keys")
	})
}

// TestRenewHolderAndViews checks the merged renew_holder and the status
// views over four partitions.
func TestRenewHolderAndViews(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "merge"))
	var names []string
	for p := range 4 {
		names = append(names, namesOn(t, proxy, "merge", p, 1)...)
	}
	for _, n := range names {
		mustAcquire(t, proxy, n, "holder", time.Minute, 1)
	}
	gone := namesOn(t, proxy, "gone", 3, 1)[0]
	mustAcquire(t, proxy, gone, "holder", time.Millisecond, 1)
	for _, sc := range []string{"s1", "s2", "s3"} {
		if _, err := proxy.Exec(testContext(t), `SELECT pglease.claim_slot($1, 'holder', 1, '1 minute')`, sc); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the 1ms lease to expire", func() bool {
		var state string
		err := proxy.QueryRow(testContext(t), `SELECT state FROM pglease.lease_status WHERE name = $1`, gone).Scan(&state)
		return err == nil && state == "expired"
	})
	var leases, lost, scopes []string
	var expiresIn time.Duration
	err := proxy.QueryRow(testContext(t), `SELECT leases, lost_leases, slot_scopes, expires_in FROM pglease.renew_holder('holder', '1 minute')`).
		Scan(&leases, &lost, &scopes, &expiresIn)
	if err != nil {
		t.Fatalf("renew_holder: %v", err)
	}
	slices.Sort(leases)
	slices.Sort(names)
	slices.Sort(scopes)
	if !slices.Equal(leases, names) || !slices.Equal(lost, []string{gone}) || !slices.Equal(scopes, []string{"s1", "s2", "s3"}) ||
		expiresIn > time.Minute || expiresIn < 55*time.Second {
		t.Fatalf("renew_holder: got leases %v lost %v scopes %v expires_in %v, want leases %v lost [%s] scopes [s1 s2 s3] about 1m",
			leases, lost, scopes, expiresIn, names, gone)
	}
	var held, total int
	if err := proxy.QueryRow(testContext(t), `SELECT count(*) FILTER (WHERE state = 'held'), count(*) FROM pglease.lease_status`).Scan(&held, &total); err != nil {
		t.Fatal(err)
	}
	if held != 4 || total != 5 {
		t.Fatalf("lease_status over 4 partitions: %d held of %d rows, want 4 of 5", held, total)
	}
	var purged int64
	if err := proxy.QueryRow(testContext(t), `SELECT pglease.purge('0 seconds')`).Scan(&purged); err != nil || purged != 1 {
		t.Fatalf("purge over 4 partitions: got %d (%v), want 1 (the expired lease)", purged, err)
	}
}

// TestMetricsThroughProxy checks the merged pglease.metrics over four
// partitions: the per-name arrays of every partition sorted by name and
// cut at p_max_names, the names cut counted as dropped, the totals and
// table rows summed, and the proxy's figures equal to the sum of the
// partitions' own.
func TestMetricsThroughProxy(t *testing.T) {
	t.Parallel()
	s := newSharded(t, fleet, 4)
	proxy := pool(t, s.ProxyURL, newRole(t, fleet, "metrics"))
	var names []string
	for p := range 4 {
		names = append(names, namesOn(t, proxy, "m", p, 2)...)
	}
	for _, n := range names {
		mustAcquire(t, proxy, n, "holder", time.Minute, 1)
	}
	gone := names[len(names)-1]
	if !release(t, proxy, gone, "holder", 1) {
		t.Fatalf("release of %s: got false", gone)
	}
	for _, sc := range []string{"s1", "s2", "s3"} {
		if _, err := proxy.Exec(testContext(t), `SELECT pglease.claim_slot($1, 'holder', 2, '1 minute')`, sc); err != nil {
			t.Fatal(err)
		}
	}
	// The order of the proxy database's collation (the partitions').
	if err := proxy.QueryRow(testContext(t), `SELECT array_agg(n ORDER BY n) FROM unnest($1::text[]) AS n`, names).Scan(&names); err != nil {
		t.Fatal(err)
	}

	const q = `SELECT version, lease_names, lease_held, lease_fences, leases_dropped, scope_names, scope_in_use,
		scope_capacities, scopes_dropped, leases_held, leases_free, slots_held, tables, table_rows, table_bytes,
		lease_oldest_free_seconds
		FROM pglease.metrics($1, $2)`
	type row struct {
		version                string
		leases                 []string
		held                   []bool
		fences                 []int64
		leasesDropped          int64
		scopes                 []string
		inUse, capacities      []int32
		scopesDropped          int64
		leasesHeld, leasesFree int64
		slotsHeld              int64
		tables                 []string
		rows, bytes            []int64
		oldestFree             float64
	}
	read := func(q2 querier, names string, max int) row {
		t.Helper()
		var r row
		err := q2.QueryRow(testContext(t), q, names, max).Scan(&r.version, &r.leases, &r.held, &r.fences, &r.leasesDropped,
			&r.scopes, &r.inUse, &r.capacities, &r.scopesDropped, &r.leasesHeld, &r.leasesFree, &r.slotsHeld,
			&r.tables, &r.rows, &r.bytes, &r.oldestFree)
		if err != nil {
			t.Fatalf("pglease.metrics(%q, %d): %v", names, max, err)
		}
		return r
	}

	all := read(proxy, "", 100)
	if !slices.Equal(all.leases, names) || all.leasesDropped != 0 || all.leasesHeld != 7 || all.leasesFree != 1 {
		t.Fatalf("metrics through the proxy: leases %q (%d dropped), %d held, %d free; want %q, 7 held, 1 free",
			all.leases, all.leasesDropped, all.leasesHeld, all.leasesFree, names)
	}
	for i, n := range all.leases {
		if all.held[i] != (n != gone) || all.fences[i] != 1 {
			t.Errorf("lease %s: held %v fence %d, want held %v fence 1", n, all.held[i], all.fences[i], n != gone)
		}
	}
	if !slices.Equal(all.scopes, []string{"s1", "s2", "s3"}) || !slices.Equal(all.inUse, []int32{1, 1, 1}) ||
		!slices.Equal(all.capacities, []int32{2, 2, 2}) || all.slotsHeld != 3 || all.oldestFree <= 0 {
		t.Errorf("scopes through the proxy: %q in use %v capacities %v, %d slots held, oldest free %v", all.scopes, all.inUse,
			all.capacities, all.slotsHeld, all.oldestFree)
	}

	// The cap applies to the merged names, in order.
	capped := read(proxy, "^m-", 3)
	if !slices.Equal(capped.leases, names[:3]) || capped.leasesDropped != 5 || len(capped.held) != 3 || len(capped.fences) != 3 {
		t.Errorf("metrics('^m-', 3) through the proxy: %q, %d dropped; want %q, 5 dropped", capped.leases, capped.leasesDropped, names[:3])
	}
	if c := read(proxy, "^s[12]$", 1); !slices.Equal(c.scopes, []string{"s1"}) || c.scopesDropped != 1 || len(c.leases) != 0 {
		t.Errorf("metrics('^s[12]$', 1) through the proxy: scopes %q (%d dropped), leases %q; want [s1], 1, none", c.scopes, c.scopesDropped, c.leases)
	}

	// The proxy's totals are the partitions' summed.
	rows := make([]int64, len(all.tables))
	bytes := make([]int64, len(all.tables))
	for _, p := range s.Partitions {
		r := read(pool(t, p.URL, ""), "", 100)
		if r.version != all.version || !slices.Equal(r.tables, all.tables) {
			t.Fatalf("partition %s: version %q tables %q; proxy %q %q", p.URL, r.version, r.tables, all.version, all.tables)
		}
		for i := range all.tables {
			rows[i] += r.rows[i]
			bytes[i] += r.bytes[i]
		}
	}
	if !slices.Equal(all.rows, rows) || !slices.Equal(all.bytes, bytes) {
		t.Errorf("table rows and bytes through the proxy: %v %v; the partitions' sums %v %v", all.rows, all.bytes, rows, bytes)
	}

	// A bad expression is refused by the partitions, with its SQLSTATE.
	_, err := proxy.Exec(testContext(t), `SELECT * FROM pglease.metrics('(', 10)`)
	requirePgError(t, err, "22023", "not a valid regular expression")
}
