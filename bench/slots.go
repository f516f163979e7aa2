package main

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
)

// slotCapacities are the capacities the claim sweep compares with 1.
var slotCapacities = []int{1, 64, 1024, 16384}

// prefillSlots is how many slot rows the prefilled scopes get before the
// clock starts; prefillHolders is how many live holders the largest
// prefilled scope gets (the flat-in-holders target: a claim among them
// costs at most 1.5× a claim at capacity 1).
const (
	prefillSlots   = 1000
	prefillHolders = 16000
	prefillChunk   = 1000
)

// Prefill SQL: n holders claim a slot each (slot rows 1..n are created),
// and, for the "free" variant, release them again; then the table is
// vacuumed.
const (
	prefillCountSQL = `SELECT count(*) FROM pglease.slots WHERE scope = $1`
	prefillClaimSQL = `SELECT count(*) FILTER (WHERE c.claimed)
		FROM generate_series($3::integer, $4::integer) AS i,
		LATERAL pglease.claim_slot($1, 'prefill/' || i, $2, interval '1 hour') AS c`
	prefillReleaseSQL = `SELECT count(*) FILTER (WHERE r.released)
		FROM pglease.slots AS s,
		LATERAL pglease.release_slot(s.scope, s.slot, s.holder, s.fence) AS r
		WHERE s.scope = $1 AND s.holder LIKE 'prefill/%'`
	prefillVacuumSQL = `VACUUM (ANALYZE) pglease.slots`
)

// slotVariant is one row of the claim sweep.
type slotVariant struct {
	Capacity int    `json:"capacity"`
	Rows     string `json:"rows"` // what the scope holds besides the client
	// Shared: every client claims in client 0's scope (as a holder of its
	// own), instead of in a scope of its own.
	Shared  bool `json:"shared"`
	prefill func(ctx context.Context, conn *pgx.Conn, scope string, capacity int) error
}

// sharedCapacity is the capacity of the scope all clients share: above any
// concurrency the sweep runs at, so that no claim is refused.
const sharedCapacity = 64

// sharedRows is what the shared scope's row says in the tables.
const sharedRows = "the other clients (one scope shared by all)"

// slotVariants returns the sweep: each capacity on an empty scope, then the
// largest capacity on a scope with prefillSlots rows, all free and all held,
// and on a scope with prefillHolders live holders; last, one scope of
// sharedCapacity that every client claims in.
func slotVariants() []slotVariant {
	var vs []slotVariant
	for _, c := range slotCapacities {
		vs = append(vs, slotVariant{Capacity: c, Rows: "none"})
	}
	top := slotCapacities[len(slotCapacities)-1]
	return append(vs,
		slotVariant{Capacity: top, Rows: fmt.Sprintf("%d free slot rows", prefillSlots), prefill: prefill(prefillSlots, true)},
		slotVariant{Capacity: top, Rows: fmt.Sprintf("%d live holders", prefillSlots), prefill: prefill(prefillSlots, false)},
		slotVariant{Capacity: top, Rows: fmt.Sprintf("%d live holders", prefillHolders), prefill: prefill(prefillHolders, false)},
		slotVariant{Capacity: sharedCapacity, Rows: sharedRows, Shared: true},
	)
}

// prefill returns a prefill that has holders holders claim a slot of the
// scope, then release it when release is set. It does nothing when the
// scope already has its rows (a later round).
func prefill(holders int, release bool) func(ctx context.Context, conn *pgx.Conn, scope string, capacity int) error {
	return func(ctx context.Context, conn *pgx.Conn, scope string, capacity int) error {
		var rows int
		if err := conn.QueryRow(ctx, prefillCountSQL, scope).Scan(&rows); err != nil || rows >= holders {
			return err
		}
		// Claims in statements (transactions) of prefillChunk: the time
		// of a claim grows with the claims made before it in the same
		// transaction (4,000 in one took 2.3× as long as in four).
		var n int
		for from := 1; from <= holders; from += prefillChunk {
			var k int
			if err := conn.QueryRow(ctx, prefillClaimSQL, scope, capacity, from, min(from+prefillChunk-1, holders)).Scan(&k); err != nil {
				return err
			}
			n += k
		}
		if n != holders {
			return fmt.Errorf("prefill %s: %d of %d claims granted", scope, n, holders)
		}
		if release {
			if err := conn.QueryRow(ctx, prefillReleaseSQL, scope).Scan(&n); err != nil {
				return err
			}
			if n != holders {
				return fmt.Errorf("prefill %s: %d of %d releases granted", scope, n, holders)
			}
		}
		// The VACUUM (and ANALYZE) that autovacuum would start on the new
		// rows runs now, before the clock starts, and not during the
		// first measured claims: the rows measure a scope that has had its
		// holders for a while.
		_, err := conn.Exec(ctx, prefillVacuumSQL)
		return err
	}
}

// slotKey is the workload key of variant k; client i claims in scope
// id(slotKey(k), i).
func slotKey(k int) string { return fmt.Sprintf("slots/%d", k) }

// workload returns the claim+release cycle of v; unless v is Shared,
// every client claims in a scope of its own, so that only the capacity and
// the rows differ.
func (v slotVariant) workload(e *env, k int) workload {
	key := slotKey(k)
	return workload{
		key: key, name: fmt.Sprintf("capacity %d, %s", v.Capacity, v.Rows), path: "SQL via pgx",
		steps: []string{"claim", "release"},
		start: func(ctx context.Context, n int) (*instance, error) {
			return e.perConn(ctx, n, func(ctx context.Context, i int, conn *pgx.Conn) ([]step, error) {
				scope, holder := id(key, i), ownHolder(id(key, i))
				if v.Shared {
					scope = id(key, 0)
				}
				if v.prefill != nil {
					if err := v.prefill(ctx, conn, scope, v.Capacity); err != nil {
						return nil, err
					}
				}
				return slotCycle(conn, scope, holder, v.Capacity), nil
			})
		},
	}
}

// slotExecSamples is how many claims of each variant are timed by the
// server alone.
const slotExecSamples = 100

// heldSlotSQL finds the slot a claim timed under EXPLAIN took (EXPLAIN
// returns the plan, not the claim).
const heldSlotSQL = `SELECT slot, fence FROM pglease.slots WHERE scope = $1 AND holder = $2 AND expires_at > now()`

// SlotExec is the server's own execution time of a claim, without the
// round trip and the commit that dominate the latencies of the sweep.
type SlotExec struct {
	slotVariant
	ExecMs     float64 `json:"execution_ms"` // median of slotExecSamples
	ExecVsCap1 float64 `json:"execution_vs_capacity_1"`
}

// execTime returns the execution time of one claim at v's capacity in
// scope (EXPLAIN ANALYZE's Execution Time), and releases it again.
func (v slotVariant) execTime(ctx context.Context, conn *pgx.Conn, scope string) (time.Duration, error) {
	holder := ownHolder(scope)
	t, err := explainExec(ctx, conn, claimSlotSQL, scope, holder, v.Capacity, cycleTTL)
	if err != nil {
		return 0, err
	}
	var slot int32
	var fence int64
	if err := conn.QueryRow(ctx, heldSlotSQL, scope, holder).Scan(&slot, &fence); err != nil {
		return 0, fmt.Errorf("claim in %s: %w", scope, err)
	}
	var released bool
	if err := conn.QueryRow(ctx, releaseSlotSQL, scope, slot, holder, fence).Scan(&released); err != nil {
		return 0, err
	}
	if !released {
		return 0, errRefused("release_slot " + scope)
	}
	return t, nil
}

// slotExec times the claims of every variant on the server, in the scopes
// of client 0 of the sweep (already prefilled), the variants taking turns
// claim by claim so that a drift of the machine's speed hits them alike.
func (e *env) slotExec(ctx context.Context, variants []slotVariant) ([]SlotExec, error) {
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	times := make([][]time.Duration, len(variants))
	for range slotExecSamples {
		for k, v := range variants {
			t, err := v.execTime(ctx, conn, id(slotKey(k), 0))
			if err != nil {
				return nil, err
			}
			times[k] = append(times[k], t)
		}
	}
	out := make([]SlotExec, len(variants))
	for k, v := range variants {
		out[k].slotVariant = v
		out[k].ExecMs = ms(median(times[k]))
		out[k].ExecVsCap1 = out[k].ExecMs / out[0].ExecMs
	}
	return out, nil
}

// benchSlots runs the claim sweep at each of cfg.slotClients, then times the
// claims on the server.
func (e *env) benchSlots(ctx context.Context, cfg config) ([]SlotRow, []SlotExec, error) {
	variants := slotVariants()
	ws := make([]workload, len(variants))
	for k, v := range variants {
		ws[k] = v.workload(e, k)
	}
	var rows []SlotRow
	for _, n := range cfg.slotClients {
		log.Printf("slot claims at C=%d: %d variants × %s", n, len(ws), cfg.cell)
		ts, err := runGroupOn(ctx, e, ws, n, cfg)
		if err != nil {
			return nil, nil, err
		}
		base := summarize(ts[0].lat[0]).P50 // variants[0] is capacity 1, empty
		for k, v := range variants {
			s := SlotRow{
				slotVariant: v, Clients: n, CyclesPerSec: ts[k].cyclesPerSec(),
				Claim: summarize(ts[k].lat[0]), Release: summarize(ts[k].lat[1]),
			}
			s.ClaimVsCap1 = s.Claim.P50 / base
			rows = append(rows, s)
		}
	}
	log.Printf("slot claims' execution time on the server")
	// One client alone in the shared scope times what the empty scope of
	// its capacity does: that variant is left out.
	var alone []slotVariant
	for _, v := range variants {
		if !v.Shared {
			alone = append(alone, v)
		}
	}
	exec, err := e.slotExec(ctx, alone)
	if err != nil {
		return nil, nil, fmt.Errorf("slot execution time: %w", err)
	}
	return rows, exec, nil
}
