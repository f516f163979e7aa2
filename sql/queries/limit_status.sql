-- The levels of the configured rate limits (pgleaseadmin.Limits, pglease
-- status, pglease exporter).

-- name: LimitStatusList :many
SELECT s.target::text AS target, s.exact::boolean AS exact, s.rate::integer AS rate,
       s.per::interval AS per, s.burst::integer AS burst, coalesce(s.owner_role, '')::text AS owner_role,
       s.buckets::bigint AS buckets, s.limited::bigint AS limited,
       s.min_remaining::integer AS min_remaining, s.reserved::bigint AS reserved,
       s.limits::bigint AS limits, s.read_at::timestamptz AS read_at
FROM pglease.limit_status(sqlc.arg(max_limits)::integer) AS s;
