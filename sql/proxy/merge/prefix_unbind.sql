-- Unbound on every partition; the role it was bound to (the same on each,
-- unless a partition was bound by hand).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT min(r) FROM pglease._all_prefix_unbind(p_prefix) AS r;
$$;
