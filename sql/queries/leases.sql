-- name: LeaseAcquire :one
SELECT a.acquired::boolean AS acquired, a.fence::bigint AS fence,
       a.holder::text AS holder, a.expires_at::timestamptz AS expires_at,
       a.expires_in::interval AS expires_in
FROM pglease.acquire(@name, @holder, @ttl) AS a;

-- name: LeaseRenew :one
SELECT r.renewed::boolean AS renewed, r.expires_in
FROM pglease.renew(@name, @holder, @fence, @ttl) AS r;

-- name: LeaseRelease :one
SELECT r.released::boolean AS released
FROM pglease.release(@name, @holder, @fence) AS r;

-- name: LeaseReleaseAsync :one
-- The release in a transaction of its own whose commit does not wait for
-- its WAL flush (set_config is_local: this statement's transaction only).
-- Only outside a transaction block: it would make the block's commit
-- asynchronous too. Safe for a release: see docs/reliability.md.
SELECT r.released::boolean AS released
FROM pglease.release(@name, @holder, @fence) AS r
CROSS JOIN LATERAL pg_catalog.set_config('synchronous_commit', 'off', true) AS s;

-- name: LeaseAssertHeld :exec
SELECT pglease.assert_held(@name, @fence);

-- name: LeaseForceRelease :one
SELECT r.released::boolean AS released, r.holder, r.fence
FROM pglease.force_release(@name) AS r;

-- name: LeaseStatusList :many
-- The leadership columns and owner_role are 0.3.0's (docs/leadership.md,
-- docs/security.md#names-a-role-owns).
SELECT name, holder, fence, state, expires_at, expires_in::interval AS expires_in,
       coalesce(value, '')::text AS value,
       (release_requested_at IS NOT NULL)::boolean AS release_requested,
       coalesce(preferred_holder, '')::text AS preferred_holder,
       coalesce(owner_role, '')::text AS owner_role
FROM pglease.lease_status
ORDER BY name;

-- name: HolderRenew :one
SELECT r.leases::text[] AS leases, r.lease_fences::bigint[] AS lease_fences,
       r.slot_scopes::text[] AS slot_scopes, r.slots::integer[] AS slots,
       r.slot_fences::bigint[] AS slot_fences,
       r.lost_leases::text[] AS lost_leases,
       r.lost_slot_scopes::text[] AS lost_slot_scopes,
       r.lost_slots::integer[] AS lost_slots,
       r.expires_in::interval AS expires_in
FROM pglease.renew_holder(@holder, @ttl) AS r;

-- name: NotifyListen :exec
LISTEN pglease;

-- name: NotifyBackendPID :one
-- The server's process ID for this session: a connection whose startup
-- reported another one goes through a pooler, where a LISTEN stays behind
-- on whichever server connection ran it.
SELECT pg_backend_pid();

-- Leadership (0.3.0, docs/leadership.md).

-- name: LeaseRenewAsked :one
-- renew_lease: renew, and whether a release was requested.
SELECT r.renewed::boolean AS renewed, r.expires_in,
       r.release_requested::boolean AS release_requested
FROM pglease.renew_lease(@name, @holder, @fence, @ttl) AS r;

-- name: LeaseReleaseAsked :one
-- Whether a release of the live tenure name/fence was requested: a read,
-- for a tenure that looks without renewing (a Keeper's rounds do not say).
SELECT coalesce((SELECT s.release_requested_at IS NOT NULL
                 FROM pglease.lease_status AS s
                 WHERE s.name = @name AND s.fence = @fence::bigint AND s.state = 'held'),
                false)::boolean AS release_requested;

-- name: LeaseAcquireValue :one
SELECT a.acquired::boolean AS acquired, a.fence::bigint AS fence,
       a.holder::text AS holder, a.expires_at::timestamptz AS expires_at,
       a.expires_in::interval AS expires_in, coalesce(a.value, '')::text AS value
FROM pglease.acquire(@name, @holder, @ttl, sqlc.narg('value')::text) AS a;

-- name: LeaseSetValue :one
SELECT s.value_set::boolean AS value_set
FROM pglease.set_value(@name, @holder, @fence, sqlc.narg('value')::text) AS s;

-- name: LeaseObserve :one
SELECT o.state::text AS state, coalesce(o.holder, '')::text AS holder,
       o.fence::bigint AS fence, coalesce(o.value, '')::text AS value,
       o.expires_in::interval AS expires_in,
       (o.release_requested_at IS NOT NULL)::boolean AS release_requested
FROM pglease.observe(@name, @for_interval::interval) AS o;

-- name: LeaseRequestRelease :one
SELECT r.requested::boolean AS requested, r.holder::text AS holder, r.fence::bigint AS fence
FROM pglease.request_release(@name, sqlc.narg('preferred')::text, @reserve::interval) AS r;

-- name: LeaseAcquireBatch :one
-- Batched calls (0.3.0, docs/sql.md#batched-calls). A value '' is none
-- (NULL), as for LeaseAcquireValue. NULL result elements (of bad elements)
-- read as zero values; sqlstates is '' for a decided element.
SELECT a.acquired::boolean[] AS acquired,
       pg_catalog.array_replace(a.fences, NULL, 0::bigint)::bigint[] AS fences,
       pg_catalog.array_replace(a.holders, NULL, '')::text[] AS holders,
       pg_catalog.array_replace(a.expires_in, NULL, interval '0')::interval[] AS expires_in,
       pg_catalog.array_replace(a.lease_values, NULL, '')::text[] AS lease_values,
       a.fresh::boolean[] AS fresh,
       pg_catalog.array_replace(a.sqlstates, NULL, '')::text[] AS sqlstates
FROM pglease.acquire_batch(@names::text[], @holder, @ttls::interval[], pg_catalog.array_replace(@lease_values::text[], '', NULL)) AS a;

-- name: LeaseReleaseBatchAsync :one
-- As LeaseReleaseAsync: the commit does not wait for its WAL flush; only
-- outside a transaction block.
SELECT r.released::boolean[] AS released,
       pg_catalog.array_replace(r.sqlstates, NULL, '')::text[] AS sqlstates
FROM pglease.release_batch(@names::text[], @holder, @fences::bigint[]) AS r
CROSS JOIN LATERAL pg_catalog.set_config('synchronous_commit', 'off', true) AS s;
