-- name: TenureList :many
-- The tenure history of a lease name or slot scope (0.4.0, #52). slot 0:
-- the lease's; ended false while open (ended_at then the grant).
SELECT coalesce(h.slot, 0)::integer AS slot, h.fence::bigint AS fence, h.holder::text AS holder,
       coalesce(h.holder_role, '')::text AS holder_role, coalesce(h.units, 0)::integer AS units,
       h.granted_at::timestamptz AS granted_at,
       (h.ended_at IS NOT NULL)::boolean AS ended,
       coalesce(h.ended_at, h.granted_at)::timestamptz AS ended_at,
       coalesce(h.ended_how, '')::text AS ended_how,
       coalesce(h.expires_at, h.ended_at, h.granted_at)::timestamptz AS expires_at
FROM pglease.tenures(@name, sqlc.narg(since)::timestamptz) AS h;

-- name: TenureEnds :many
SELECT e.ended_how::text AS ended_how, e.tenures::bigint AS tenures
FROM pglease.tenure_ends() AS e;

-- name: HistoryEnable :one
-- '0' stands for NULL: the prefix was off.
SELECT coalesce(extract(epoch FROM h.previous_keep), 0)::float8 AS previous_keep_seconds
FROM pglease.history_enable(@prefix, make_interval(secs => @keep_seconds::float8)) AS h;

-- name: HistoryDisable :one
SELECT coalesce(extract(epoch FROM h.previous_keep), 0)::float8 AS previous_keep_seconds
FROM pglease.history_disable(@prefix) AS h;

-- name: HistoryArchive :one
SELECT coalesce(h.previous, false)::boolean AS previous FROM pglease.history_archive(@archive::boolean) AS h;

-- name: HistoryDropBefore :one
SELECT pglease.history_drop_before(@before::timestamptz) AS months;
