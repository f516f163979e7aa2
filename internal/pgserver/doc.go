// Package pgserver finds or starts a PostgreSQL server for tests and demos.
//
// # Overview
//
// [Find] returns a [Server] whose URL is an administrative (superuser or
// CREATEDB) connection string to the database "postgres". It tries, in order:
//
//  1. the connection string in the environment variable named by
//     [Options.EnvVar], if that variable is set;
//  2. a server already listening on 127.0.0.1:5432 or on the usual Unix
//     socket directories, as user postgres;
//  3. a throwaway cluster created with the local initdb and pg_ctl
//     ([StartCluster]);
//  4. a container started with testcontainers-go, if a Docker engine answers.
//
// [CreateDatabase] and [DropDatabase] give each caller a database of its own
// on that server, and [DatabaseURL] turns the administrative URL into the URL
// of such a database.
//
// The package is for tests and for the demo command. The library packages of
// the module must not import it: it links testcontainers-go.
//
// # Safety
//
// A server given by the environment variable is used as it is: if it cannot
// be reached, Find fails instead of falling back to another server, so that
// the tests never silently run somewhere the caller did not ask for. The same
// holds for [Options.BinDir].
//
// Connection strings in errors pass through [MaskURL], so passwords are never
// printed.
//
// # Failure handling
//
// When every step fails, Find returns a [*NoServerError] that lists each
// attempt with its reason and says how to provide a server.
//
// [Server.Stop] stops what Find started (a throwaway cluster is stopped with
// pg_ctl stop -m immediate and its directory removed; a container is
// terminated) and does nothing for a server Find merely found. A process that
// dies without calling Stop leaves its throwaway cluster running: the next
// [StartCluster] in the same PID namespace stops and removes the clusters
// whose owning process has exited. A container left behind is removed by
// testcontainers' reaper.
package pgserver
