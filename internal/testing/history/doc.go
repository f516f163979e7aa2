// Package history checks recorded histories of pglease calls against the
// project's claims: never two live holders of a lease, never more than N of
// a scope, fences that never go backwards (also across release), and
// fenced writes that commit only inside their tenure. It is for tests.
//
// # Overview
//
// A test records each call as an Op with the times it was invoked (Call)
// and answered (Return), read from one monotonic clock (a Recorder), and
// what the client learned (OK, Refused, or Unknown for an error). Check
// then replays the history. Separately, CheckServer replays the server's
// own history (every row version of pglease.leases and pglease.slots,
// written by an audit trigger, and the log of committed fenced writes), and
// Agree checks the two against each other. CheckSpans checks workload runs
// (supervisors) for overlap.
//
// # What Check verifies, and why no correct history fails it
//
// An operation's effect happened somewhere between its Call and Return
// (an Unknown one: at any time after Call, even after Return, since the
// server may still run it). Each holder makes one call at a time (checked:
// RuleSequential). Nothing else is assumed about the order of concurrent
// calls.
//
// A call may run in an explicit transaction at any isolation level
// (Op.Isolation): its Call is read after the transaction's snapshot was
// taken, its Return after the COMMIT returned, so its effect and its
// clock reading lie between the two as for any call. Under REPEATABLE
// READ and SERIALIZABLE the snapshot is older than Call, and a decision
// read from it would be stale; pglease's functions take every grant on a
// row they lock for update (a row changed or deleted after the snapshot
// raises 40001, and so does an insert colliding with a row the snapshot
// does not see) and read the fence floors from sequences, which no
// snapshot hides. So the rules below hold at every level, for the same
// reasons, but for refusals, which may describe the snapshot's state (see
// RuleRefusal). A call that raised 40001 rolled back (Aborted) and is left
// out, but for RuleSequential.
//
// The server's clock and the recorder's must tick at the same rate
// (same machine; Config.Slack, 1ms, absorbs the rest); their offset does
// not matter, because Check only compares durations measured on the
// server (TTLs) with durations on the recorder's clock.
//
// A tenure is one (lease, fence) or (scope, slot, fence). It is certainly
// live at instant t if the latest version of its row committed by t
// certainly says so. After an OK grant or renewal j committed (by
// j.Return), the row expires at v_now + TTL of whichever extension
// committed last, where v_now is read after the call was made: at least
// Call + TTL of that extension. The candidates are j and any later
// extension already called (an Unknown one: called at any time). A release
// (OK or Unknown) may end it from its Call on. So the tenure is certainly
// live on [j.Return, min over candidates of Call + TTL, and of release
// Calls) minus Slack, and its certain set is the union over j. A tenure is
// possibly live from the Call of its grant until the latest Return + TTL of
// its extensions (unbounded after an Unknown one), and no later than the
// Return of an OK release or of a refusal (a refused renewal, release or
// fenced write proves it over; a tenure cannot come back, unless an
// Unknown extension with an older clock reading lands late, in which case
// refusals are not used).
//
// The rules, each sound under the above:
//
//   - RuleOverlap: no two tenures of one lease or one slot have overlapping
//     certain sets. A takeover needs the row expired by the taker's clock
//     or released; both are impossible while the certain set lasts.
//   - RuleCapacity: never more units held by certainly-live tenures of a
//     scope than its capacity (by default the largest capacity its claims
//     passed; a claim's units are Op.Units, 1 when unset); and no claim of
//     k units with capacity c granted while other tenures of the scope
//     holding more than c - k units were certainly live throughout its call (the claim counts the rows live at
//     its clock reading, which lies inside its call).
//   - RuleFenceOrder: a tenure whose grant was called after another
//     tenure's grant returned has a larger fence. The first grant
//     committed before the second began, and a new tenure's fence is the
//     row's fence + 1. Release and expiry keep the row; pglease.purge
//     deletes rows of ended tenures, but first raises the fence floor to
//     at least their fences, and a new row starts above that floor as it
//     stands, whatever the caller's snapshot, so this holds across
//     release, expiry and purge at every isolation level. (Before 0.3.0
//     the floor was a table row, read in the snapshot: a REPEATABLE READ
//     acquire whose snapshot predated a purge of its name, and the name's
//     use before it, started it again at a fence already granted; this
//     rule, RuleTwoHolders and the server's RuleServerFence catch that.)
//   - RuleTwoHolders: a fence of one lease or slot is granted to one
//     holder only.
//   - RuleOutside: every OK renewal, release, re-grant (re-entrant acquire
//     or claim) and fenced write of a tenure lies where the tenure is
//     possibly live (not answered before the grant was called, not called
//     after its possible end, not after an OK release or a refusal of it),
//     and not where another tenure of the same lease or slot is certainly
//     live throughout; an OK fenced write under a fence never granted, or
//     an OK renewal or release by another holder, breaks it too. A fenced
//     write checks the fence with assert_held at a clock reading inside its
//     call.
//   - RuleRefusal: an acquire refused in the name of (holder, fence) names
//     a tenure granted to that holder and possibly live during the call
//     (not the caller); a claim refused with n live holders happened while
//     at least n tenures of the scope (plus claims of Unknown outcome)
//     could have been live. Refusals naming a tenure that only an Unknown
//     acquire can have made are counted as unverifiable. When a refused
//     acquire records the time left it reported (Op.ExpiresIn), that is
//     the tenure's expiry minus the clock reading that decided, some d in
//     [Call, Return]: it must be > 0 (a refusal needs the expiry after
//     d), d + ExpiresIn no later than the latest expiry an extension
//     called before Return can have set (so Call + ExpiresIn is bounded by
//     the tenure's possible end), and, when one extension's certain
//     segment covers the whole call, the expiry at d is at least that
//     segment's end (so Return + ExpiresIn reaches it). A refusal at
//     REPEATABLE READ or SERIALIZABLE may describe the rows as its
//     snapshot has them (Op.Snapshot), not as they are at the decision: an
//     acquire's FOR KEY SHARE lock does not conflict with a renewal or
//     release committed after the snapshot (neither changes a key), so it
//     raises no 40001 and reads the older version; a claim locks the
//     scope's row, not the slot rows it counts. Such a refusal, explained
//     by a state since the snapshot and by none during the call, is
//     counted (Report.SnapshotRefusals), not reported.
//
// Check under-approximates certain sets and over-approximates possible
// ones, so it reports no false violations; the price is that a violation
// hidden inside the uncertainty of a call's window goes unseen. Short
// calls and long TTLs narrow that window; the server history narrows it to
// nothing for fenced writes.
//
// # What CheckServer verifies
//
// The audit trigger runs AFTER each row change, so after the row lock is
// held, and takes a number from one sequence; so does each fenced write,
// after assert_held, in the writer's transaction. A sequence number is not
// commit order in general, but it is where it matters: a fenced write
// holds a FOR SHARE lock on the lease row from assert_held until it
// commits, and any change of that row (takeover, release, renewal) must
// wait for it; a write of the next tenure can only begin once the takeover
// committed. So, per lease, a write's number lies between the number of
// its tenure's grant and that of the next change of holder, and the replay
// in number order is faithful. Versions of one row written by one
// transaction (ServerEvent.Tx) count as one change, the last: the others
// were never committed. CheckServer checks, per row: first fence 1,
// each new tenure's fence the previous + 1, and a row created again after
// its purge above every fence it had; each takeover of a row whose
// previous tenure was released or had expired by the taker's own clock
// reading (acquired_at; for a lease row created again after its purge,
// the insert's own clock, since the acquire may have read its clock before
// waiting for the purge), no released tenure revived; each write under the
// current, unreleased fence, begun (transaction start, before assert_held)
// before the latest expiry of its tenure; slot numbers within capacity.
// Timestamps from the server are compared only with each other.
//
// Agree: every tenure a client was granted was granted by the server to
// that holder, every tenure the server granted was asked for by its holder
// (OK, or Unknown), and each (lease, fence, holder) has between the OK and
// the OK + Unknown count of client writes in the server's log.
//
// # What is not checked
//
// Wall-clock steps of the server (they expire leases early, as documented),
// replication, and effects outside the database: CheckSpans only says that
// the recorded workload runs did not overlap on one process's clock.
package history
