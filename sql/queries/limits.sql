-- Rate limits (0.4.0, #51, docs/limits.md), for package ratelimit.

-- name: LimitTake :one
SELECT t.allowed::boolean AS allowed, t.remaining::integer AS remaining, t.retry_in,
       t.reset_in::interval AS reset_in, t.burst::integer AS burst,
       t.decided_at::timestamptz AS decided_at
FROM pglease.take(@key, @cost::integer) AS t;

-- name: LimitPeek :one
SELECT t.allowed::boolean AS allowed, t.remaining::integer AS remaining, t.retry_in,
       t.reset_in::interval AS reset_in, t.burst::integer AS burst,
       t.decided_at::timestamptz AS decided_at
FROM pglease.peek(@key) AS t;

-- name: LimitSet :one
SELECT pglease.limit_set(@target, @rate::integer, @per::interval, @burst::integer, @exact::boolean)::boolean AS replaced;

-- name: LimitUnset :one
SELECT pglease.limit_unset(@target)::boolean AS removed;

-- name: LimitReset :one
SELECT pglease.limit_reset(@key)::integer AS reset;

-- name: LimitReserve :one
SELECT r.reserved::boolean AS reserved, r.reservation, r.expires_at,
       r.remaining::integer AS remaining, r.retry_in, r.reset_in::interval AS reset_in,
       r.burst::integer AS burst, r.decided_at::timestamptz AS decided_at
FROM pglease.reserve(@key, @amount::integer, @ttl::interval) AS r;

-- name: LimitSettle :one
SELECT s.settled::boolean AS settled, s.refunded::integer AS refunded,
       s.remaining::integer AS remaining, s.decided_at::timestamptz AS decided_at
FROM pglease.settle(@key, @reservation::bigint, @actual::integer) AS s;

-- name: LimitReserveAll :one
SELECT r.reserved::boolean AS reserved, r.reservation, r.expires_at, r.refused_by,
       r.remaining::integer AS remaining, r.retry_in, r.reset_in::interval AS reset_in,
       r.burst::integer AS burst, r.decided_at::timestamptz AS decided_at
FROM pglease.reserve_all(@keys::text[], @amount::integer, @ttl::interval) AS r;
