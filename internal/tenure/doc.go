// Package tenure is the one core under pglease's leases and runslots'
// slots: a tenure is a time-limited, fenced hold on a lease or on one slot
// of a scope, and the two packages are its two kinds.
//
// The core owns what both kinds share: the holder identity and the checks
// of a client's settings and arguments, the local deadline rule (the
// request's send time plus the TTL minus the safety margin), renewal and
// release by compare-and-set on (holder, fence), Done, the try, listen and
// wait loop of the blocking calls, Run with its one keep policy, and the
// mapping of the SQL functions' errors to sentinels. pglease and runslots
// add only what differs: the queries that grant a tenure and the shape of a
// refusal.
package tenure
