-- The rows deleted on every partition, summed.
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(sum(n), 0)::bigint FROM pglease._all_history_delete(p_prefix, p_before) AS n;
$$;
