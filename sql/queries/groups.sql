-- name: GroupCreate :one
SELECT c.created::boolean AS created, c.shards::integer AS shards
FROM pglease.group_create(@group_name::text, sqlc.narg(shard_count)::integer, sqlc.narg(shard_names)::text[]) AS c;

-- name: GroupSync :one
SELECT s.shards::text[] AS shards, s.fences::bigint[] AS fences, s.release::text[] AS release,
       s.members::integer AS members, s.share_min::integer AS share_min,
       s.share_max::integer AS share_max, s.unowned::integer AS unowned,
       s.expires_in::interval AS expires_in
FROM pglease.group_sync(@group_name::text, @member::text, @ttl::interval, sqlc.narg(max_shards)::integer) AS s;

-- name: GroupRelease :one
SELECT r.released::boolean AS released
FROM pglease.group_release(@group_name::text, @shard::text, @member::text, @fence::bigint) AS r;

-- name: GroupLeave :one
SELECT l.left_group::boolean AS left_group
FROM pglease.group_leave(@group_name::text, @member::text) AS l;

-- name: GroupStatus :many
-- The unowned row has member '' (NULL), max_shards 0 and expires_at the epoch.
SELECT coalesce(s.member, '')::text AS member, coalesce(s.max_shards, 0)::integer AS max_shards,
       s.shards::integer AS shards, s.handing_over::integer AS handing_over,
       coalesce(s.expires_at, 'epoch')::timestamptz AS expires_at
FROM pglease.group_status(@group_name::text) AS s;

-- name: GroupList :one
SELECT l.names::text[] AS names, l.group_roles::text[] AS group_roles,
       l.shards::integer[] AS shards, l.members::integer[] AS members
FROM pglease.group_list() AS l;
