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
	"syscall"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/pgleasemigrate"
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
		if err := pgleasemigrate.Up(ctx, u); err != nil {
			return nil, errors.Join(fmt.Errorf("migrate partition %d: %w", i, err), s.Drop(ctx))
		}
	}
	u, err := pgserver.CreateDatabase(ctx, f.Clusters[0].URL, s.proxy)
	if err != nil {
		return nil, errors.Join(err, s.Drop(ctx))
	}
	s.ProxyURL = u
	if err := InstallProxy(ctx, u, s.Partitions); err != nil {
		return nil, errors.Join(err, s.Drop(ctx))
	}
	return s, nil
}

// InstallProxy makes the database at url (as a superuser) a proxy over
// partitions: the proxy migrations, the foreign server pglease listing the
// partitions, a user mapping for PUBLIC without a user (PL/Proxy connects
// as the calling role), and USAGE on the server for pglease_client.
func InstallProxy(ctx context.Context, url string, partitions []*Partition) error {
	if err := pgleasemigrate.ProxyUp(ctx, url); err != nil {
		return fmt.Errorf("migrate proxy: %w", err)
	}
	conninfos := make([]string, len(partitions))
	for i, p := range partitions {
		conninfos[i] = p.ConnInfo()
	}
	if err := execOn(ctx, url, `CREATE SERVER pglease FOREIGN DATA WRAPPER plproxy OPTIONS (%s)`, conninfos); err != nil {
		return err
	}
	return execOn(ctx, url, `CREATE USER MAPPING FOR PUBLIC SERVER pglease; GRANT USAGE ON FOREIGN SERVER pglease TO pglease_client`, nil)
}

// SetPartitions points the proxy's foreign server at partitions, replacing
// its list in one ALTER SERVER; PL/Proxy reloads it at the next call.
func (s *Sharded) SetPartitions(ctx context.Context, partitions []*Partition) error {
	var options []string
	for i := range max(len(s.Partitions), len(partitions)) {
		switch {
		case i >= len(partitions):
			options = append(options, fmt.Sprintf("DROP p%d", i))
		case i >= len(s.Partitions):
			options = append(options, "ADD "+partitions[i].ConnInfo())
		default:
			options = append(options, "SET "+partitions[i].ConnInfo())
		}
	}
	if err := s.exec(ctx, `ALTER SERVER pglease OPTIONS (%s)`, options); err != nil {
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
		if err := pgleasemigrate.Up(ctx, u); err != nil {
			return added, fmt.Errorf("migrate partition %d: %w", i, err)
		}
	}
	return added, nil
}

// exec runs statement on the proxy database as its superuser. With
// options, %s in statement becomes the option list p0 '…', p1 '…', the
// connection strings quoted by the server (format's %L); an option may
// start with ADD or SET, and "DROP pN" drops one.
func (s *Sharded) exec(ctx context.Context, statement string, options []string) error {
	return execOn(ctx, s.ProxyURL, statement, options)
}

// execOn is [Sharded.exec] on the database at url.
func execOn(ctx context.Context, url, statement string, options []string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to the proxy: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if options != nil {
		err := conn.QueryRow(ctx, `SELECT format($1, string_agg(CASE
				WHEN o LIKE 'DROP p%' THEN o
				WHEN o ~ '^(ADD|SET) ' THEN format('%s p%s %L', split_part(o, ' ', 1), i - 1, substr(o, 5))
				ELSE format('p%s %L', i - 1, o) END, ', ' ORDER BY i))
			FROM unnest($2::text[]) WITH ORDINALITY AS t(o, i)`, statement, options).Scan(&statement)
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

// Double doubles the partition count, moving no tenure and no fence: each
// partition i is split with a new partition i+n, as PL/Proxy's hash & (2n -
// 1) maps every name of i to i or i+n. For each old partition, while no
// client can run anything on it (CONNECT revoked from PUBLIC and its
// sessions ended: calls routed to it fail at once), its pglease tables are
// copied whole into the new partition, each of the two deletes the rows
// the other now owns, and the proxy is switched to the 2n partitions
// before CONNECT is granted again. Tenures live through the move with
// their holders, fences and roles, since the rows are the same; the fence
// floor is copied too. Holders whose renewals fail during the freeze keep
// their tenure if it ends before their local deadline.
func (s *Sharded) Double(ctx context.Context) (err error) {
	n := len(s.Partitions)
	added, err := s.AddPartitions(ctx, n)
	if err != nil {
		return err
	}
	for _, p := range s.Partitions {
		if err := p.freeze(ctx, true); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, p.freeze(context.WithoutCancel(ctx), false)) }()
	}
	for i, p := range s.Partitions {
		if err := s.split(ctx, p, added[i], 2*n); err != nil {
			return err
		}
	}
	return s.SetPartitions(ctx, append(append([]*Partition(nil), s.Partitions...), added...))
}

// freeze revokes (on) or grants again (off) CONNECT on the partition's
// database to PUBLIC; on also ends every other session of it.
func (p *Partition) freeze(ctx context.Context, on bool) error {
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return fmt.Errorf("connect to partition %d: %w", p.Index, err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	db := pgx.Identifier{p.Name}.Sanitize()
	if !on {
		_, err = conn.Exec(ctx, `GRANT CONNECT ON DATABASE `+db+` TO PUBLIC`)
		return err
	}
	if _, err := conn.Exec(ctx, `REVOKE CONNECT ON DATABASE `+db+` FROM PUBLIC`); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_catalog.pg_backend_pid()`)
	return err
}

// pgleaseTables are the logged tables of a partition, in an order that
// satisfies their foreign keys, and pgleaseFloors its fence floors.
var (
	pgleaseTables = []string{"leases", "slot_scopes", "slots"}
	pgleaseFloors = []string{"lease_fence_floor", "slot_fence_floor"}
)

// split copies from's pglease tables into to, then deletes from each the
// rows the other owns among parts partitions (routed by the proxy's
// pglease._route).
func (s *Sharded) split(ctx context.Context, from, to *Partition, parts int) error {
	src, err := pgx.Connect(ctx, from.URL)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close(context.WithoutCancel(ctx)) }()
	dst, err := pgx.Connect(ctx, to.URL)
	if err != nil {
		return err
	}
	defer func() { _ = dst.Close(context.WithoutCancel(ctx)) }()
	for _, table := range pgleaseTables {
		rows, err := src.Query(ctx, `SELECT * FROM pglease.`+pgx.Identifier{table}.Sanitize())
		if err != nil {
			return fmt.Errorf("read pglease.%s of partition %d: %w", table, from.Index, err)
		}
		var cols []string
		for _, fd := range rows.FieldDescriptions() {
			cols = append(cols, fd.Name)
		}
		values, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if err != nil {
			return fmt.Errorf("read pglease.%s of partition %d: %w", table, from.Index, err)
		}
		if _, err := dst.CopyFrom(ctx, pgx.Identifier{"pglease", table}, cols, pgx.CopyFromRows(values)); err != nil {
			return fmt.Errorf("copy pglease.%s into partition %d: %w", table, to.Index, err)
		}
	}
	for _, floor := range pgleaseFloors {
		var last int64
		if err := src.QueryRow(ctx, `SELECT last_value FROM pglease.`+pgx.Identifier{floor}.Sanitize()).Scan(&last); err != nil {
			return fmt.Errorf("read pglease.%s of partition %d: %w", floor, from.Index, err)
		}
		if _, err := dst.Exec(ctx, `SELECT pg_catalog.setval($1::regclass, greatest($2, last_value)) FROM pglease.`+pgx.Identifier{floor}.Sanitize(),
			"pglease."+floor, last); err != nil {
			return fmt.Errorf("raise pglease.%s of partition %d: %w", floor, to.Index, err)
		}
	}
	proxy, err := pgx.Connect(ctx, s.ProxyURL)
	if err != nil {
		return err
	}
	defer func() { _ = proxy.Close(context.WithoutCancel(ctx)) }()
	for _, side := range []struct {
		conn *pgx.Conn
		keep int
	}{{src, from.Index}, {dst, to.Index}} {
		for _, t := range []struct{ table, key string }{{"leases", "name"}, {"slots", "scope"}, {"slot_scopes", "scope"}} {
			rows, _ := side.conn.Query(ctx, `SELECT `+t.key+` FROM pglease.`+t.table)
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			rows, _ = proxy.Query(ctx, `SELECT k FROM unnest($1::text[]) AS k WHERE pglease._route(k) & ($2 - 1) <> $3`, keys, parts, side.keep)
			gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if _, err := side.conn.Exec(ctx, `DELETE FROM pglease.`+t.table+` WHERE `+t.key+` = ANY ($1)`, gone); err != nil {
				return fmt.Errorf("delete moved rows of pglease.%s: %w", t.table, err)
			}
		}
	}
	return nil
}
