// Package runslots gives N-slot concurrency claims that live in Postgres:
// "at most N of us do this at once", per tenant, per GPU pool, per
// upstream API, across every process that shares the database.
//
// # Overview
//
// A scope (any string of 1 to 256 bytes: "tenant:42", "gpu-pool") admits at
// most N live holders at once, where N is the capacity the claim passes.
// Each holder gets a numbered slot, 1 to N, with a fence: a number larger
// than that of every earlier tenure of the same slot. The slots are rows in
// schema pglease, changed only by the SQL functions pglease.claim_slot,
// claim_slots, renew_slot and release_slot, which this package calls
// through generated code:
//
//	client, err := runslots.New(pool, runslots.Config{})
//	slot, err := client.Claim(ctx, runslots.Want{Scope: runslots.Want{Scope: "tenant:42", Capacity: Capacity: 4}}, 30*time.Second)
//	err = slot.Run(ctx, func(ctx context.Context) error {
//		return work(ctx) // at most 4 of these run at once, fleet-wide
//	})
//
// Claim waits for a slot (woken by the release NOTIFY, else at the
// earliest expiry); Slot.Run renews it while fn runs, cancels fn's context
// when the slot can no longer be trusted, and releases the slot when fn
// returns. Besides:
//
//   - TryClaim takes a slot or returns a *FullError (ErrFull) at once.
//   - A Want says the scope, the capacity and how many units of it the
//     claim takes (one by default), per claim, as x/sync's
//     semaphore.Acquire(ctx, n) does.
//   - TryClaimAll and ClaimAll take one slot in each of several scopes, all
//     or nothing ("a tenant slot and a GPU slot").
//   - Slot.Run holds a slot as pglease.Lease.Run holds a lease; Slot.Renew
//     extends a tenure,
//     Slot.Release ends it early; Slot.Deadline says until when the caller
//     may rely on it, and Slot.Done closes when it can no longer be trusted.
//   - The occupancy the server sees (every slot and scope, whoever holds
//     it) is the operator's view: pgleaseadmin.Slots and Scopes.
//
// Slots and leases are two kinds of one tenure, with one core: Config has
// the fields of pglease.Config with the same defaults and rules, the
// deadline rule and Run's renewal policy are the same, one pglease.Keeper
// renews both, and the errors match alike (ErrSlotLost matches
// pglease.ErrLeaseLost; invalid arguments, a missing schema and a missing
// grant are pglease's ErrInvalidArgument, ErrNotMigrated and
// ErrPermissionDenied).
//
// A Client is one holder and holds at most one slot per scope: claiming a
// scope it already holds returns the same tenure. To occupy several slots
// of a scope from one process, use one Client per concurrent claim.
//
// Apply the schema first with pgleasemigrate.Up (or `pglease migrate up`).
//
// # Safety
//
// Every decision is made by the server's clock, in one statement per call.
// Claims of one scope are serialised by a row lock on the scope, so counting
// the live holders and taking a slot are one step, however many clients
// race. What that guarantees:
//
//   - The cap is enforced by the server per claim: a claim with capacity N
//     succeeds only while fewer than N holders of the scope are live at the
//     moment it is decided. If every claim of a scope passes the same N, at
//     most N holders are live at any instant of the server's clock.
//   - Capacity is the caller's per-claim setting, not a property stored
//     with the scope. A claim with a smaller capacity evicts nobody: live
//     holders keep their slots until they release or expire, and claims at
//     the smaller capacity are refused until fewer than it are live. A claim
//     with a larger capacity is admitted up to its own figure, so callers
//     that disagree about N get the larger one. A holder re-claiming a
//     scope it holds gets its slot back whatever the capacity.
//   - Weighted claims: with Want.Units k, a claim takes k
//     units of the capacity, all or nothing, as one slot with one fence;
//     the cap counts units: a claim of k units with capacity N succeeds
//     only while the units in use plus k are at most N and at most the
//     smallest capacity any live holder claimed with. A claim of more
//     units than a live holder's capacity is an error (SQLSTATE PGL06).
//   - No starvation: a blocking claim (Claim, ClaimAll) that is
//     refused is queued on the server in the order of its first refusal;
//     the oldest queued claim keeps room for its units against every later
//     claim, so a claim of many units is not overtaken forever by claims of
//     few. A queued claim keeps its place while it claims again within 7
//     seconds (Claim does, at least every 5); TryClaim and TryClaimAll are
//     never queued. See docs/sql.md#slots for the rule and its bound.
//   - Two live holders of a scope never share a slot number, and a slot's
//     fence never goes backwards: each new tenure of a slot gets the
//     previous fence + 1. A scope whose slots have all been free for a day
//     is deleted by purge (pgleaseadmin.Purge, a supervisor's PurgeEvery), but
//     before it goes the server records its fences in a floor, committed
//     with the delete, and a slot used again starts above it. Fences of
//     different slots are unrelated.
//   - TryClaimAll and ClaimAll hold every wanted slot or none, and take
//     the scope locks in one global order, so they cannot deadlock each
//     other.
//
// The client never compares server timestamps with its own clock. A slot's
// Deadline is the local monotonic time at which the caller must assume it is
// gone: when the successful claim or renewal was sent, plus the TTL, minus a
// safety margin (Config.SafetyMargin, a tenth of the TTL by default). The
// server's expiry is later than that as long as the two clocks tick at
// nearly the same rate.
//
// What is not guaranteed:
//
//   - The cap counts tenures, not running work. A holder that is paused (a
//     GC pause, SIGSTOP, a VM migration) past its Deadline may still be
//     working when it resumes, while its slot has expired and been handed
//     to someone else: for that while, N+1 or more processes do the work.
//     Run cancels fn's context at the Deadline, but cannot stop code that
//     does not look at it. There is no fenced-write helper for slots; a
//     resource that must refuse stale holders has to check the fence of
//     (scope, number) itself.
//   - Clocks: the margin absorbs rate differences, not a server clock that
//     jumps forward (which expires slots early).
//   - Replication: a slot is as durable as the commit that granted it;
//     after a failover to an asynchronous standby, granted slots and fences
//     can be lost and handed out again.
//   - Fairness: waiters are not queued. A blocked Claim retries when a slot
//     frees and may lose the race to a newcomer; a ClaimAll can starve
//     while single-scope claims keep taking the slots it needs.
//
// # Failure handling
//
// TryClaim's and TryClaimAll's refusal is a *FullError (ErrFull) saying how
// many holders are live and when the earliest expires. Renew and Release
// return ErrSlotLost only when the server refused: that is the verdict that
// the tenure is over. ErrSlotLost also matches pglease.ErrLeaseLost, so
// code can treat leases and slots alike. Any other error from Renew
// (connection reset, timeout) leaves the outcome unknown; renewing is
// idempotent, so retry while Deadline allows, and stop the work when it
// passes. Slot.Run does exactly that, and returns an error matching
// ErrSlotLost when the slot was lost while fn ran, even if fn then returned
// nil; see Slot.Run for the full contract. Errors wrapping
// pglease.ErrInvalidArgument mean a bad argument and that nothing changed;
// the client checks arguments before any round trip. Every call takes a
// context and returns ctx.Err() unchanged when it ends first.
//
// Blocking claims of a client built on a *pgxpool.Pool share one LISTEN
// connection per pool, opened outside the pool. On a *pgx.Conn or a
// pgx.Tx, when LISTEN fails, or behind PgBouncer in transaction pooling mode
// (where LISTEN does not work), they wake at the earliest expiry the server
// reported instead of at a release. Behind PgBouncer, use pgx's
// QueryExecModeExec or QueryExecModeSimpleProtocol.
//
// # Metrics
//
// A Client measures its slots as pglease's clients measure leases, with
// the attribute pglease.kind "slot": through the OpenTelemetry metric API,
// from Config.MeterProvider (the global provider by default, a no-op until
// the service installs an SDK), without the scope unless
// Config.MetricsByName asks for it. docs/observability.md lists every
// instrument.
package runslots
