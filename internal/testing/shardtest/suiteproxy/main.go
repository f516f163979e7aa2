// Command suiteproxy serves the unchanged test suites of the repository
// (internal/testing/contract, pglease, runslots, supervisor) a proxy
// instead of a pglease database, for scripts/test-sharded.sh: it starts a
// cluster for the proxies and two for four partition databases, makes
// template0 of the proxy cluster a migrated proxy database over the
// partitions (so that every database the test harness creates there, from
// template0, is one), prints the proxy cluster's administrative URL on
// stdout, and stops every cluster when its standard input closes.
//
// The harness (internal/testing/pgtest) then creates a database per test as
// usual, and finds it already at the newest migration: its history says
// so, so the migrations change nothing, and every pglease call of the
// suites runs through PL/Proxy on the database's own partitions. Reading
// that history (before the test runs) makes the partitions, so that no
// call of the test pays for creating them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pglease/pglease/internal/pgserver"
	"github.com/pglease/pglease/internal/schema"
	"github.com/pglease/pglease/internal/testing/shardtest"
	"github.com/pglease/pglease/pgleasemigrate"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("suiteproxy: ")
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fleet, err := shardtest.StartFleet(ctx, 3)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = errors.Join(err, fleet.Stop(ctx))
	}()
	proxy, parts := fleet.Clusters[0], fleet.Clusters[1:]
	for _, c := range parts {
		// Partitions are created from template1 (CREATE DATABASE's
		// default), migrated here once.
		u, err := pgserver.DatabaseURL(c.URL, "template1")
		if err != nil {
			return err
		}
		if err := pgleasemigrate.Up(ctx, u); err != nil {
			return fmt.Errorf("migrate template1 of a partition cluster: %w", err)
		}
	}
	if err := templateProxy(ctx, proxy.URL, parts); err != nil {
		return err
	}
	fmt.Println(proxy.URL)
	log.Printf("proxy cluster %s, partitions on ports %d and %d; waiting for stdin to close",
		pgserver.MaskURL(proxy.URL), parts[0].Port, parts[1].Port)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// templateProxy turns template0 of the cluster at adminURL into a proxy
// database recorded as migrated to schema.Latest(), whose four partitions
// are databases of their own per proxy database: named after it with _p0
// to _p3, on parts in turn (PL/Proxy's cluster configuration functions),
// created (dblink) when its migration history is first read, or else by
// its first proxied call.
func templateProxy(ctx context.Context, adminURL string, parts []*shardtest.Cluster) error {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return err
	}
	defer func() { _ = admin.Close(context.WithoutCancel(ctx)) }()
	if _, err := admin.Exec(ctx, `ALTER DATABASE template0 ALLOW_CONNECTIONS true`); err != nil {
		return err
	}
	tmplURL, err := pgserver.DatabaseURL(adminURL, "template0")
	if err != nil {
		return err
	}
	if err := pgleasemigrate.ProxyUp(ctx, tmplURL); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, tmplURL)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	ports := make([]int32, len(parts))
	for i, c := range parts {
		ports[i] = int32(c.Port)
	}
	for _, q := range []string{
		`CREATE EXTENSION dblink`,
		`CREATE SCHEMA plproxy`,
		`CREATE TABLE plproxy.partition_ports (i integer PRIMARY KEY, port integer NOT NULL)`,
		`CREATE TABLE plproxy.partitions_made (made boolean PRIMARY KEY)`,
		`INSERT INTO plproxy.partition_ports SELECT i - 1, p FROM unnest($1::integer[]) WITH ORDINALITY AS t(p, i)`,
		`CREATE FUNCTION plproxy.get_cluster_version(cluster_name text) RETURNS integer
			LANGUAGE sql AS $$ SELECT 1 $$`,
		`CREATE FUNCTION plproxy.get_cluster_config(cluster_name text, OUT key text, OUT val text) RETURNS SETOF record
			LANGUAGE sql AS $$ SELECT 'connection_lifetime'::text, '0'::text WHERE false $$`,
		// plproxy.partitions(): the database's four partitions, created
		// on the partition clusters (from their migrated template1) by the
		// first call, which holds a lock of its database until it
		// commits, so that concurrent first calls create them once.
		`CREATE FUNCTION plproxy.partitions() RETURNS SETOF text
			LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
			DECLARE
				v_port integer;
				v_name text;
				v_admin text;
			BEGIN
				PERFORM pg_advisory_xact_lock(hashtext('pglease suiteproxy partitions'));
				FOR v_i IN 0..3 LOOP
					SELECT p.port INTO v_port FROM plproxy.partition_ports AS p
					WHERE p.i = v_i % (SELECT count(*) FROM plproxy.partition_ports);
					v_name := current_database() || '_p' || v_i;
					IF NOT EXISTS (SELECT FROM plproxy.partitions_made) THEN
						v_admin := format('host=127.0.0.1 port=%s dbname=postgres user=postgres', v_port);
						PERFORM public.dblink_exec(v_admin, format('CREATE DATABASE %I', v_name));
					END IF;
					RETURN NEXT format('host=127.0.0.1 port=%s dbname=%s connect_timeout=2', v_port, v_name);
				END LOOP;
				INSERT INTO plproxy.partitions_made VALUES (true) ON CONFLICT DO NOTHING;
			END $$`,
		`CREATE FUNCTION plproxy.get_cluster_partitions(cluster_name text) RETURNS SETOF text
			LANGUAGE sql AS $$ SELECT plproxy.partitions() $$`,
		// The migration history the harness reads before the test runs
		// (golang-migrate's SELECT version, dirty FROM it) makes the
		// partitions: a first proxied call that created four databases
		// took 0.6 to 2 s, long enough for a tenure with a shorter TTL to
		// be over on the client before the call returned.
		`CREATE TABLE plproxy.history (version bigint NOT NULL PRIMARY KEY, dirty boolean NOT NULL)`,
		`CREATE VIEW public.` + pgx.Identifier{schema.TableName}.Sanitize() + ` AS
			SELECT h.version, h.dirty FROM plproxy.history AS h
			WHERE (SELECT count(*) FROM plproxy.partitions()) = 4`,
		`GRANT USAGE ON SCHEMA plproxy TO PUBLIC`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{ports}
		}
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			return fmt.Errorf("template0: %s: %w", q, err)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO plproxy.history VALUES ($1, false)`, int64(schema.Latest())); err != nil {
		return err
	}
	_, err = admin.Exec(ctx, `ALTER DATABASE template0 ALLOW_CONNECTIONS false`)
	return err
}
