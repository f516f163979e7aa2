// Package pgserver finds or starts a PostgreSQL server for the tests and the
// demo, without Docker.
//
// # Overview
//
// [Find] returns a [Server] whose URL is an administrative (superuser or
// CREATEDB) connection string to the database "postgres". It tries, in order:
//
//  1. the connection string in the environment variable named by
//     [Options.EnvVar], if that variable is set;
//  2. libpq's defaults, if any of PGHOST, PGHOSTADDR, PGPORT, PGUSER,
//     PGDATABASE or PGSERVICE is set ([LibpqEnv]);
//  3. a server already listening on 127.0.0.1:5432 or on the usual Unix
//     socket directories, as user postgres;
//  4. a throwaway cluster created with the local initdb and pg_ctl
//     ([StartCluster]).
//
// [CreateDatabase] and [DropDatabase] give each caller a database of its own
// on that server, [DatabaseURL] turns the administrative URL into the URL of
// such a database, and [MaskURL] prints a connection string without its
// password.
//
// The package is for the tests and for the demo command, which ships in the
// pglease binary: it must not link a container runtime. The tests' last
// resort, a container, lives in internal/testing/pgcontainer, which only
// internal/testing/pgtest imports; it builds its Server with [Check]. The
// library packages of the module import neither.
//
// # Safety
//
// A server named by the environment variable or by the PG* variables is used
// as it is: if it cannot be reached, Find fails instead of falling back to
// another server, so that the tests and the demo never silently run somewhere
// the caller did not ask for. The same holds for [Options.BinDir].
//
// Connection strings in errors pass through [MaskURL], so passwords are never
// printed.
//
// # Failure handling
//
// When every step fails, Find returns a [*NoServerError] that lists each
// attempt with its reason and says how to provide a server.
//
// [Server.Stop] stops what was started (a throwaway cluster is stopped with
// pg_ctl stop -m immediate and its directory removed) and does nothing for a
// server Find merely found. A process that dies without calling Stop leaves
// its throwaway cluster running: the next [StartCluster] in the same PID
// namespace stops and removes the clusters whose owning process has exited.
package pgserver
