-- name: SlotClaim :one
SELECT c.claimed::boolean AS claimed, c.slot, c.fence,
       c.expires_in, c.in_use::integer AS in_use, c.retry_in
FROM pglease.claim_slot(@scope, @holder, @capacity, @ttl) AS c;

-- name: SlotClaimMany :one
SELECT c.claimed::boolean AS claimed, c.slots::integer[] AS slots,
       c.fences::bigint[] AS fences, c.in_use::integer[] AS in_use,
       c.refused_scope, c.refused_in_use, c.expires_in, c.retry_in
FROM pglease.claim_slots(@holder, @scopes::text[], @capacities::integer[], @ttl) AS c;

-- name: SlotClaimUnits :one
SELECT c.claimed::boolean AS claimed, c.slot, c.fence,
       c.expires_in, c.in_use::integer AS in_use, c.retry_in
FROM pglease.claim_slot(@scope, @holder, @capacity, @ttl, @units::integer, @wait::boolean) AS c;

-- name: SlotClaimManyUnits :one
SELECT c.claimed::boolean AS claimed, c.slots::integer[] AS slots,
       c.fences::bigint[] AS fences, c.in_use::integer[] AS in_use,
       c.refused_scope, c.refused_in_use, c.expires_in, c.retry_in
FROM pglease.claim_slots(@holder, @scopes::text[], @capacities::integer[], @ttl, @units::integer[], @wait::boolean) AS c;

-- name: SlotRenew :one
SELECT r.renewed::boolean AS renewed, r.expires_in
FROM pglease.renew_slot(@scope, @slot, @holder, @fence, @ttl) AS r;

-- name: SlotRelease :one
SELECT r.released::boolean AS released
FROM pglease.release_slot(@scope, @slot, @holder, @fence) AS r;

-- name: SlotReleaseAsync :one
-- As LeaseReleaseAsync: a commit that does not wait for its WAL flush.
SELECT r.released::boolean AS released
FROM pglease.release_slot(@scope, @slot, @holder, @fence) AS r
CROSS JOIN LATERAL pg_catalog.set_config('synchronous_commit', 'off', true) AS s;

-- name: SlotStatusList :many
SELECT scope, slot, holder, fence, state, expires_at, expires_in::interval AS expires_in
FROM pglease.slot_status
ORDER BY scope, slot;

-- name: SlotScopeStatusList :many
SELECT scope, in_use, slots
FROM pglease.slot_scope_status
ORDER BY scope;
