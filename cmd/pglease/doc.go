// Command pglease applies pglease's schema, shows its leases and slots, runs
// a command under a lease (a distributed flock(1)), force-releases a lease,
// serves the database's view as Prometheus metrics, and demonstrates leader
// election.
//
// # Overview
//
//	pglease migrate up|down|version     apply, revert or show the schema
//	pglease status [--json]             leases, slots, scopes and rate limits, as the server sees them
//	pglease run --lease NAME [--slot SCOPE:CAPACITY] [--ttl 30s] [--wait|--no-wait] [--grace TTL/4] -- COMMAND [ARGS...]
//	pglease run --lease NAME --once-per WINDOW | --hold-at-least D [--skip-status N] -- COMMAND [ARGS...]
//	                                    one run per cron tick across hosts (docs/cron.md)
//	pglease run --rate KEY [--cost N] [--wait] -- COMMAND [ARGS...]
//	                                    run only when a rate limit grants tokens (docs/limits.md)
//	pglease history NAME [--json]       the recent runs of a job of the run ledger
//	pglease release --force NAME --yes  operator override: end a tenure whoever holds it
//	pglease prefix bind|unbind|list     give a name prefix to a role (schema owner; docs/security.md)
//	pglease exporter [--listen ADDR]    the database's view as Prometheus metrics (docs/observability.md)
//	pglease demo                        three supervised instances, a crash, a handover
//	pglease version                     this build and the schema version it installs; also --version
//	pglease help [COMMAND]              usage; `pglease COMMAND -h` too
//
// Flags are spelt --name (-v is short for run's --verbose); --database URL
// may come before the command too (pglease --database URL status).
//
// The database is the one --database names, else PGLEASE_DATABASE_URL, else
// DATABASE_URL, else libpq's environment defaults (PGHOST, PGPORT, PGUSER,
// PGPASSWORD, PGDATABASE, ... as pgx reads them); only demo looks further
// (see `pglease help`). With none of them set, errors say that no database
// was named and how to name one, and migrate says on standard error which
// database it works on. A postgres:// URL and a key=value connection
// string are both accepted. Connection strings are printed with any
// password masked, and the password is scrubbed from every
// error message. Unless the connection string sets them, connect_timeout is
// 10 s and application_name is "pglease COMMAND".
//
// # pglease run
//
// run takes lease NAME (and/or one slot of SCOPE, of at most CAPACITY; with
// both, the lease first, then the slot, waiting for which renews the lease),
// starts COMMAND in a process group of its own, renews every TTL/3 while it
// runs, and releases once it and everything it started have exited.
// COMMAND's environment has PGLEASE_HOLDER, and PGLEASE_LEASE and
// PGLEASE_FENCE with --lease, PGLEASE_SLOT_SCOPE, PGLEASE_SLOT and
// PGLEASE_SLOT_FENCE with --slot, so that it can fence its writes
// (pglease.assert_held(NAME, FENCE)). Variables of these names inherited
// from pglease's own environment are removed; everything else passes
// through, the database URL and PGPASSWORD included, so that COMMAND can
// reach the same database for its fenced writes.
//
// SIGINT, SIGTERM and SIGHUP to pglease are forwarded to COMMAND's process
// group; pglease keeps renewing until COMMAND exits, then stops whatever
// COMMAND left running (SIGTERM, SIGKILL after --grace), releases and exits
// with COMMAND's status. A signal that arrives while pglease still waits
// for the lease stops the waiting: COMMAND never starts, and pglease exits
// 128+n.
//
// # Safety
//
// The promise: every process COMMAND started is dead before its tenure can
// end on the server by expiry (an operator's force-release ends it at once:
// see the second point). The local deadline is the last successful acquire or
// renewal request's send time plus the TTL minus a tenth of it; the server's
// expiry comes at least a tenth of the TTL later. The schedule:
//
//   - SIGTERM to every process COMMAND started comes --grace before the
//     local deadline when no renewal has succeeded by then, and SIGKILL at
//     the deadline; --grace must therefore be at most half the TTL, which
//     leaves renewals (every TTL/3, retried) the other half. It defaults
//     to a quarter of the TTL, at most 10 s, so that any --ttl works with
//     the default;
//   - when a renewal is refused (the tenure was force-released or had
//     expired), SIGTERM comes at once and SIGKILL --grace later, by the
//     local deadline at the latest. The server has ended the tenure then:
//     during the grace period only writes fenced with PGLEASE_FENCE are
//     refused;
//   - pglease exits 69 once they are all dead; it does not release a tenure
//     that is not its own any more.
//
// On Linux this holds whatever happens to pglease. COMMAND runs under a
// reaper, pglease's own binary run again as a small supervising process
// between pglease and COMMAND, in a process group of its own:
//
//   - the reaper is the subreaper (PR_SET_CHILD_SUBREAPER) of COMMAND's
//     tree: a process whose parent exits (a double fork, a daemon) is
//     reparented to it, not to init, so a walk of /proc below the reaper
//     finds every process COMMAND started, setsid'd ones included;
//   - where cgroup v2 is mounted and writable, COMMAND starts in a cgroup of
//     its own (clone3 into it), killed at once with cgroup.kill;
//   - pglease hands each new deadline to the reaper, which enforces the
//     schedule above by itself: a pglease that is SIGKILLed, OOM-killed,
//     panics, hangs or is stopped (SIGSTOP) renews nothing, and the reaper
//     stops everything by the last deadline it was given. When pglease
//     dies, its control pipe closes and the reaper starts stopping at once;
//   - COMMAND has PDEATHSIG SIGKILL towards the reaper, and pglease is a
//     subreaper too: if the reaper dies, COMMAND dies with it, and pglease
//     kills what it left (its orphans come to pglease) and exits 1.
//
// Measured (TestCLI's Run cases, 10 runs each with the race detector on a
// loaded 2-core machine; the last process's death against the tenure's final
// expires_at, on the same clock): after kill -9 or a crash (SIGQUIT) of
// pglease, the command, a child, a setsid'd child and a daemon were all dead
// 17-116 ms later, 29.76-29.96 s before the expiry (TTL 30 s); with pglease
// stopped (SIGSTOP) and every process ignoring SIGTERM, TTL 3 s, grace 1 s,
// 270-307 ms before it (the budget is a tenth of the TTL); with the database
// cut off and SIGTERM ignored, TTL 6 s, grace 3 s (the case that overran by
// 2.4 s before), 541-606 ms before it. No overlap in 40 runs.
//
// What the reaper cannot catch: work COMMAND hands to something that is not
// its descendant (systemd-run, at, a job queue, a container engine, ssh to
// another host); a process stuck in uninterruptible sleep (D state, a hung
// NFS mount), which dies only when the kernel lets it; pglease and the
// reaper killed together (kill -9 of both, the OOM killer taking both):
// COMMAND still dies of PDEATHSIG, but what it started lives on, in its
// cgroup if it has one, which nobody kills then (the next reaper removes
// such a cgroup once it is empty); a frozen machine or a
// suspended laptop, whose monotonic clock stops while the server's runs on.
// A process that forks while being killed is found again: the reaper kills
// and reaps in a loop until it has no child left.
//
// Other Unix systems have no subreaper, PDEATHSIG or cgroups: pglease itself
// applies the schedule to COMMAND's process group, so a process that leaves
// the group (setsid) is not stopped, and nothing stops COMMAND if pglease
// dies. Elsewhere pglease run refuses to run.
//
// COMMAND cannot read from the terminal: it is not in the terminal's
// foreground process group; redirect its standard input.
//
// # Exit codes
//
//	0        success (run: COMMAND exited 0)
//	1        failure: database unreachable, schema missing, query failed;
//	         run: the reaper died (COMMAND and all it started were killed)
//	2        usage error: bad flags or arguments, a connection string that
//	         does not parse, migrate down or release without --yes
//	69       run: the lease or slot was lost, or no renewal succeeded in
//	         time (EX_UNAVAILABLE); COMMAND and everything it started were
//	         stopped, or COMMAND never started when the loss came while
//	         waiting for the slot
//	75       run --no-wait: held elsewhere or scope full (EX_TEMPFAIL);
//	         COMMAND did not run; stderr says who holds it and for how long
//	0        run --once-per or --hold-at-least: held elsewhere, or the
//	         window is done; run --rate: the tokens were refused;
//	         COMMAND did not run (--skip-status N: N)
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
// The rule is the one of `pglease help`, whole in CONTRIBUTING.md's "Which
// database".
package main
