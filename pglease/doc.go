// Package pglease gives fenced leases that live in Postgres: "only one of us
// does this right now", for services that already run Postgres and should
// not need Redis, etcd or ZooKeeper for it.
//
// # Overview
//
// A lease is a named row in schema pglease, changed only by the SQL
// functions pglease.acquire, renew, release and assert_held, which any
// client can call. This package calls them through generated code:
//
//	client, err := pglease.New(pool, pglease.Config{})
//	lease, err := client.TryAcquire(ctx, "outbox-dispatcher", 30*time.Second)
//	if errors.Is(err, pglease.ErrLeaseHeld) { ... } // someone else has it
//	err = lease.Run(ctx, func(ctx context.Context) error {
//		// renewed meanwhile; ctx ends the moment the lease is not certain
//		return pglease.WithFence(ctx, pool, lease.Name(), lease.Fence(), func(tx pgx.Tx) error { ... }) // fenced write
//	})
//
// A lease and a slot (package runslots) are two kinds of one concept, a
// tenure, with one API: TryAcquire returns at once, Acquire blocks until the
// lease is free (woken by the release NOTIFY, else at the holder's expiry);
// a Lease has a Fence, a Deadline, Done (closed once it can no longer be
// trusted), Renew, Release, and Run, which holds it while a function runs.
// Each tenure's fence is larger than that of every earlier tenure of the
// lease, also across release, expiry and purge. The supervisor package runs
// a workload under a lease in a loop, standing by while another instance
// has it; most services want that or Run rather than calling Renew
// themselves. A Keeper renews every lease and slot of a process in one
// round trip per interval, however many it holds.
//
// A Client on a *pgxpool.Pool coalesces its goroutines' concurrent
// acquires and releases (group commit): a call goes out at once when none
// of its kind is in flight; calls made while one is go out together, in
// one pglease.acquire_batch or release_batch, when it returns (or once it
// has been out for 20 ms, so that a call waiting on the server does not
// hold back the others). Each name is
// still decided on its own, each Lease has its own Deadline from its
// batch's send time, and a caller's cancellation ends only its own wait
// (docs/go.md#batched-calls).
//
// Apply the schema first with package pgleasemigrate (or `pglease migrate
// up`). The operator's view (listing every lease, force-releasing one whose
// holder is gone, purging what has been free for a while) is package
// pgleaseadmin: it takes the database, not a holder.
//
// # Safety
//
// Every decision is made on the server, on its clock, read after the call
// has taken the lease row's lock (after every wait for it, never at the
// caller's transaction start), and written while that lock is held: a
// grant, renewal or release compares and swaps the row under its lock, and
// the first tenure of a new name is an insert that the row's primary key
// lets only one caller make. A call may take several statements (acquire
// looks, locks, then writes, and retries when the row changed under it),
// but no other call can change the row between its decision and its
// commit. So, whatever clients race:
//
//   - at most one holder has a live tenure of a lease at any instant of the
//     server's clock;
//   - fences never go backwards: a new tenure gets the previous fence + 1.
//     A row free for a while is deleted by purge (pgleaseadmin.Purge, a
//     supervisor's PurgeEvery), but before it goes the server records its fence
//     in a floor, committed with the delete, and a name used again starts
//     above it: larger than every fence it had, also across purge;
//   - a write made inside WithFence commits only while its tenure is
//     current: assert_held locks the lease row, so no takeover can commit
//     between the check and the write's commit.
//
// The client never compares server timestamps with its own clock. A lease's
// Deadline is the local monotonic time at which the caller must assume it is
// gone: when the successful acquire or renew was sent, plus the TTL, minus a
// safety margin (Config.SafetyMargin, a tenth of the TTL by default). The
// server's expiry is later than that as long as the two clocks tick at
// nearly the same rate.
//
// # What is not guaranteed
//
// A lease cannot stop a process that does not look. A holder that is paused
// (a GC pause, SIGSTOP, a VM migration) past its Deadline may still act
// when it resumes, while another holder has the lease. Only writes fenced
// with WithFence (or checked by the resource against the fence) are
// refused then; any other side effect of a paused holder is not prevented.
// Clocks: the margin absorbs rate differences, not a server clock that
// jumps forward (which expires leases early). Replication: a lease is as
// durable as the commit that granted it; after a failover to an
// asynchronous standby a granted tenure or fence can be lost and handed out
// again (measured: make test-failover). Run pglease on a primary with
// synchronous replication, or accept that risk. Even then, a commit that
// waits for the standby and is cancelled (a query cancel request) is
// reported as a success with a warning although the standby may not have
// it: do not configure pgx to send cancel requests on context cancellation
// (its default closes the connection instead, which is safe).
//
// # Failure handling
//
// TryAcquire's refusal is a *HeldError (ErrLeaseHeld) saying who holds the
// lease and for how long. Renew returns ErrLeaseLost only when the server
// refused: that is the verdict that the tenure is over. Any other error from
// Renew (connection reset, timeout) leaves the outcome unknown; renewing is
// idempotent, so retry while Deadline allows, and stop the work when it
// passes (Run does all of this). Run reports a loss as a *LostError naming
// the lease and fence. Errors wrapping ErrInvalidArgument mean a bad
// argument or Config field (New names it) and that nothing changed;
// ErrNotMigrated means the schema is missing or too old, ErrPermissionDenied
// that the role lacks the pglease_client grant. Every call takes a context
// and returns ctx.Err() unchanged when it ends first.
//
// Behind PgBouncer in transaction pooling mode, use pgx's
// QueryExecModeExec or QueryExecModeSimpleProtocol. LISTEN does not work
// there: a client whose LISTEN connection goes through a pooler (its
// backend PID is not the server's) does not LISTEN, and Acquire wakes at
// the holder's expiry instead of at its release, unless the DB is a
// Listener whose connections go straight to the server.
//
// # Metrics
//
// A Client and a Keeper measure through the OpenTelemetry metric API, from
// Config.MeterProvider (KeeperConfig.MeterProvider), the global provider by
// default: a no-op until the service installs an SDK. Tenures held,
// granted, refused, released and lost (by reason: refused, deadline,
// connection), each renewal's round trip and the margin it leaves, and a
// Keeper's rounds. Measurements carry the kind, not the lease name, unless
// Config.MetricsByName asks for it: a locker of one lease per entity makes
// a few series, not one per entity. docs/observability.md lists every
// instrument.
//
// # Leadership
//
// A holder may publish a value with its tenure (WithValue, Lease.SetValue):
// who leads and where, which a refused acquire's HeldError.Value and
// Client.Observe show. Observe delivers every change of a lease in order,
// vacancies included, woken by NOTIFY and polling every
// Config.ObserveInterval. An operator may ask a holder to hand over
// (pgleaseadmin.RequestRelease); the holder learns it at its next renewal
// (Lease.ReleaseRequested) and releases once its work has stopped.
// docs/leadership.md has the rules and limits.
package pglease
