-- The rows deleted on every partition, summed.
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(sum(n), 0)::bigint FROM pglease._all_purge(p_free_for) AS n;
$$;
