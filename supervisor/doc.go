// Package supervisor runs a workload only while this process holds a
// pglease lease, and cancels it the moment that is no longer certain: what
// a service embeds so that one of its N instances runs the scheduler, the
// outbox dispatcher or the cleanup loop, while the others stand by.
//
// # Overview
//
//	sup, err := supervisor.NewLease(pool, "outbox-dispatcher", supervisor.Config{})
//	err = sup.Run(ctx, func(ctx context.Context) error {
//		return dispatchUntil(ctx) // must return soon after ctx is cancelled
//	})
//
// Standing by, a supervisor takes the lease with pglease's Acquire: while
// another instance holds it, it waits for the release NOTIFY or until the
// holder's reported expiry (plus jitter), never a blind fixed-interval poll.
// Holding, it runs the workload under pglease.Lease.Run, with a context of
// its own, renewing every RenewInterval (TTL/3 by default). NewSlot
// supervises a slot of a scope instead (package runslots): up to its
// capacity, instances run at once, each guarded by one slot.
//
// A process that runs many supervisors (one per shard or tenant) can share
// a pglease.Keeper among them (Config.Keeper): the keeper renews every
// lease they hold in one renew_holder call per interval, and each
// supervisor still cancels its own workload when its own lease is lost or
// its deadline passes. They share the keeper's holder, so a keeper serves
// one supervisor per lease or scope.
//
// # Safety
//
// The workload's context is cancelled as soon as any of these happens:
//
//   - a renewal is refused by the server (the lease was lost);
//   - a renewal fails and no retry could start before the local deadline;
//   - the local deadline passes while no renewal has succeeded, even while
//     a renewal hangs on a dead connection (renewals run on their own
//     goroutine; the deadline is a timer);
//   - Run's context is cancelled.
//
// The local deadline is when the last successful acquire or renew was sent,
// plus the TTL, minus SafetyMargin (see pglease.Lease.Deadline), so the
// workload is cancelled before the lease can have expired on the server.
// After cancelling, the supervisor waits for the workload to return, and
// only then releases the lease (if still held) or stands by again: it never
// releases, nor returns from Run, while the workload may still run. A
// workload that ignores its context is reported after StopTimeout (a log
// line at error level and EventStuck), and kept waiting for; on shutdown the
// lease is renewed meanwhile, so no other instance starts alongside it.
//
// The rule for workloads: return when the context is done. For one that may
// not (a call that ignores its context), Config.HardStop is the opt-in
// backstop: when the tenure ended (a refused renewal, or the local deadline)
// and the workload has not returned HardStop later, the process exits with
// HardStopExitCode after EventHardStop. HardStop must be shorter than
// SafetyMargin, so after a deadline the process is gone before the server's
// expiry; after a refused renewal the tenure is already over on the server,
// and HardStop bounds how long the workload overlaps the next holder.
//
// # What is not guaranteed
//
// Cancellation is a request: a workload that keeps going after its context
// is cancelled, or a process paused (GC, SIGSTOP, a VM migration) past its
// deadline, can still act after another instance took over. Fence the
// writes that matter: the workload can read the fence with Fence and write
// through pglease.WithFence, which the server refuses once the tenure is
// over. Clocks and replication limits are those of package pglease.
//
// # Failure handling
//
// A renewal that fails with a connection error or a timeout has an unknown
// outcome, not a loss: it is retried (renewing is idempotent) every
// RetryDelay while the deadline allows. Only the server's refusal is an
// authoritative loss. Errors while standing by (the database is down) are
// logged and retried with capped exponential backoff; they never end Run.
// Logs are structured (log/slog) with the lease name, holder and fence;
// Config.Observer receives the same events.
//
// # Metrics and health
//
// A supervisor measures through the OpenTelemetry metric API, from
// Config.MeterProvider (the global provider by default, a no-op until the
// service installs an SDK): pglease.supervisor.leading (1 while it leads)
// and pglease.supervisor.transitions (acquired, released, lost), and its
// lease's or slot's instruments (held, losses by reason, renewal round
// trips and margins). Every measurement carries its lease name (or scope) as
// pglease.name: one set of series per supervisor. docs/observability.md
// lists them all.
//
// Healthy reports the one state a health check must catch: a workload that
// still runs grace after its tenure ended (its deadline passed, or it was
// lost), and so may run alongside the next holder. HealthHandler serves it
// as an http.Handler for a liveness probe; IsLeader and Fence serve status
// pages.
package supervisor
