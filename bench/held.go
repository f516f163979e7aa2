package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The held-leases run (-held-leases): how many leases one server keeps
// alive. One holder holds n leases; each round renews them all with one
// renew_holder call (what a Keeper sends once per interval), and, as the
// floor, with one bare UPDATE of the same rows. Server CPU is the
// backend's utime+stime over the call (/proc/<pid>/stat, 10 ms ticks).
const (
	heldRounds   = 5                // rounds of each kind, alternated
	heldTTL15    = 15 * time.Second // the TTL of the target
	heldInterval = heldTTL15 / 3    // the Keeper's default interval
	heldChunk    = 50_000           // leases acquired per statement while setting up
	heldHolder   = "bench/held"
)

// HeldRow is one size of the held-leases run.
type HeldRow struct {
	Leases       int       `json:"leases"`
	RoundMs      []float64 `json:"round_ms"`       // each renew_holder call
	FloorMs      []float64 `json:"floor_ms"`       // each bare UPDATE
	RoundCPUMs   []float64 `json:"round_cpu_ms"`   // backend CPU of each renew_holder call
	FloorCPUMs   []float64 `json:"floor_cpu_ms"`   // backend CPU of each bare UPDATE
	UsPerLease   float64   `json:"us_per_lease"`   // median round CPU / leases
	FloorUs      float64   `json:"floor_us"`       // median floor CPU / leases
	CoresAt5s    float64   `json:"cores_at_5s"`    // median round CPU / interval
	NsPerLeaseS  float64   `json:"ns_per_lease_s"` // server CPU per held lease per second
	SetupSeconds float64   `json:"setup_s"`
}

const heldFloorSQL = `UPDATE pglease.leases AS l
	SET expires_at = greatest(l.expires_at, now() + $2::interval)
	WHERE l.holder = $1 AND l.expires_at > now()`

func runHeldBench(ctx context.Context, cfg config) (err error) {
	load := loadavg()
	var rows []HeldRow
	for _, n := range cfg.heldLeases {
		sc, err := createScratch(ctx, cfg.url, scratchName("_held"))
		if err != nil {
			return err
		}
		log.Printf("held leases: %d", n)
		row, err := benchHeld(ctx, sc.url, n)
		if err = errors.Join(err, dropScratch(ctx, sc)); err != nil {
			return fmt.Errorf("%d held leases: %w", n, err)
		}
		rows = append(rows, row)
	}
	fmt.Printf("## How many held leases one server keeps (TTL %s, one renew_holder call per %s)\n\n", heldTTL15, heldInterval)
	fmt.Printf("Load average %s at the start, %s at the end; %d CPUs. One holder, every lease renewed by one call per round, %d rounds, each with a bare `UPDATE` of the same rows (the floor), which goes first in every other round. CPU: the backend's utime+stime over the call; medians.\n\n",
		load, loadavg(), runtime.NumCPU(), heldRounds)
	fmt.Println("| Held leases | renew_holder call | its server CPU | per lease | bare UPDATE (floor) | floor CPU per lease | server cores at one call per 5 s | CPU per held lease per second |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		fmt.Printf("| %d | %.0f ms | %.0f ms | %.2f µs | %.0f ms | %.2f µs | %.3f | %.0f ns |\n",
			r.Leases, medianF(r.RoundMs), medianF(r.RoundCPUMs), r.UsPerLease, medianF(r.FloorMs), r.FloorUs, r.CoresAt5s, r.NsPerLeaseS)
	}
	return nil
}

// benchHeld acquires n leases for one holder, then times heldRounds
// renew_holder calls and as many bare UPDATEs, alternated.
func benchHeld(ctx context.Context, url string, n int) (HeldRow, error) {
	row := HeldRow{Leases: n}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return row, err
	}
	defer conn.Close(ctx)
	t0 := time.Now()
	for from := 1; from <= n; from += heldChunk {
		to := min(from+heldChunk-1, n)
		var got int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM generate_series($2::integer, $3::integer) AS i,
			LATERAL pglease.acquire('held/' || i, $1, interval '1 hour') AS a WHERE a.acquired`,
			heldHolder, from, to).Scan(&got); err != nil {
			return row, fmt.Errorf("acquire leases %d to %d: %w", from, to, err)
		}
		if got != to-from+1 {
			return row, fmt.Errorf("acquired %d of leases %d to %d", got, from, to)
		}
	}
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE pglease.leases"); err != nil {
		return row, err
	}
	row.SetupSeconds = time.Since(t0).Seconds()
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return row, err
	}
	timed := func(sql string, want int) (wall, cpu float64, err error) {
		c0, err := processTicks(pid)
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		var renewed int
		if sql == renewHolderSQL {
			err = conn.QueryRow(ctx, sql, heldHolder, heldTTL15).Scan(&renewed)
		} else {
			var ct pgconn.CommandTag
			ct, err = conn.Exec(ctx, sql, heldHolder, heldTTL15)
			renewed = int(ct.RowsAffected())
		}
		wall = ms(time.Since(start))
		if err != nil {
			return 0, 0, err
		}
		if renewed != want {
			return 0, 0, fmt.Errorf("renewed %d of %d leases", renewed, want)
		}
		c1, err := processTicks(pid)
		return wall, float64(c1-c0) * 1000 / clockTicks, err
	}
	for i := range heldRounds {
		// Alternate which goes first: each pays for pruning the row
		// versions the other left.
		for j := range 2 {
			if (i+j)%2 == 0 {
				w, c, err := timed(renewHolderSQL, n)
				if err != nil {
					return row, fmt.Errorf("renew_holder: %w", err)
				}
				row.RoundMs, row.RoundCPUMs = append(row.RoundMs, w), append(row.RoundCPUMs, c)
				continue
			}
			w, c, err := timed(heldFloorSQL, n)
			if err != nil {
				return row, fmt.Errorf("floor: %w", err)
			}
			row.FloorMs, row.FloorCPUMs = append(row.FloorMs, w), append(row.FloorCPUMs, c)
		}
	}
	cpu := medianF(row.RoundCPUMs)
	row.UsPerLease = cpu * 1000 / float64(n)
	row.FloorUs = medianF(row.FloorCPUMs) * 1000 / float64(n)
	row.CoresAt5s = cpu / 1000 / heldInterval.Seconds()
	row.NsPerLeaseS = row.CoresAt5s * 1e9 / float64(n)
	return row, nil
}

// medianF returns the median of xs (0 for none).
func medianF(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
