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
