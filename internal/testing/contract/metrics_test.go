package contract

import (
	"context"
	"math"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/testing/pgtest"
)

// metricsRow is the row of pglease.metrics.
type metricsRow struct {
	Version         string
	LeaseNames      []string
	LeaseHeld       []bool
	LeaseExpiry     []float64
	LeaseFences     []int64
	LeasesDropped   int64
	ScopeNames      []string
	ScopeInUse      []int32
	ScopeCapacities []int32
	ScopesDropped   int64
	LeasesHeld      int64
	LeasesExpired   int64
	LeasesFree      int64
	SlotsHeld       int64
	SlotsExpired    int64
	SlotsFree       int64
	LeaseWaiters    int64
	SlotWaiters     int64
	Tables          []string
	TableRows       []int64
	TableBytes      []int64
	LeaseOldestFree float64
	ScopeOldestFree float64
	PurgedRows      int64
}

const metricsSQL = `SELECT m.version, m.lease_names, m.lease_held, m.lease_expiry_seconds, m.lease_fences,
	m.leases_dropped, m.scope_names, m.scope_in_use, m.scope_capacities, m.scopes_dropped,
	m.leases_held, m.leases_expired, m.leases_free, m.slots_held, m.slots_expired, m.slots_free,
	m.lease_waiters, m.slot_waiters, m.tables, m.table_rows, m.table_bytes,
	m.lease_oldest_free_seconds, m.scope_oldest_free_seconds, m.purged_rows
	FROM pglease.metrics($1, $2) AS m`

func readMetrics(t testing.TB, q querier, names string, maxNames int32) metricsRow {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var m metricsRow
	err := q.QueryRow(ctx, metricsSQL, names, maxNames).Scan(&m.Version, &m.LeaseNames, &m.LeaseHeld, &m.LeaseExpiry,
		&m.LeaseFences, &m.LeasesDropped, &m.ScopeNames, &m.ScopeInUse, &m.ScopeCapacities, &m.ScopesDropped,
		&m.LeasesHeld, &m.LeasesExpired, &m.LeasesFree, &m.SlotsHeld, &m.SlotsExpired, &m.SlotsFree,
		&m.LeaseWaiters, &m.SlotWaiters, &m.Tables, &m.TableRows, &m.TableBytes,
		&m.LeaseOldestFree, &m.ScopeOldestFree, &m.PurgedRows)
	if err != nil {
		t.Fatalf("pglease.metrics(%q, %d): %v", names, maxNames, err)
	}
	return m
}

// dbSorted returns names sorted as the database sorts text by default:
// the order of pglease.metrics, which follows the primary keys.
func dbSorted(t testing.TB, q querier, names []string) []string {
	t.Helper()
	ctx, cancel := callContext(t)
	defer cancel()
	var out []string
	if err := q.QueryRow(ctx, `SELECT coalesce(array_agg(n ORDER BY n), '{}') FROM unnest($1::text[]) AS n`, names).Scan(&out); err != nil {
		t.Fatalf("sort names: %v", err)
	}
	return out
}

// TestMetrics checks pglease.metrics: every figure against what the views
// and tables say, the name filter and cap, and that it is a read that
// takes no lock a holder waits for.
func TestMetrics(t *testing.T) {
	t.Parallel()
	t.Run("Totals", testMetricsTotals)
	runGroup(t, 8, []subtest{
		{"FilterAndCap", testMetricsFilterAndCap},
		{"NamesRoundTrip", testMetricsNamesRoundTrip},
		{"ReadOnlyNoLock", testMetricsReadOnlyNoLock},
	})
}

// testMetricsTotals runs on a database of its own, so that the totals are
// exactly what it made.
func testMetricsTotals(t *testing.T) {
	t.Parallel()
	pool := newPool(t, pgtest.NewMigrated(t), 4)
	ctx := testContext(t)

	// Leases: a held, b held with a refused acquire waiting, c expired (a
	// TTL of 1µs is over by the next call), d released.
	mustAcquire(t, pool, "a", "h1", time.Minute, 1)
	mustAcquire(t, pool, "b", "h1", time.Minute, 1)
	if r := acquire(t, pool, "b", "h2", time.Minute); r.Acquired {
		t.Fatal("acquire of a held lease by another holder: got acquired, want refused")
	}
	mustAcquire(t, pool, "c", "h1", time.Microsecond, 1)
	mustAcquire(t, pool, "d", "h1", time.Minute, 1)
	if !release(t, pool, "d", "h1", 1) {
		t.Fatal("release of d: got false")
	}
	// Slots: gpu full (2 of 2, a refused claim waiting); cpu's only tenure
	// expired (its capacity is its latest claim's); mixed held by claims of
	// capacity 3 and 2 (the smaller admits the next claim).
	mustClaimSlot(t, pool, "gpu", "h1", 2, time.Minute, 1, 1)
	mustClaimSlot(t, pool, "gpu", "h2", 2, time.Minute, 2, 1)
	if c := claimSlot(t, pool, "gpu", "h3", 2, time.Minute); c.Claimed {
		t.Fatalf("claim in a full scope: got %s, want refused", c)
	}
	mustClaimSlot(t, pool, "cpu", "h1", 4, time.Microsecond, 1, 1)
	mustClaimSlot(t, pool, "mixed", "h1", 3, time.Minute, 1, 1)
	mustClaimSlot(t, pool, "mixed", "h2", 2, time.Minute, 2, 1)

	m := readMetrics(t, pool, "", 100)
	var version string
	if err := pool.QueryRow(ctx, `SELECT pglease.version()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if m.Version != version {
		t.Errorf("version: got %q, want %q", m.Version, version)
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(m.LeaseNames, want) {
		t.Fatalf("lease_names: got %q, want %q", m.LeaseNames, want)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(m.LeaseHeld, want) {
		t.Errorf("lease_held: got %v, want %v", m.LeaseHeld, want)
	}
	if !slices.Equal(m.LeaseFences, []int64{1, 1, 1, 1}) {
		t.Errorf("lease_fences: got %v, want all 1", m.LeaseFences)
	}
	for i, e := range m.LeaseExpiry {
		if m.LeaseHeld[i] && (e <= 50 || e > 60) || !m.LeaseHeld[i] && (e > 0 || e < -60) {
			t.Errorf("lease_expiry_seconds of %s (held %v): got %v, want about 60 while held, 0 or less once ended",
				m.LeaseNames[i], m.LeaseHeld[i], e)
		}
	}
	if m.LeasesDropped != 0 || m.ScopesDropped != 0 {
		t.Errorf("dropped: got %d leases, %d scopes, want none", m.LeasesDropped, m.ScopesDropped)
	}
	if got, want := [3]int64{m.LeasesHeld, m.LeasesExpired, m.LeasesFree}, [3]int64{2, 1, 1}; got != want {
		t.Errorf("leases held, expired, free: got %v, want %v", got, want)
	}
	if want := []string{"cpu", "gpu", "mixed"}; !slices.Equal(m.ScopeNames, want) {
		t.Fatalf("scope_names: got %q, want %q", m.ScopeNames, want)
	}
	if want := []int32{0, 2, 2}; !slices.Equal(m.ScopeInUse, want) {
		t.Errorf("scope_in_use: got %v, want %v", m.ScopeInUse, want)
	}
	if want := []int32{4, 2, 2}; !slices.Equal(m.ScopeCapacities, want) {
		t.Errorf("scope_capacities: got %v, want %v", m.ScopeCapacities, want)
	}
	for i, sc := range m.ScopeNames {
		if inUse, _ := scopeStatus(t, pool, sc); inUse != m.ScopeInUse[i] {
			t.Errorf("scope %s: in_use %d, slot_scope_status says %d", sc, m.ScopeInUse[i], inUse)
		}
	}
	if got, want := [3]int64{m.SlotsHeld, m.SlotsExpired, m.SlotsFree}, [3]int64{4, 1, 0}; got != want {
		t.Errorf("slots held, expired, free: got %v, want %v", got, want)
	}
	if m.LeaseWaiters != 1 || m.SlotWaiters != 1 {
		t.Errorf("waiters: got %d lease, %d slot, want 1 and 1", m.LeaseWaiters, m.SlotWaiters)
	}
	if want := []string{"leases", "slots", "slot_scopes", "waiters", "slot_queue", "observers", "candidates",
		"runs", "groups", "group_shards", "group_members", "prefixes", "quotas", "purge_turns", "limits", "limit_state", "limit_reservations",
		"tenures", "history_prefixes"}; !slices.Equal(m.Tables, want) {
		t.Fatalf("tables: got %q, want %q", m.Tables, want)
	}
	for i, table := range m.Tables {
		var rows, bytes int64
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pglease.`+table+`),
				pg_catalog.pg_total_relation_size('pglease.`+table+`')`).Scan(&rows, &bytes); err != nil {
			t.Fatal(err)
		}
		if m.TableRows[i] != rows || m.TableBytes[i] != bytes {
			t.Errorf("table %s: got %d rows, %d bytes; the table has %d rows, %d bytes", table, m.TableRows[i], m.TableBytes[i], rows, bytes)
		}
	}
	// The oldest free lease is c (expired before d was released); the
	// oldest free scope is cpu.
	var cAge, cpuAge float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM clock_timestamp() - l.expires_at)::float8,
			(SELECT extract(epoch FROM clock_timestamp() - max(s.expires_at))::float8 FROM pglease.slot_status AS s WHERE s.scope = 'cpu')
		FROM pglease.lease_status AS l WHERE l.name = 'c'`).Scan(&cAge, &cpuAge); err != nil {
		t.Fatal(err)
	}
	if m.LeaseOldestFree <= 0 || m.LeaseOldestFree > cAge || cAge-m.LeaseOldestFree > 5 {
		t.Errorf("lease_oldest_free_seconds: got %v, want a little less than c's age read later, %v", m.LeaseOldestFree, cAge)
	}
	if m.ScopeOldestFree <= 0 || m.ScopeOldestFree > cpuAge || cpuAge-m.ScopeOldestFree > 5 {
		t.Errorf("scope_oldest_free_seconds: got %v, want a little less than cpu's age read later, %v", m.ScopeOldestFree, cpuAge)
	}
	if m.PurgedRows != 0 {
		t.Errorf("purged_rows before any purge: got %d, want 0", m.PurgedRows)
	}

	// A purge of everything free: c and d, and scope cpu (its slot row and
	// its scope row). Nothing free is left, and purged_rows counts them.
	var purged int64
	if err := pool.QueryRow(ctx, `SELECT pglease.purge('0')`).Scan(&purged); err != nil {
		t.Fatal(err)
	}
	m = readMetrics(t, pool, "", 100)
	if m.PurgedRows != 4 || m.LeaseOldestFree != 0 || m.ScopeOldestFree != 0 {
		t.Errorf("after purge('0') (%d rows): purged_rows %d, oldest free %v and %v; want 4, 0 and 0",
			purged, m.PurgedRows, m.LeaseOldestFree, m.ScopeOldestFree)
	}
	if !slices.Equal(m.LeaseNames, []string{"a", "b"}) || !slices.Equal(m.ScopeNames, []string{"gpu", "mixed"}) {
		t.Errorf("after purge: got leases %q, scopes %q, want [a b] and [gpu mixed]", m.LeaseNames, m.ScopeNames)
	}

	// A release moves expiry_seconds to zero or less, and a new tenure's
	// fence shows at once.
	if !release(t, pool, "a", "h1", 1) {
		t.Fatal("release of a: got false")
	}
	mustAcquire(t, pool, "a", "h2", time.Minute, 2)
	if !release(t, pool, "a", "h2", 2) {
		t.Fatal("release of a: got false")
	}
	m = readMetrics(t, pool, "^a$", 100)
	if !slices.Equal(m.LeaseNames, []string{"a"}) || m.LeaseHeld[0] || m.LeaseExpiry[0] > 0 || m.LeaseFences[0] != 2 {
		t.Errorf("a after a second tenure and its release: got names %q held %v expiry %v fence %v, want [a] false <=0 2",
			m.LeaseNames, m.LeaseHeld, m.LeaseExpiry, m.LeaseFences)
	}
}

// testMetricsFilterAndCap: p_names selects by regular expression, the cap
// keeps the first names in the database's order, and the rest are counted
// as dropped; the totals ignore both.
func testMetricsFilterAndCap(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	prefix := "^" + regexp.QuoteMeta(n(""))
	var ordered []string
	for _, name := range []string{"b", "a", "c", "B", "é"} {
		mustAcquire(t, pool, n(name), "h", time.Minute, 1)
		mustClaimSlot(t, pool, n(name), "h", 1, time.Minute, 1, 1)
		ordered = append(ordered, n(name))
	}
	ordered = dbSorted(t, pool, ordered)
	all := readMetrics(t, pool, "", 1000000)

	for _, tc := range []struct {
		names     string
		max       int32
		want      []string
		wantDrops int64
	}{
		{prefix, 100, ordered, 0},
		{prefix, 2, ordered[:2], 3},
		{prefix, 0, nil, 5},
		{prefix + "[ab]$", 100, []string{n("a"), n("b")}, 0},
		{prefix + "[ab]$", 1, []string{n("a")}, 1},
		{prefix + "nothing", 100, nil, 0},
	} {
		m := readMetrics(t, pool, tc.names, tc.max)
		want := tc.want
		if want == nil {
			want = []string{}
		}
		if !slices.Equal(m.LeaseNames, want) || m.LeasesDropped != tc.wantDrops {
			t.Errorf("metrics(%q, %d): leases %q, %d dropped; want %q, %d", tc.names, tc.max, m.LeaseNames, m.LeasesDropped, want, tc.wantDrops)
		}
		if !slices.Equal(m.ScopeNames, want) || m.ScopesDropped != tc.wantDrops {
			t.Errorf("metrics(%q, %d): scopes %q, %d dropped; want %q, %d", tc.names, tc.max, m.ScopeNames, m.ScopesDropped, want, tc.wantDrops)
		}
		if len(m.LeaseHeld) != len(want) || len(m.LeaseExpiry) != len(want) || len(m.LeaseFences) != len(want) ||
			len(m.ScopeInUse) != len(want) || len(m.ScopeCapacities) != len(want) {
			t.Errorf("metrics(%q, %d): arrays of different lengths: %d names, %d %d %d, %d %d", tc.names, tc.max,
				len(want), len(m.LeaseHeld), len(m.LeaseExpiry), len(m.LeaseFences), len(m.ScopeInUse), len(m.ScopeCapacities))
		}
		// The totals count every row of the database, whatever the filter.
		if m.LeasesHeld < 5 || m.SlotsHeld < 5 || m.LeasesHeld+m.LeasesExpired+m.LeasesFree != m.TableRows[0] {
			t.Errorf("metrics(%q, %d): totals %d held leases, %d held slots, %d lease rows: want every row counted",
				tc.names, tc.max, m.LeasesHeld, m.SlotsHeld, m.TableRows[0])
		}
	}
	// With no filter, every name of the database (the other tests' too),
	// in the database's order.
	if !slices.Equal(all.LeaseNames, dbSorted(t, pool, all.LeaseNames)) || int64(len(all.LeaseNames)) != all.TableRows[0] {
		t.Errorf("metrics('', 1000000): %d names; want all %d rows in the database's order", len(all.LeaseNames), all.TableRows[0])
	}
}

// testMetricsNamesRoundTrip: names come back byte for byte, whatever they
// hold (an exporter must escape them, not the SQL).
func testMetricsNamesRoundTrip(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	names := []string{n(`quote"`), n(`back\slash`), n("new\nline"), n("{label=\"x\"}"), n("ß日本🔒")}
	for _, name := range names {
		mustAcquire(t, pool, name, "h", time.Minute, 1)
	}
	m := readMetrics(t, pool, "^"+regexp.QuoteMeta(n("")), 100)
	want := dbSorted(t, pool, names)
	if !slices.Equal(m.LeaseNames, want) {
		t.Fatalf("lease_names: got %q, want %q", m.LeaseNames, want)
	}
}

// testMetricsReadOnlyNoLock: metrics runs in a read-only transaction, and
// while that transaction stays open a holder's renewal, a release, a
// takeover and a purge go ahead without waiting (each call is bounded by
// callTimeout: a lock wait would fail it).
func testMetricsReadOnlyNoLock(t *testing.T, db *testDB) {
	pool := db.pool
	n := namer(t)
	ctx := testContext(t)
	mustAcquire(t, pool, n("held"), "h", time.Minute, 1)
	mustAcquire(t, pool, n("free"), "h", time.Minute, 1)
	mustClaimSlot(t, pool, n("scope"), "h", 1, time.Minute, 1, 1)

	conn := connect(t, db.url)
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	before := readMetrics(t, tx, "^"+regexp.QuoteMeta(n("")), 100)
	if len(before.LeaseNames) != 2 {
		t.Fatalf("metrics in a read-only transaction: got leases %q, want 2", before.LeaseNames)
	}

	if r := renew(t, pool, n("held"), "h", 1, time.Minute); !r.Renewed {
		t.Fatal("renew while metrics' transaction is open: got false")
	}
	if !release(t, pool, n("free"), "h", 1) {
		t.Fatal("release while metrics' transaction is open: got false")
	}
	mustAcquire(t, pool, n("free"), "h2", time.Minute, 2)
	if r := renewSlot(t, pool, n("scope"), 1, "h", 1, time.Minute); !r.Renewed {
		t.Fatal("renew_slot while metrics' transaction is open: got false")
	}
	if _, err := pool.Exec(ctx, `SELECT pglease.purge('1 hour')`); err != nil {
		t.Fatalf("purge while metrics' transaction is open: %v", err)
	}
	// The open transaction still sees its snapshot: one and the same read.
	again := readMetrics(t, tx, "^"+regexp.QuoteMeta(n("")), 100)
	if !slices.Equal(again.LeaseFences, before.LeaseFences) {
		t.Errorf("fences within one repeatable-read transaction: got %v then %v", before.LeaseFences, again.LeaseFences)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	after := readMetrics(t, pool, "^"+regexp.QuoteMeta(n("")), 100)
	if !slices.Equal(after.LeaseFences, []int64{2, 1}) || math.IsNaN(after.LeaseExpiry[0]) {
		t.Errorf("fences after the takeover: got %v, want [2 1]", after.LeaseFences)
	}
}
