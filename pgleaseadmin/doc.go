// Package pgleaseadmin is the operator's view of pglease: what a status
// page, an exporter or an on-call engineer calls, kept apart from the
// client packages a service imports (pglease, runslots, supervisor). Its
// functions take the database, not a holder: they read or change any
// lease or slot, whoever holds it.
//
// # Overview
//
//   - Leases, Slots and Scopes list what the server sees now (the views
//     pglease.lease_status, slot_status and slot_scope_status), with each
//     holder, fence, state and time left, all computed by the server's
//     clock (`pglease status`).
//   - ReadMetrics reads, in one call, what a monitoring system needs: each
//     lease's state, time to expiry and fence, each scope's occupancy and
//     capacity, and totals (`pglease exporter`, docs/observability.md).
//   - Limits lists the configured rate limits with their levels: how many
//     keys are spending, how many are refused now, the fewest tokens left
//     and the tokens reserved (`pglease status`, docs/limits.md#levels).
//   - ForceRelease ends a lease's tenure whoever holds it: the override for
//     a holder that is gone but whose TTL is long (`pglease release
//     --force`).
//   - Purge deletes what has been free for a while (`pglease purge`); the
//     clients already do it in the background, once per hour across the
//     fleet.
//   - BindPrefix and UnbindPrefix give a name prefix to a role, and take
//     it back: only the role's members take the leases, claim the slot
//     scopes and create the groups under it (`pglease prefix`,
//     docs/security.md). Prefixes lists them; OwnerOf says whose a name is.
//   - PartitionOf finds, behind a PL/Proxy proxy database, the partition
//     that owns a lease name or slot scope (docs/scaling.md).
//
// They take a pglease.DB, as the clients do: a *pgxpool.Pool, a *pgx.Conn
// or a pgx.Tx.
//
// # Safety
//
// Reading is safe at any time: the views take no lock a holder waits for.
// ForceRelease moves the fence on: the next tenure gets a larger one, so
// writes the old holder fences with pglease.WithFence are refused from
// then on, but work it does without fencing is not stopped; the old holder
// learns of it at its next renewal. It needs the privileges of the owner
// of schema pglease (role pglease_client is not granted force_release).
// BindPrefix, UnbindPrefix and Prefixes are the schema owner's too; a
// binding refuses new tenures to other roles, and leaves the live ones to
// run until they end.
// Purge deletes only rows that are free, and keeps fences monotonic: a name
// used again after its purge gets a fence larger than any it had.
//
// # Failure handling
//
// Errors match the sentinels of package pglease: ErrInvalidArgument for a
// bad argument (nothing changed), ErrNotMigrated when schema pglease is
// missing or too old, ErrPermissionDenied when the role lacks the grant.
// Every function takes a context and returns ctx.Err() unchanged when it
// ends first.
package pgleaseadmin
