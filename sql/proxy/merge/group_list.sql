-- Every partition's groups in one list, by name (a group lives on the
-- partition of its name, so no name repeats).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(g.name ORDER BY g.name), '{}'),
           coalesce(array_agg(g.group_role ORDER BY g.name), '{}'),
           coalesce(array_agg(g.shards ORDER BY g.name), '{}'),
           coalesce(array_agg(g.members ORDER BY g.name), '{}')
    FROM pglease._all_group_list() AS a,
         unnest(a.names, a.group_roles, a.shards, a.members) AS g(name, group_role, shards, members);
$$;
