//go:build failover

package failover_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// formation drives the pg_auto_failover formation through env.sh, which
// holds every command that touches it.
type formation struct{}

// run runs env.sh with args and returns its standard output, trimmed.
func (formation) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "./env.sh", args...)
	cmd.WaitDelay = 10 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("env.sh %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return strings.TrimSpace(stdout.String()), nil
}

// url returns the multi-host, read-write client URL of database db.
func (f formation) url(ctx context.Context, db string) (string, error) {
	return f.run(ctx, "url", db)
}

// state returns pg_autoctl show state, or why it could not.
func (f formation) state(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	out, err := f.run(ctx, "state")
	if err != nil {
		return err.Error()
	}
	return out
}

// node runs a command that prints a node number (kill-node, ...).
func (f formation) node(ctx context.Context, args ...string) (int, error) {
	out, err := f.run(ctx, args...)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(out)
	if err != nil {
		return 0, fmt.Errorf("env.sh %s printed %q, want a node number", strings.Join(args, " "), out)
	}
	return n, nil
}

// queryOnce runs one query on a new connection to url, so that no pooled
// connection to a former primary is involved, and scans its row.
func queryOnce(ctx context.Context, url, sql string, dest ...any) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// execOnce runs statements on a new connection to url.
func execOnce(ctx context.Context, url string, sqls ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, sql := range sqls {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}
