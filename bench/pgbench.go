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
)

// pgbenchScript is the limit UPDATE as a pgbench script: client k updates
// row "pgbench/k" (client ids count from 0).
const pgbenchScript = `UPDATE bench_limit SET expires_at = now() + interval '30 s' WHERE name = 'pgbench/' || :client_id;
`

// pgbenchFallback is where Debian's postgresql-15 package puts pgbench when
// it is not on PATH.
const pgbenchFallback = "/usr/lib/postgresql/15/bin/pgbench"

var (
	pgbenchTPS     = regexp.MustCompile(`(?m)^tps = ([0-9.]+)`)
	pgbenchLatency = regexp.MustCompile(`(?m)^latency average = ([0-9.]+) ms`)
)

// PgbenchResult is pgbench's own measurement of the limit UPDATE.
type PgbenchResult struct {
	Binary    string  `json:"binary,omitempty"`
	Clients   int     `json:"clients"`
	Seconds   int     `json:"seconds"`
	TPS       float64 `json:"tps"`
	LatencyMs float64 `json:"latency_avg_ms"`
	Skipped   string  `json:"skipped,omitempty"` // why it did not run
}

// runPgbench runs pgbench with the limit UPDATE at clients clients for d
// (whole seconds) against the scratch database, as a cross-check of the
// limit measured from Go. A missing pgbench is reported, not fatal.
func (e *env) runPgbench(ctx context.Context, binary string, clients int, d time.Duration) (PgbenchResult, error) {
	res := PgbenchResult{Clients: clients, Seconds: max(int(d.Round(time.Second)/time.Second), 1)}
	path, err := findPgbench(binary)
	if err != nil {
		res.Skipped = err.Error()
		return res, nil
	}
	res.Binary = path
	for k := range clients {
		if err := e.exec(ctx, limitRowSQL, fmt.Sprintf("pgbench/%d", k)); err != nil {
			return res, err
		}
	}
	dir, err := os.MkdirTemp("", "pglease-bench-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "update.sql")
	if err := os.WriteFile(script, []byte(pgbenchScript), 0o600); err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, path, "--no-vacuum", "--protocol=prepared",
		"--client", strconv.Itoa(clients), "--jobs", "2", "--time", strconv.Itoa(res.Seconds),
		"--file", script, e.url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return res, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	tps, lat := pgbenchTPS.FindSubmatch(out), pgbenchLatency.FindSubmatch(out)
	if tps == nil || lat == nil {
		return res, fmt.Errorf("pgbench: no tps or latency in its output:\n%s", out)
	}
	res.TPS, _ = strconv.ParseFloat(string(tps[1]), 64)
	res.LatencyMs, _ = strconv.ParseFloat(string(lat[1]), 64)
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
