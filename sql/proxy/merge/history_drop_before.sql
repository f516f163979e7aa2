-- The months dropped on every partition, summed.
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(sum(n), 0)::integer FROM pglease._all_history_drop_before(p_before) AS n;
$$;
