// Package tenure is the one core under pglease's leases and runslots'
// slots: a tenure is a time-limited, fenced hold on a lease or on one slot
// of a scope, and the two packages are its two kinds.
//
// # Overview
//
// The core owns what both kinds share: the configuration and its rules
// (Config: the defaults, the checks, the pace of renewals), the holder
// identity and the checks of arguments, the local deadline rule (the
// request's send time plus the TTL minus the safety margin), renewal and
// release by compare-and-set on (holder, fence), Done, the try, listen and
// wait loop of the blocking calls (Await), Run and the policy that holds a
// tenure while a workload runs (Hold, over package hold), the Keeper that
// renews every tenure of a holder in one round trip, and the mapping of the
// SQL functions' errors to sentinels (Interpret). pglease and runslots add
// only what differs (a Kind): the queries that grant a tenure, the shape of
// a refusal and of a loss, and the documentation of their own Config.
//
// # States of a tenure
//
// A *Tenure is one tenure as this process sees it. The server's row is the
// truth; the states below are what the client may assume, from what the
// server answered and from its own monotonic clock. A tenure is granted
// held and ends once, in one of three ways; an ended tenure never comes
// back (a new grant is a new *Tenure, with the same fence when the holder
// acquired again while the server still had it).
//
//	grant --> held --renewal sent--> renewing --renewed, or outcome unknown--> held
//	          held --Release accepted--> released
//	          held, renewing --refused by the server, or not renewed by a Keeper round--> lost
//	          held, renewing --Deadline passed; kept: Release failed--> abandoned
//	          abandoned --renewed by a Keeper round--> released by the keeper
//
// In words:
//
//   - held: granted, Done open, Deadline ahead. A timer ends it at the
//     Deadline.
//   - renewing: held, with a renewal in flight: Renew's own call, or for a
//     tenure a Keeper renews, a wait for the keeper's next round. Renewed,
//     the Deadline moves to the send time of the renewal (or round) plus
//     the TTL minus the margin, never backwards. Refused, the tenure is
//     lost. An unknown outcome (connection error, timeout) changes nothing:
//     renewing is idempotent, so the caller retries while the Deadline
//     allows.
//   - released: Release's compare-and-set ended it on the server; Done
//     closes and the Deadline moves to now. The row keeps its fence: the
//     next tenure gets a larger one. A Release whose outcome is unknown
//     leaves the tenure held (retry it, or let it expire); for a kept
//     tenure it leaves it abandoned.
//   - lost: the server said the tenure is over (expired, released by an
//     operator, taken over: the fence moved on). Done closes; Renew,
//     Release and Run report the kind's lost sentinel. There is nothing to
//     release.
//   - abandoned: ended here while the server may still hold it: the
//     Deadline passed with no renewal confirmed (one sent before it may yet
//     have landed), or a kept tenure's Release failed. Done closes. The
//     server frees it at its own expiry; a Keeper that still renews it (the
//     holder's tenures are renewed by holder, not by tenure) releases it
//     after that round, so that it does not hold it for ever.
//
// Done is closed exactly in the three ended states: work a tenure guards
// stops when it closes.
//
// # Measurements
//
// A Core makes its instruments once (metrics.go), from Config.MeterProvider,
// and a tenure measures its transitions where they happen: a grant counts an
// acquisition and a tenure held; the end, once, in endLocked, counts it no
// longer held and, for a loss, its reason, before Done closes. The reason is
// decided where the tenure ends: refused when the server said so (Renew
// refused, a Keeper's round that did not renew it, a Release that found it
// gone: lost above); at the Deadline (abandoned above, or Hold's
// ErrDeadline), connection when an own renewal was in flight or the last one
// failed with an unknown outcome (for a kept tenure, its Keeper's round in
// flight or failed), else deadline; Hold's ErrNoTime is connection. A
// release, or a kept tenure whose Release failed, is no loss.
//
// # Holding a tenure while a workload runs
//
// Run (Lease.Run, Slot.Run) and pglease run use Hold: the workload runs
// with a context of its own while the tenure is renewed every renew
// interval (Config.Pace: a third of the TTL and a fifth of that by
// default; with a Keeper, its rounds). The workload's context is cancelled,
// with a cause, when the tenure is lost (ErrRefused), when the Deadline
// passes with no renewal confirmed (ErrDeadline), when a renewal failed
// with no time left to retry (ErrNoTime), or when the parent context ends
// (its error; renewals go on until the workload returns, so the tenure
// does not lapse while it winds down). A workload that has not returned
// StopTimeout after its cancellation is reported stuck and still waited
// for: a tenure is never released, nor Run returned, while the workload
// may run. Once the workload has returned, Run releases the tenure, or,
// when it was lost, reports the kind's LostError.
package tenure
