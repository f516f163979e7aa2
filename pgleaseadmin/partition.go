package pgleaseadmin

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/tenure"
	"github.com/pglease/pglease/pglease"
)

// Partition is the partition database that owns a lease name or slot
// scope behind a pglease proxy (a database with the proxy migrations,
// pgleasemigrate.ProxyUp, whose calls PL/Proxy runs on the partition that
// owns each name; docs/scaling.md).
//
// Two things work only on the partition itself, not through the proxy:
// LISTEN for the release notifications ([pglease.NotifyChannel]; a NOTIFY
// does not cross PL/Proxy, so a waiter on the proxy wakes at the holder's
// expiry), and [pglease.WithFence]'s row lock (through the proxy,
// pglease.assert_held checks the fence in the partition's own transaction,
// which commits at once, so the caller's writes are not ordered before a
// takeover). Connect to the partition with [Partition.Config] for either.
type Partition struct {
	// Index is the partition's number among the proxy's partitions, from
	// 0.
	Index int
	// ConnString is the partition's connection string as the proxy's
	// foreign server pglease lists it: host, port and database, normally
	// without user or password.
	ConnString string
}

// PartitionOf asks the pglease proxy database behind database which
// partition owns key, a lease name or slot scope. It fails when database
// is not a pglease proxy (a partition or a plain pglease database has no
// pglease.partition_of) or when the proxy lists no partitions.
func PartitionOf(ctx context.Context, database pglease.DB, key string) (Partition, error) {
	if len(key) == 0 || len(key) > pglease.MaxNameLen {
		return Partition{}, tenure.Invalidf("key must be 1 to %d bytes, got %d", pglease.MaxNameLen, len(key))
	}
	var p Partition
	err := database.QueryRow(ctx, `SELECT partition, conninfo FROM pglease.partition_of($1)`, key).Scan(&p.Index, &p.ConnString)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return Partition{}, ctx.Err()
		}
		return Partition{}, fmt.Errorf("pglease: find the partition of %q (is this a pglease proxy database, migrated with pgleasemigrate.ProxyUp?): %w", key, err)
	}
	return p, nil
}

// Config returns a copy of proxy, the configuration that connects to the
// proxy database, pointed at the partition instead: the partition's hosts,
// port, database and connect timeout, and proxy's user, password, TLS
// settings and run-time parameters, so that the partition sees the same
// role as the proxy does for PL/Proxy's calls (pglease binds tenures to
// that role). Settings of ConnString other than those are ignored.
func (p Partition) Config(proxy *pgx.ConnConfig) (*pgx.ConnConfig, error) {
	part, err := pgx.ParseConfig(p.ConnString)
	if err != nil {
		return nil, fmt.Errorf("pglease: parse the connection string of partition %d: %w", p.Index, err)
	}
	cfg := proxy.Copy()
	cfg.Host, cfg.Port, cfg.Database = part.Host, part.Port, part.Database
	cfg.Fallbacks = nil
	for _, fb := range part.Fallbacks {
		f := *fb
		if cfg.TLSConfig == nil {
			f.TLSConfig = nil
		} else {
			f.TLSConfig = cfg.TLSConfig.Clone()
			f.TLSConfig.ServerName = fb.Host
		}
		cfg.Fallbacks = append(cfg.Fallbacks, &f)
	}
	if cfg.TLSConfig != nil {
		cfg.TLSConfig = cfg.TLSConfig.Clone()
		cfg.TLSConfig.ServerName = part.Host
	}
	if part.ConnectTimeout != 0 {
		cfg.ConnectTimeout = part.ConnectTimeout
	}
	return cfg, nil
}
