// Command pglease applies pglease's schema, shows its leases and slots, runs
// a command under a lease (a distributed flock(1)), force-releases a lease,
// and demonstrates leader election.
//
// # Overview
//
//	pglease migrate up|down|version     apply, revert or show the schema
//	pglease status [--json]             leases, slots and scopes, as the server sees them
//	pglease run --lease NAME [--slot SCOPE:CAPACITY] [--ttl 30s] [--wait|--no-wait] [--grace 10s] -- COMMAND [ARGS...]
//	pglease release --force NAME --yes  operator override: end a tenure whoever holds it
//	pglease demo                        three supervised instances, a crash, a handover
//	pglease help [COMMAND]              usage; `pglease COMMAND -h` too
//
// The database is the one --database names, else PGLEASE_DATABASE_URL, else
// DATABASE_URL, else libpq's environment defaults (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE, ... as pgx reads them); only demo looks further. A postgres:// URL and a
// key=value connection string are both accepted. Connection strings are
// printed with any password masked, and the password is scrubbed from every
// error message. Unless the connection string sets them, connect_timeout is
// 10 s and application_name is "pglease COMMAND".
//
// # pglease run
//
// run takes lease NAME (and/or one slot of SCOPE, of at most CAPACITY; with
// both, the lease first, then the slot, waiting for which renews the lease),
// starts COMMAND in a process group of its own, renews every TTL/3 while it
// runs, and releases once it has exited. COMMAND's environment has
// PGLEASE_HOLDER, and PGLEASE_LEASE and PGLEASE_FENCE with --lease,
// PGLEASE_SLOT_SCOPE, PGLEASE_SLOT and PGLEASE_SLOT_FENCE with --slot, so
// that it can fence its writes (pglease.assert_held(NAME, FENCE)). Variables
// of these names inherited from pglease's own environment are removed.
//
// SIGINT, SIGTERM and SIGHUP to pglease are forwarded to COMMAND's process
// group; pglease keeps renewing until COMMAND exits, then releases and exits
// with COMMAND's status. A signal that arrives while pglease still waits for
// the lease stops the waiting: COMMAND never starts, and pglease exits
// 128+n.
//
// # Safety
//
// COMMAND runs only while pglease holds the lease by its local deadline (the
// last successful acquire or renewal request's send time, plus the TTL,
// minus a tenth of it), which ends before the server's expiry. As soon as a
// renewal is refused, or the deadline passes without a successful renewal
// (a hung connection, a partition), pglease sends SIGTERM to COMMAND's
// process group and, after --grace, SIGKILL; once COMMAND has exited it
// kills whatever is left of the group and exits 69. The lease is not
// released then: it is not ours any more. During the grace period COMMAND
// may still run while another holder has the lease: only writes it fences
// with PGLEASE_FENCE are refused. Use a grace shorter than what an overlap
// may cost, or 0.
//
// On Linux, COMMAND is killed (SIGKILL) if pglease itself dies, since
// nobody renews the lease then. Elsewhere it keeps running unsupervised
// until its own end. COMMAND cannot read from the terminal: it is not in the
// terminal's foreground process group; redirect its standard input.
//
// # Exit codes
//
//	0        success (run: COMMAND exited 0)
//	1        failure: database unreachable, schema missing, query failed, ...
//	2        usage error: bad flags or arguments, a connection string that
//	         does not parse, migrate down or release without --yes
//	69       run: the lease or slot was lost (EX_UNAVAILABLE); COMMAND was
//	         stopped, or never started when the loss came while waiting for
//	         the slot
//	75       run --no-wait: held elsewhere or scope full (EX_TEMPFAIL);
//	         COMMAND did not run; stderr says who holds it and for how long
//	126      run: COMMAND could not be executed
//	127      run: COMMAND was not found
//	128+n    run: COMMAND died of signal n, or pglease got signal n while
//	         waiting for the lease
//	other    run: COMMAND's own exit status
//
// 69 and 75 come from sysexits.h: 75 is a temporary failure, worth a retry
// later (mail agents and many job runners treat it so); 69 (service unavailable) says
// that the coordination COMMAND depended on went away under it. Both lie
// outside the range shells use for themselves (126, 127, 128+n). COMMAND
// may exit with them too; pglease's own exits always print a line on
// standard error starting with "pglease:".
//
// # pglease status --json
//
// One JSON object with three arrays, sorted and never null:
//
//	{"leases": [{"name": "nightly", "holder": "host/4242/9f1c..", "fence": 7, "state": "held",
//	             "expires_at": "2025-01-02T03:04:05.678Z", "expires_in_ms": 28512, "expires_in": "28.512s"}],
//	 "slots":  [{"scope": "gpu", "slot": 1, "holder": null, "fence": 3, "state": "free",
//	             "expires_at": "...", "expires_in_ms": 0, "expires_in": "0s"}],
//	 "scopes": [{"scope": "gpu", "in_use": 0, "slots": 2}]}
//
// state is held, expired or free; holder is null when free; expires_in_ms
// is the time left computed by the server, in whole milliseconds, 0 once
// expired or free; expires_in is the same as a Go duration string.
//
// # pglease demo
//
// With a database named by --database, PGLEASE_DATABASE_URL, DATABASE_URL or
// the PG* variables, demo applies the migrations there when schema pglease is
// missing and uses a lease named demo-<random>, deleted at the end when the
// role may. Without one it finds a server as the tests do, but never with
// Docker: a server on 127.0.0.1:5432 or the local Unix socket as user
// postgres, else a throwaway cluster from the local initdb and pg_ctl. It
// creates a database of its own there and drops it (or removes the cluster)
// at the end. Its first line says which server it uses and what it installs.
// The rule is the one of `pglease help` and of the README's "Try it".
package main
