package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// claimUnitsSQL is the weighted claim (0.3.0); slotsOnlyCapacity is the
// capacity of its rows, slotsOnlyUnits the unit counts compared.
const (
	claimUnitsSQL     = `SELECT claimed, slot, fence FROM pglease.claim_slot($1, $2, $3, $4, $5)`
	renewSlotSQL      = `SELECT renewed FROM pglease.renew_slot($1, $2, $3, $4, $5)`
	slotsOnlyCapacity = 64
	slotsOnlyRenews   = 2000
	hotShareSQL       = `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = 'pglease' AND relname = $1`
)

var slotsOnlyUnits = []int{1, 4, 16}

// The slot cycle's floor: what a claim and a release of pglease's slot
// design do at the least, with no test and no decision. The claim takes the
// scope lock (exact counting serialises a scope's claims), locks the
// holder's rows in the scope (re-entrancy) and takes slot 1 in place by its
// primary key (a new fence: the row's holder, check_at, capacity and units
// change, so the update writes every index entry a take does). The release
// locks its row and tries the scope lock (what keeps a wake-up from being
// lost) in one statement, and ends the tenure as release_slot does. Both
// are SECURITY DEFINER PL/pgSQL with a pinned search_path, as pglease's
// functions are.
// They live in the bench's scratch database and write pglease.slots
// itself, so every index and every domain of the real table is paid.
const (
	slotFloorKey          = "slots-only/floor"
	slotFloorFunctionsSQL = `
CREATE OR REPLACE FUNCTION bench_slot_floor_claim(
    p_scope text, p_holder text, p_capacity integer, p_ttl interval, p_units integer,
    OUT claimed boolean, OUT slot integer, OUT fence bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_now   timestamptz;
    v_count integer;
BEGIN
    SELECT sc.counted INTO v_count FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope FOR UPDATE;
    PERFORM 1 FROM pglease.slots AS s WHERE s.scope = p_scope AND s.holder = p_holder FOR NO KEY UPDATE;
    v_now := clock_timestamp();
    UPDATE pglease.slots AS s
    SET holder = p_holder, holder_role = session_user, capacity = p_capacity, units = p_units,
        fence = s.fence + 1, acquired_at = v_now, expires_at = v_now + p_ttl, check_at = v_now + p_ttl
    WHERE s.scope = p_scope AND s.slot = 1 AND s.expires_at <= v_now
    RETURNING true, s.slot, s.fence INTO claimed, slot, fence;
END
$$;
CREATE OR REPLACE FUNCTION bench_slot_floor_release(
    p_scope text, p_slot integer, p_holder text, p_fence bigint, OUT released boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_tid tid;
BEGIN
    SELECT s.ctid INTO v_tid FROM pglease.slots AS s, pglease.slot_scopes AS sc
    WHERE s.scope = p_scope AND s.slot = p_slot AND s.holder = p_holder AND s.fence = p_fence
      AND sc.scope = p_scope
    FOR NO KEY UPDATE OF s SKIP LOCKED FOR UPDATE OF sc SKIP LOCKED;
    UPDATE pglease.slots AS s
    SET holder = NULL, expires_at = clock_timestamp(), check_at = clock_timestamp()
    WHERE s.ctid = v_tid;
    released := FOUND;
END
$$;`
	slotFloorClaimSQL   = `SELECT claimed, slot, fence FROM bench_slot_floor_claim($1, $2, $3, $4, $5)`
	slotFloorReleaseSQL = `SELECT released FROM bench_slot_floor_release($1, $2, $3, $4)`
)

// slotFloorCycle is the floor's claim of one unit of capacity in scope and
// its release, on rows a real claim and release made first.
func slotFloorCycle(ctx context.Context, conn *pgx.Conn, scope string, capacity int) ([]step, error) {
	// The scope's row and its slot 1, as pglease makes them.
	for _, s := range unitsCycle(conn, scope, capacity, 1) {
		if err := s(ctx); err != nil {
			return nil, fmt.Errorf("the floor's rows: %w", err)
		}
	}
	return claimCycle(conn, scope, ownHolder(scope), slotFloorClaimSQL, slotFloorReleaseSQL, capacity, cycleTTL, 1), nil
}

// unitsCycle is a claim of units units of scope at capacity and its release.
func unitsCycle(conn *pgx.Conn, scope string, capacity, units int) []step {
	return claimCycle(conn, scope, ownHolder(scope), claimUnitsSQL, releaseSlotSQL, capacity, cycleTTL, units)
}

// slotsOnlyWorkloads: the lease cycle, the 0.2.0 claim of one slot, and
// the weighted claims, each client in a scope (lease) of its own.
func (e *env) slotsOnlyWorkloads() []workload {
	ws := []workload{e.acquireReleaseSQL("acquire-release/sql", "SQL via pgx", releaseSQL)}
	key := "slots-only/one"
	ws = append(ws, workload{
		key: key, name: fmt.Sprintf("claim_slot (0.2.0 form) + release_slot, capacity %d", slotsOnlyCapacity), path: "SQL via pgx",
		steps: []string{"claim", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				scope := id(key, i)
				return slotCycle(conn, scope, ownHolder(scope), slotsOnlyCapacity), nil
			})
		},
	})
	for _, u := range slotsOnlyUnits {
		key := fmt.Sprintf("slots-only/units-%d", u)
		ws = append(ws, workload{
			key: key, name: fmt.Sprintf("claim_slot of %d unit(s) + release_slot, capacity %d", u, slotsOnlyCapacity), path: "SQL via pgx",
			steps: []string{"claim", "release"},
			start: func(ctx context.Context, n int) (*instance, error) {
				return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
					return unitsCycle(conn, id(key, i), slotsOnlyCapacity, u), nil
				})
			},
		})
	}
	ws = append(ws, workload{
		key: slotFloorKey, name: fmt.Sprintf("floor: the scope lock, the holder's rows and a take by primary key + the release's locks and update, capacity %d", slotsOnlyCapacity), path: "SQL via pgx, PL/pgSQL with no test",
		steps: []string{"claim", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			if err := e.exec(ctx, slotFloorFunctionsSQL); err != nil {
				return nil, fmt.Errorf("create the slot floor's functions: %w", err)
			}
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				return slotFloorCycle(ctx, conn, id(slotFloorKey, i), slotsOnlyCapacity)
			})
		},
	})
	return ws
}

// renewShare times renew and renew_slot on the server (EXPLAIN ANALYZE,
// median of slotsOnlyRenews each, interleaved) on a live lease and a live
// slot, and returns the slot renewals' share of HOT updates.
func (e *env) renewShare(ctx context.Context) (renew, renewSlot time.Duration, hot float64, err error) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return 0, 0, 0, err
	}
	defer conn.Close(ctx)
	const name, holder = "slots-only/renew", "bench/slots-only/renew"
	fence, err := sqlAcquire(ctx, conn, name, holder, heldTTL)
	if err != nil {
		return 0, 0, 0, err
	}
	var claimed bool
	var slot *int32
	var sfence *int64
	if err := conn.QueryRow(ctx, claimUnitsSQL, name, holder, slotsOnlyCapacity, heldTTL, 1).Scan(&claimed, &slot, &sfence); err != nil || !claimed {
		return 0, 0, 0, errors.Join(err, errRefused("claim_slot "+name))
	}
	var upd0, hot0 int64
	if err := conn.QueryRow(ctx, hotShareSQL, "slots").Scan(&upd0, &hot0); err != nil {
		return 0, 0, 0, err
	}
	rs, ss := make([]time.Duration, slotsOnlyRenews), make([]time.Duration, slotsOnlyRenews)
	for i := range rs {
		if rs[i], err = explainExec(ctx, conn, renewSQL, name, holder, fence, heldTTL); err != nil {
			return 0, 0, 0, err
		}
		if ss[i], err = explainExec(ctx, conn, renewSlotSQL, name, *slot, holder, *sfence, heldTTL); err != nil {
			return 0, 0, 0, err
		}
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, 0, 0, err
	}
	// The statistics of this backend are flushed at its next transaction.
	var upd, hotUpd int64
	if err := conn.QueryRow(ctx, hotShareSQL, "slots").Scan(&upd, &hotUpd); err != nil {
		return 0, 0, 0, err
	}
	if upd > upd0 {
		hot = float64(hotUpd-hot0) / float64(upd-upd0)
	}
	return median(rs), median(ss), hot, nil
}

// cycleServerTimes times a claim of one unit of capacity slotsOnlyCapacity
// with its release, and an acquire with its release, on the server
// (EXPLAIN ANALYZE, median of slotsOnlyRenews cycles each), the two cycles
// taking turns on one connection, so that a drift of the machine's speed
// hits both alike (unlike throughput, whose rows run a second apart).
func (e *env) cycleServerTimes(ctx context.Context) (slot, lease time.Duration, err error) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(ctx)
	const name, holder = "slots-only/server-time", "bench/slots-only/server-time"
	ss, ls := make([]time.Duration, slotsOnlyRenews), make([]time.Duration, slotsOnlyRenews)
	for i := -1; i < slotsOnlyRenews; i++ { // one warm-up cycle each
		claim, err := explainExec(ctx, conn, claimUnitsSQL, name, holder, slotsOnlyCapacity, cycleTTL, 1)
		if err != nil {
			return 0, 0, err
		}
		var number int32
		var fence int64
		if err := conn.QueryRow(ctx, `SELECT slot, fence FROM pglease.slot_status WHERE scope = $1 AND holder = $2 AND state = 'held'`,
			name, holder).Scan(&number, &fence); err != nil {
			return 0, 0, fmt.Errorf("the claim's slot: %w", err)
		}
		release, err := explainExec(ctx, conn, releaseSlotSQL, name, number, holder, fence)
		if err != nil {
			return 0, 0, err
		}
		acquire, err := explainExec(ctx, conn, acquireSQL, name, holder, cycleTTL)
		if err != nil {
			return 0, 0, err
		}
		if err := conn.QueryRow(ctx, `SELECT fence FROM pglease.lease_status WHERE name = $1 AND holder = $2 AND state = 'held'`,
			name, holder).Scan(&fence); err != nil {
			return 0, 0, fmt.Errorf("the acquire's fence: %w", err)
		}
		releaseLease, err := explainExec(ctx, conn, releaseSQL, name, holder, fence)
		if err != nil {
			return 0, 0, err
		}
		if i >= 0 {
			ss[i], ls[i] = claim+release, acquire+releaseLease
		}
	}
	return median(ss), median(ls), nil
}

// SlotCycles is the slot section: claim + release cycles against a lease's
// acquire + release, with both cycles' server time, and renew_slot's
// server time against renew's.
type SlotCycles struct {
	CellSeconds float64 `json:"cell_seconds"`
	Rounds      int     `json:"rounds"`
	Rows        []Row   `json:"rows"`
	// The cycles' server time right after the section's VACUUM, and again
	// after its throughput rows (no VACUUM between: autovacuum is off on
	// the CI server).
	CycleUs      float64 `json:"slot_cycle_us"`
	LeaseUs      float64 `json:"lease_cycle_us"`
	CycleAfterUs float64 `json:"slot_cycle_after_us"`
	LeaseAfterUs float64 `json:"lease_cycle_after_us"`
	RenewUs      float64 `json:"renew_us"`
	RenewSlotUs  float64 `json:"renew_slot_us"`
	HotShare     float64 `json:"renew_slot_hot_share"`
}

// Targets of the slot section (issue 30).
const (
	minSlotVsLease = 0.85 // one unit of capacity 64: claim + release over acquire + release
	maxRenewSlot   = 1.15 // renew_slot's server time over renew's
	slotCyclesKey  = "slots-only/units-1"

	// slotCyclesVacuumSQL is the VACUUM autovacuum would have run after
	// the sections before the slot section of a full run (it is off on the
	// CI server), on the tables of both sides.
	slotCyclesVacuumSQL = `VACUUM (ANALYZE) pglease.leases, pglease.slots, pglease.slot_scopes`

	// slotsInUseSQL gives the new tables of -slots-only what a full run's
	// earlier sections leave, before the same VACUUM: live tenures of
	// other holders, here 2,000 slots in 200 scopes of capacity 64 and
	// 2,000 leases, so that the claims are planned on the statistics of
	// tables in use, not of empty ones.
	slotsInUseSQL = `SELECT count(*) FROM generate_series(1, 2000) AS i,
		LATERAL pglease.claim_slot('slots-only/in-use/' || i % 200, 'bench/in-use/' || i, 64, interval '1 hour', 1) AS c,
		LATERAL pglease.acquire('slots-only/in-use/' || i, 'bench/in-use', interval '1 hour') AS a`
)

// slotCycleSettings are the cell and turns of the slot section: at least
// 12 s in 12 turns, whatever the rest of the run uses, since its target is
// a median of per-turn ratios, and a virtual machine's speed drifts within
// seconds (6 turns of 1 s gave run medians 0.77–1.23× for the same floor).
func slotCycleSettings(cfg config) config {
	cfg.cell = max(cfg.cell, 12*time.Second)
	cfg.rounds = max(cfg.rounds, 12)
	return cfg
}

// benchSlotCycles measures the slot section on e at each of clients.
func (e *env) benchSlotCycles(ctx context.Context, cfg config, clients []int) (*SlotCycles, error) {
	cfg = slotCycleSettings(cfg)
	sc := &SlotCycles{CellSeconds: cfg.cell.Seconds(), Rounds: cfg.rounds}
	slot, lease, err := e.cycleServerTimes(ctx)
	if err != nil {
		return nil, fmt.Errorf("the cycles' server time: %w", err)
	}
	sc.CycleUs, sc.LeaseUs = float64(slot.Nanoseconds())/1e3, float64(lease.Nanoseconds())/1e3
	if sc.Rows, err = measureAt(ctx, e, "slot cycles", e.slotsOnlyWorkloads(), clients, cfg); err != nil {
		return nil, err
	}
	renew, renewSlot, hot, err := e.renewShare(ctx)
	if err != nil {
		return nil, fmt.Errorf("renew_slot's server time: %w", err)
	}
	sc.RenewUs, sc.RenewSlotUs, sc.HotShare = float64(renew.Nanoseconds())/1e3, float64(renewSlot.Nanoseconds())/1e3, hot
	if slot, lease, err = e.cycleServerTimes(ctx); err != nil {
		return nil, fmt.Errorf("the cycles' server time: %w", err)
	}
	sc.CycleAfterUs, sc.LeaseAfterUs = float64(slot.Nanoseconds())/1e3, float64(lease.Nanoseconds())/1e3
	return sc, nil
}

// row returns the row of key at n clients, or nil.
func (sc *SlotCycles) row(key string, n int) *Row { return findRow(sc.Rows, key, n) }

// vsLease is the row's paired ratio over the lease cycle at its C.
func (sc *SlotCycles) vsLease(row *Row) Paired {
	return pairedRatio(row, sc.row("acquire-release/sql", row.Clients))
}

// writeMarkdown writes the section's table and server times under a
// heading of level h.
func (sc *SlotCycles) writeMarkdown(w io.Writer, h string) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("%s Slots against a lease", h)
	p("")
	p("What a slot costs next to a lease: claim_slot + release_slot of 1, 4 and 16 units against acquire + release, each client in a scope (on a lease) of its own, %s s per row in %d turns, after a VACUUM (ANALYZE) of the tables, as autovacuum would run. Ratios are the median of the turn-by-turn ratios over the lease's cycle, quartiles in brackets.",
		strconv.FormatFloat(sc.CellSeconds, 'f', -1, 64), sc.Rounds)
	p("")
	p("| Cycle | C | cycles/s | × acquire + release | p50 ms | p99 ms |")
	p("| --- | ---: | ---: | ---: | ---: | ---: |")
	for i := range sc.Rows {
		row := &sc.Rows[i]
		r := sc.vsLease(row)
		p("| %s | %d | %s | %.3f× (%.3f–%.3f) | %.3f | %.3f |",
			row.Name, row.Clients, count(row.CyclesPerSec), r.Median, r.Q1, r.Q3, row.Latency.P50, row.Latency.P99)
	}
	if one, floor := sc.row(slotCyclesKey, targetClients), sc.row(slotFloorKey, targetClients); one != nil && floor != nil {
		p("")
		p("The floor row is the least a claim and a release of this design do, with no test and no decision: the scope lock, the holder's rows locked, a take of slot 1 by its primary key (every index entry a take writes), and the release's two locks and update, as SECURITY DEFINER PL/pgSQL on `pglease.slots` itself. At C=%d it makes %.3f× a lease's cycle; one unit of capacity %d makes %.3f× the floor's.",
			targetClients, sc.vsLease(floor).Median, slotsOnlyCapacity, pairedRatio(one, floor).Median)
	}
	p("")
	p("Server time (EXPLAIN ANALYZE, median of %d each, interleaved): renew %.1f µs, renew_slot %.1f µs, %.2f× (target at most %.2f×); %.0f%% of those slot renewals were HOT updates.",
		slotsOnlyRenews, sc.RenewUs, sc.RenewSlotUs, sc.RenewSlotUs/sc.RenewUs, maxRenewSlot, 100*sc.HotShare)
	if sc.LeaseUs > 0 && sc.LeaseAfterUs > 0 {
		p("")
		p("The cycles' server time, taking turns cycle by cycle on one connection (EXPLAIN ANALYZE, median of %d each; no round trip, no commit), so that a drift of the machine's speed hits both alike (the throughput rows above run a second apart): right after the section's VACUUM, claim_slot of 1 unit + release_slot %.1f µs against acquire + release %.1f µs, %.2f×; after the throughput rows, on the dead rows they left, %.1f µs against %.1f µs, %.2f×.",
			slotsOnlyRenews, sc.CycleUs, sc.LeaseUs, sc.CycleUs/sc.LeaseUs, sc.CycleAfterUs, sc.LeaseAfterUs, sc.CycleAfterUs/sc.LeaseAfterUs)
	}
}

// checkSlotTargets adds the slot section's targets to r.
func (r *Report) checkSlotTargets(c int) {
	sc := r.SlotCycles
	name := fmt.Sprintf("claim_slot of 1 unit + release_slot (capacity %d) ≥ %.2f× pglease.acquire + release at C=%d", slotsOnlyCapacity, minSlotVsLease, c)
	var row *Row
	if sc != nil {
		row = sc.row(slotCyclesKey, c)
	}
	if row == nil {
		r.unmeasured(name)
	} else {
		v := sc.vsLease(row)
		detail := fmt.Sprintf("%.3f× median of %d turns (quartiles %.3f–%.3f); %s cycles/s", v.Median, v.N, v.Q1, v.Q3, count(row.CyclesPerSec))
		if floor := sc.row(slotFloorKey, c); floor != nil {
			detail += fmt.Sprintf("; the design's floor (no test, no decision) %.3f×, and this cycle %.3f× the floor's", sc.vsLease(floor).Median, pairedRatio(row, floor).Median)
		}
		r.add(name, v.Median >= minSlotVsLease, "%s", detail)
	}
	name = fmt.Sprintf("renew_slot's server time ≤ %.2f× renew's, with its share of HOT updates", maxRenewSlot)
	if sc == nil || sc.RenewUs == 0 {
		r.unmeasured(name)
		return
	}
	ratio := sc.RenewSlotUs / sc.RenewUs
	r.add(name, ratio <= maxRenewSlot, "%.2f× (%.1f µs vs %.1f µs); %.0f%% HOT", ratio, sc.RenewSlotUs, sc.RenewUs, 100*sc.HotShare)
}

// runSlotsBench runs only the slot section (-slots-only): the claim +
// release cycles against a lease's acquire + release at -clients, weighted
// claims of 1, 4 and 16 units of capacity 64, and renew_slot's server time
// against renew's with its share of HOT updates.
func runSlotsBench(ctx context.Context, cfg config) (err error) {
	sc, err := createScratch(ctx, cfg.url, scratchName("_slots"))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropScratch(ctx, sc)) }()
	e := &env{url: sc.url}
	if err := e.exec(ctx, slotsInUseSQL); err != nil {
		return fmt.Errorf("tenures of other holders: %w", err)
	}
	if err := e.exec(ctx, slotCyclesVacuumSQL); err != nil {
		return err
	}
	load := loadavg()
	cycles, err := e.benchSlotCycles(ctx, cfg, cfg.clients)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	cycles.writeMarkdown(&md, "##")
	fmt.Printf("%s\nLoad average %s at the start, %s at the end; %d CPUs.\n", md.Bytes(), load, loadavg(), runtime.NumCPU())
	return nil
}
