package shardtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/pglease"
)

// EnvBinDir names the environment variable holding the directory of the
// PostgreSQL binaries (initdb, pg_ctl) the clusters start from; the server
// there must have PL/Proxy (Debian: postgresql-MAJOR-plproxy). Defaults to
// what pgserver finds on the machine.
const EnvBinDir = "PGLEASE_SHARD_PG_BINDIR"

// Fleet is a set of throwaway clusters on this machine.
type Fleet struct {
	// Clusters are the fleet's clusters, each its own postmaster, data
	// directory and port.
	Clusters []*Cluster
}

// Cluster is one throwaway cluster of a fleet.
type Cluster struct {
	// URL is the superuser's connection string to database postgres.
	URL string
	// Port is the TCP port on 127.0.0.1, kept across [Cluster.Restart].
	Port int

	server  *pgserver.Server
	dataDir string
	binDir  string
}

// StartFleet starts n clusters. On error it stops those it started.
func StartFleet(ctx context.Context, n int) (*Fleet, error) {
	f := &Fleet{}
	for range n {
		s, err := pgserver.StartCluster(ctx, os.Getenv(EnvBinDir))
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start cluster %d of %d: %w", len(f.Clusters)+1, n, err), f.Stop(ctx))
		}
		c := &Cluster{URL: s.URL, server: s}
		f.Clusters = append(f.Clusters, c)
		if err := c.inspect(ctx); err != nil {
			return nil, errors.Join(err, f.Stop(ctx))
		}
	}
	return f, nil
}

// inspect reads the data directory, the binaries and the port of c.
func (c *Cluster) inspect(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.URL)
	if err != nil {
		return fmt.Errorf("connect to cluster %s: %w", pgserver.MaskURL(c.URL), err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	err = conn.QueryRow(ctx, `SELECT current_setting('data_directory'), current_setting('port')::integer,
			(SELECT setting FROM pg_catalog.pg_config WHERE name = 'BINDIR')`).Scan(&c.dataDir, &c.Port, &c.binDir)
	if err != nil {
		return fmt.Errorf("read data directory and port of %s: %w", pgserver.MaskURL(c.URL), err)
	}
	return nil
}

// Stop stops and removes every cluster of f.
func (f *Fleet) Stop(ctx context.Context) error {
	var errs []error
	for _, c := range f.Clusters {
		if err := c.server.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Halt stops the cluster's postmaster at once (pg_ctl stop -m immediate),
// as a crash would, keeping its data directory for [Cluster.Restart].
func (c *Cluster) Halt(ctx context.Context) error {
	if out, err := c.pgctl(ctx, "stop", "-w", "-s", "-m", "immediate", "-D", c.dataDir).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl stop %s: %w: %s", c.dataDir, err, out)
	}
	return nil
}

// Restart starts a halted cluster again on the same port, after crash
// recovery.
func (c *Cluster) Restart(ctx context.Context) error {
	logFile := filepath.Join(filepath.Dir(c.dataDir), "postgres.log")
	out, err := c.pgctl(ctx, "start", "-w", "-s", "-t", "60", "-D", c.dataDir, "-l", logFile,
		"-o", "-p "+strconv.Itoa(c.Port)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl start %s (log %s): %w: %s", c.dataDir, logFile, err, out)
	}
	return nil
}

// pgctl returns pg_ctl with args, run as user postgres when this process
// runs as root (pg_ctl refuses root), as the cluster was started.
func (c *Cluster) pgctl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "pg_ctl"), args...)
	cmd.Dir = filepath.Dir(c.dataDir)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if os.Geteuid() == 0 {
		if u, err := user.Lookup("postgres"); err == nil {
			uid, _ := strconv.ParseUint(u.Uid, 10, 32) // a uid from the user database is numeric
			gid, _ := strconv.ParseUint(u.Gid, 10, 32)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		}
	}
	return cmd
}

// Sharded is a proxy database over partition databases of a fleet.
type Sharded struct {
	// ProxyURL is the superuser's connection string to the proxy database.
	ProxyURL string
	// Partitions are the partition databases, in PL/Proxy's order.
	Partitions []*Partition

	fleet *Fleet
	proxy string       // the proxy database's name
	extra []*Partition // partitions added but not yet routed to
}

// Partition is one partition database.
type Partition struct {
	// Index is the partition's number, from 0.
	Index int
	// Cluster is the cluster the partition lives on.
	Cluster *Cluster
	// Name is the database's name.
	Name string
	// URL is the superuser's connection string to the partition.
	URL string
}

// ConnInfo returns the partition's connection string as the proxy's
// foreign server lists it: host, port and database, no user (PL/Proxy adds
// the calling role) and a short connect timeout.
func (p *Partition) ConnInfo() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d dbname=%s connect_timeout=2", p.Cluster.Port, p.Name)
}

// NewSharded creates n partition databases with pglease's migrations,
// partition i on cluster i mod len(f.Clusters), and a proxy database on
// cluster 0 with the proxy migrations and the foreign server pglease over
// the partitions (user mapping PUBLIC without a user: PL/Proxy connects as
// the calling role; USAGE granted to pglease_client). n must be a power of
// two.
func (f *Fleet) NewSharded(ctx context.Context, n int) (*Sharded, error) {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails
	prefix := "pglease_shard_" + hex.EncodeToString(b[:])
	s := &Sharded{fleet: f, proxy: prefix + "_proxy"}
	for i := range n {
		c := f.Clusters[i%len(f.Clusters)]
		name := fmt.Sprintf("%s_p%d", prefix, i)
		u, err := pgserver.CreateDatabase(ctx, c.URL, name)
		if err != nil {
			return nil, errors.Join(err, s.Drop(ctx))
		}
		s.Partitions = append(s.Partitions, &Partition{Index: i, Cluster: c, Name: name, URL: u})
		if err := pglease.Migrate(ctx, u); err != nil {
			return nil, errors.Join(fmt.Errorf("migrate partition %d: %w", i, err), s.Drop(ctx))
		}
	}
	u, err := pgserver.CreateDatabase(ctx, f.Clusters[0].URL, s.proxy)
	if err != nil {
		return nil, errors.Join(err, s.Drop(ctx))
	}
	s.ProxyURL = u
	if err := pglease.MigrateProxy(ctx, u); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate proxy: %w", err), s.Drop(ctx))
	}
	conninfos := make([]string, n)
	for i, p := range s.Partitions {
		conninfos[i] = p.ConnInfo()
	}
	if err := s.exec(ctx, `CREATE SERVER pglease FOREIGN DATA WRAPPER plproxy OPTIONS (%s)`, conninfos); err != nil {
		return nil, errors.Join(err, s.Drop(ctx))
	}
	if err := s.exec(ctx, `CREATE USER MAPPING FOR PUBLIC SERVER pglease; GRANT USAGE ON FOREIGN SERVER pglease TO pglease_client`, nil); err != nil {
		return nil, errors.Join(err, s.Drop(ctx))
	}
	return s, nil
}

// SetPartitions points the proxy's foreign server at partitions, replacing
// its list (ALTER SERVER); PL/Proxy reloads it at the next call.
func (s *Sharded) SetPartitions(ctx context.Context, partitions []*Partition) error {
	conninfos := make([]string, len(partitions))
	for i, p := range partitions {
		conninfos[i] = p.ConnInfo()
	}
	var drop []string
	for i := range s.Partitions {
		drop = append(drop, fmt.Sprintf("DROP p%d", i))
	}
	if err := s.exec(ctx, `ALTER SERVER pglease OPTIONS (`+strings.Join(drop, ", ")+`)`, nil); err != nil {
		return err
	}
	if err := s.exec(ctx, `ALTER SERVER pglease OPTIONS (%s)`, conninfos); err != nil {
		return err
	}
	s.Partitions = partitions
	s.extra = slices.DeleteFunc(s.extra, func(p *Partition) bool { return slices.Contains(partitions, p) })
	return nil
}

// AddPartitions creates n more partition databases after the existing
// ones, migrated, and returns them; the proxy does not route to them until
// [Sharded.SetPartitions].
func (s *Sharded) AddPartitions(ctx context.Context, n int) ([]*Partition, error) {
	var added []*Partition
	for j := range n {
		i := len(s.Partitions) + j
		c := s.fleet.Clusters[i%len(s.fleet.Clusters)]
		name := fmt.Sprintf("%s_p%d", s.proxy[:len(s.proxy)-len("_proxy")], i)
		u, err := pgserver.CreateDatabase(ctx, c.URL, name)
		if err != nil {
			return added, err
		}
		p := &Partition{Index: i, Cluster: c, Name: name, URL: u}
		added = append(added, p)
		s.extra = append(s.extra, p)
		if err := pglease.Migrate(ctx, u); err != nil {
			return added, fmt.Errorf("migrate partition %d: %w", i, err)
		}
	}
	return added, nil
}

// exec runs statement on the proxy database as its superuser. With
// conninfos, %s in statement becomes the option list p0 '…', p1 '…'
// quoted by the server (format's %L).
func (s *Sharded) exec(ctx context.Context, statement string, conninfos []string) error {
	conn, err := pgx.Connect(ctx, s.ProxyURL)
	if err != nil {
		return fmt.Errorf("connect to the proxy: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if conninfos != nil {
		err := conn.QueryRow(ctx, `SELECT format($1, string_agg(format('p%s %L', i - 1, c), ', ' ORDER BY i))
			FROM unnest($2::text[]) WITH ORDINALITY AS t(c, i)`, statement, conninfos).Scan(&statement)
		if err != nil {
			return fmt.Errorf("quote the partitions' connection strings: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, statement); err != nil {
		return fmt.Errorf("on the proxy: %s: %w", statement, err)
	}
	return nil
}

// Drop drops the proxy and partition databases that exist.
func (s *Sharded) Drop(ctx context.Context) error {
	var errs []error
	if s.ProxyURL != "" {
		errs = append(errs, pgserver.DropDatabase(ctx, s.fleet.Clusters[0].URL, s.proxy))
	}
	for _, p := range append(append([]*Partition(nil), s.Partitions...), s.extra...) {
		errs = append(errs, pgserver.DropDatabase(ctx, p.Cluster.URL, p.Name))
	}
	return errors.Join(errs...)
}

// RoleURL returns url with its user replaced by role (trust
// authentication: the throwaway clusters need no password).
func RoleURL(connString, role string) (string, error) {
	u, err := url.Parse(connString)
	if err != nil {
		return "", fmt.Errorf("parse %s: %w", pgserver.MaskURL(connString), err)
	}
	u.User = url.User(role)
	return u.String(), nil
}

// CreateRole creates role name on every cluster of the fleet, with LOGIN
// and membership in pglease_client (roles are per cluster: the partitions
// see the same names as the proxy).
func (f *Fleet) CreateRole(ctx context.Context, name string) error {
	for _, c := range f.Clusters {
		conn, err := pgx.Connect(ctx, c.URL)
		if err != nil {
			return fmt.Errorf("connect to %s: %w", pgserver.MaskURL(c.URL), err)
		}
		_, err = conn.Exec(ctx, `CREATE ROLE `+pgx.Identifier{name}.Sanitize()+` LOGIN IN ROLE pglease_client`)
		_ = conn.Close(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("create role %s on %s: %w", name, pgserver.MaskURL(c.URL), err)
		}
	}
	return nil
}

// DropRole drops role name on every cluster of the fleet.
func (f *Fleet) DropRole(ctx context.Context, name string) error {
	var errs []error
	for _, c := range f.Clusters {
		conn, err := pgx.Connect(ctx, c.URL)
		if err != nil {
			errs = append(errs, fmt.Errorf("connect to %s: %w", pgserver.MaskURL(c.URL), err))
			continue
		}
		if _, err := conn.Exec(ctx, `DROP ROLE IF EXISTS `+pgx.Identifier{name}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop role %s on %s: %w", name, pgserver.MaskURL(c.URL), err))
		}
		_ = conn.Close(context.WithoutCancel(ctx))
	}
	return errors.Join(errs...)
}
