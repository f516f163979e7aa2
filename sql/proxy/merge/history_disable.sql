-- Turned off on every partition; the keep it had (on any partition).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT max(r) FROM pglease._all_history_disable(p_prefix) AS r;
$$;
