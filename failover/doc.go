// Package failover holds pglease's failover tests: leases, fences and
// fenced writes checked across Postgres failovers orchestrated by
// pg_auto_failover. It has no code of its own; the tests build only with
// the failover tag, so go test ./... skips them.
//
// # Overview
//
// Run them as root (they start a formation as user postgres and kill its
// processes):
//
//	make test-failover                 # about 4 minutes
//	go test -tags failover -count=1 -v -timeout 20m ./failover/
//
// TestMain starts the formation with env.sh (one monitor and two nodes on
// 127.0.0.1:6510-6512, installing postgresql-15-auto-failover when
// pg_autoctl is missing) and stops it at the end. Each test creates a
// database through the multi-host URL
//
//	postgres://postgres@127.0.0.1:6511,127.0.0.1:6512/DB?target_session_attrs=read-write
//
// applies the migrations with pgleasemigrate.Up through it, runs three
// supervisors (each on its own pool) whose leader writes (fence, holder,
// seq) to a log table through pglease.WithFence every 10 ms, and a probe
// that writes every 50 ms. Then it loses the primary in turn by a
// switchover (env.sh switchover: the monitor's perform_failover, without
// pg_auto_failover 2.0's race that loses commits), a SIGKILL of its
// postmaster, and a SIGKILL of the whole node, the last one after stopping
// the WAL sender and making the leader hand over, so that a new tenure is
// granted while the standby receives nothing. Before each fault the test
// waits, for at most 150 s, until the formation is ready for it (env.sh
// wait-ready: both nodes healthy and in their goal state, and the primary's
// pg_stat_replication showing the standby streaming). Just before each
// postmaster or node kill it makes the leader's workload return, so that
// the kill races the next grant right after a release.
// TestSynchronousStandby does this with pg_auto_failover's synchronous
// standby, TestAsynchronousStandby with the standby made asynchronous
// (replication-quorum false).
//
// Settings: PGLEASE_FAILOVER_ROUNDS (rounds of the three faults, default
// 1; -short runs a switchover and the lagging kill only),
// PGLEASE_FAILOVER_TTL (default 5s), PGLEASE_FAILOVER_KEEP (leave the
// formation running; env.sh down stops it), PGLEASE_FAILOVER_REPORT (a file
// to append the figures to, as markdown). env.sh documents its own.
//
// # Safety
//
// What is checked, over every grant, workload run and acknowledged write
// recorded on this process's monotonic clock: fences only grow across
// grants, also across failovers, and no fence goes to two holders, although
// every release is asynchronous (the supervisors release through their
// pools, so with synchronous_commit off: a release may be lost with the
// primary; the report counts the releases); no two
// workloads run at once; every acknowledged fenced write is in the log
// table of the final primary, as written; and, with a synchronous standby,
// fenced writes resume within TTL + the engine's failover time (from the
// fault to the probe's first write on the new primary). With an
// asynchronous standby the same checks report what was lost; the test fails
// only if nothing was, as the provocation then did not work.
//
// # Failure handling
//
// A test that fails leaves the formation's logs (pg_autoctl's and
// Postgres') in a temporary directory it names on standard error.
package failover
