-- name: Purge :one
SELECT pglease.purge(@free_for)::bigint AS removed;

-- name: PurgeDue :one
-- removed is -1 when no purge was due.
SELECT coalesce(pglease.purge_due(@every, @free_for), -1)::bigint AS removed;

