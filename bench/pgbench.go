package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgbenchScripts are the cross-check's scripts, each run by pgbench at
// the same concurrency in turns: client k works on its own row or lease
// (client ids count from 0). Statements counts the statements of one
// transaction of the script.
var pgbenchScripts = []struct {
	Name, Script string
	Statements   int
}{
	{"limit", `UPDATE bench_limit SET expires_at = now() + interval '30 s' WHERE name = 'pgbench/' || :client_id;
`, 1},
	{"renew-floor", `SELECT renewed FROM bench_floor_update('pgbench/' || :client_id, 'bench', 1, interval '30 s');
`, 1},
	{"renew", `SELECT renewed FROM pglease.renew('pgbench/renew/' || :client_id, 'pgbench', 1, interval '30 s');
`, 1},
	{"acquire-release", `SELECT fence AS f FROM pglease.acquire('pgbench/ar/' || :client_id, 'pgbench', interval '30 s') \gset
SELECT released FROM pglease.release('pgbench/ar/' || :client_id, 'pgbench', :f);
`, 2},
}

// pgbenchTurns is how many times each script runs, interleaved with the
// others (so that drifts of the disk's flush latency hit them alike).
const pgbenchTurns = 2

// pgbenchFallback is where Debian's postgresql-15 package puts pgbench when
// it is not on PATH.
const pgbenchFallback = "/usr/lib/postgresql/15/bin/pgbench"

var (
	pgbenchTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbenchLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
)

// PgbenchResult is pgbench's own measurement of the limit UPDATE, renew
// and its floor, and acquire + release, as a cross-check of the harness.
type PgbenchResult struct {
	Binary  string          `json:"binary,omitempty"`
	Clients int             `json:"clients"`
	Seconds int             `json:"seconds"` // per turn
	Scripts []PgbenchScript `json:"scripts,omitempty"`
	Skipped string          `json:"skipped,omitempty"` // why it did not run
}

// PgbenchScript is one script's figures, summed over its turns.
type PgbenchScript struct {
	Name          string  `json:"name"`
	TPS           float64 `json:"tps"`
	StatementsPer float64 `json:"statements_per_s"`
	LatencyMs     float64 `json:"latency_avg_ms"` // per transaction
}

// script returns the figures of the script name, or nil.
func (p PgbenchResult) script(name string) *PgbenchScript {
	for i := range p.Scripts {
		if p.Scripts[i].Name == name {
			return &p.Scripts[i]
		}
	}
	return nil
}

// runPgbench runs pgbench with each of pgbenchScripts at clients clients
// for d (whole seconds) per turn against the scratch database, as a
// cross-check of what the harness measured from Go. A missing pgbench is
// reported, not fatal.
func (e *env) runPgbench(ctx context.Context, binary string, clients int, d time.Duration) (PgbenchResult, error) {
	res := PgbenchResult{Clients: clients, Seconds: max(int(d.Round(time.Second)/time.Second), 1)}
	path, err := findPgbench(binary)
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	res.Binary = path
	conn, err := pgx.Connect(ctx, e.url)
	if err != nil {
		return res, err
	}
	defer conn.Close(ctx)
	for k := range clients {
		if _, err := conn.Exec(ctx, limitRowSQL, fmt.Sprintf("pgbench/%d", k)); err != nil {
			return res, err
		}
		// renew's script renews fence 1: the first tenure of a new name.
		var fence int64
		if err := conn.QueryRow(ctx, `SELECT fence FROM pglease.acquire($1, 'pgbench', interval '1 hour')`,
			fmt.Sprintf("pgbench/renew/%d", k)).Scan(&fence); err != nil {
			return res, err
		}
		if fence != 1 {
			return res, fmt.Errorf("pgbench: lease pgbench/renew/%d has fence %d, want 1 (a new name)", k, fence)
		}
	}
	dir, err := os.MkdirTemp("", "pglease-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	res.Scripts = make([]PgbenchScript, len(pgbenchScripts))
	for i, sc := range pgbenchScripts {
		res.Scripts[i].Name = sc.Name
		if err := os.WriteFile(filepath.Join(dir, sc.Name+".sql"), []byte(sc.Script), 0o600); err != nil {
			return res, err
		}
	}
	for range pgbenchTurns {
		for i, sc := range pgbenchScripts {
			cmd := exec.CommandContext(ctx, path, "--no-vacuum", "--protocol=prepared",
				"--client", strconv.Itoa(clients), "--jobs", "2", "--time", strconv.Itoa(res.Seconds),
				"--file", filepath.Join(dir, sc.Name+".sql"), e.url)
			out, err := cmd.CombinedOutput()
			if err != nil {
				return res, fmt.Errorf("pgbench %s: %w\n%s", sc.Name, err, out)
			}
			tps, lat := pgbenchTPS.FindSubmatch(out), pgbenchLatency.FindSubmatch(out)
			if tps == nil || lat == nil {
				return res, fmt.Errorf("pgbench %s: no tps or latency in its output:\n%s", sc.Name, out)
			}
			t, _ := strconv.ParseFloat(string(tps[1]), 64)
			l, _ := strconv.ParseFloat(string(lat[1]), 64)
			r := &res.Scripts[i]
			r.TPS += t / pgbenchTurns
			r.StatementsPer += t * float64(sc.Statements) / pgbenchTurns
			r.LatencyMs += l / pgbenchTurns
		}
	}
	return res, nil
}

// findPgbench returns binary when set, else pgbench from PATH, else the
// Debian location.
func findPgbench(binary string) (string, error) {
	if binary != "" {
		return exec.LookPath(binary)
	}
	if p, err := exec.LookPath("pgbench"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(pgbenchFallback); err == nil {
		return pgbenchFallback, nil
	}
	return "", errors.New("pgbench not found on PATH nor at " + pgbenchFallback)
}
