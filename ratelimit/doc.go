// Package ratelimit limits the rate of calls by key, decided by the
// server's clock inside Postgres: every process that shares the database
// shares each key's budget, and a spend can join the caller's own
// transaction.
//
// # Overview
//
// A limit is set once for a key or a prefix of keys (Limiter.Set, by the
// schema owner or by the role a prefix is bound to, docs/security.md):
// rate tokens per interval, at most burst at once. The longest matching
// prefix wins, so tiers are prefixes: "tenant/gold/" 1000 per minute
// beside "tenant/" 100 per minute. Callers name the key, never the
// numbers:
//
//	ok, err := limiter.Allow(ctx, "tenant/acme/search")
//
// Take returns the whole Decision (tokens remaining, when the next one is
// there, when the bucket is full again), Wait blocks until the tokens are
// there, and TakeTx spends inside the caller's pgx.Tx: the spend commits
// or rolls back with the caller's work.
//
// When the cost is known only afterwards, Reserve holds the most it can
// be and Settle spends what was used and gives the rest back, before the
// reservation's TTL passes on the server's clock; like a lease, the work
// must stop by then. A reservation never settled gives its whole amount
// back at its expiry, and a Settle after it reports false. ReserveAll
// reserves at several levels at once, all or nothing (a user, its tenant
// and their pool): one reservation, settled at every level by one Settle
// with any of its keys.
//
// # Safety
//
// Every decision is pglease.take's (sql/functions/80_limits.sql): the
// generic cell rate algorithm on one row per key, locked while it decides,
// on one reading of the server's clock taken after the lock, in whole
// microseconds. So over any span d the takes allowed for a key spend at
// most burst + d / emission tokens (emission = interval / rate, rounded up
// to a microsecond), however many processes take at once, and whatever
// their clocks say. A key under a prefix bound to a role is that role's:
// other roles get ErrPermissionDenied. A key of a shared name is limited
// per database role: each role taking it has a bucket of its own.
//
// # Failure handling
//
// A call whose reply is lost may or may not have spent: a connection
// error is returned as it is, and the tokens may be gone. A refusal spends
// nothing. A spend by TakeTx in a transaction that rolls back is not
// spent. Wait returns ctx.Err() unchanged when ctx ends first; it sleeps
// on the client between tries, holding no connection and no lock.
//
// Through a PL/Proxy proxy a call commits on its key's partition at
// once: there TakeTx does not roll back with the caller's transaction.
//
// Not guaranteed: fairness between waiters (the first take after the
// tokens are there wins, not the first waiter), and decisions across
// partitions of a PL/Proxy proxy for keys that do not share a routing
// key (each key lives on one partition, whose clock decides). Nor does
// anything stop work paid for by a reservation at its expiry: the amount
// goes back to the key then, and work still running spends uncounted.
package ratelimit
