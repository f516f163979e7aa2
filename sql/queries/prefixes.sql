-- name: PrefixBind :one
-- Names a role owns (0.3.0, docs/security.md#names-a-role-owns). In these
-- queries '' stands for NULL, no role: a role name is never empty.
SELECT coalesce(b.previous_role, '')::text AS previous_role
FROM pglease.prefix_bind(@prefix, @role) AS b;

-- name: PrefixUnbind :one
SELECT coalesce(u.previous_role, '')::text AS previous_role
FROM pglease.prefix_unbind(@prefix) AS u;

-- name: PrefixList :many
-- The table itself: the schema owner's alone (clients ask owner_of).
SELECT p.prefix, p.owner_role, p.bound_at
FROM pglease.prefixes AS p
ORDER BY p.prefix;

-- name: NameOwner :one
SELECT coalesce(pglease.owner_of(@name), '')::text AS owner_role;
