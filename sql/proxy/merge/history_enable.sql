-- Turned on on every partition; the keep it had before (the same on each,
-- unless a partition was changed by hand).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT max(r) FROM pglease._all_history_enable(p_prefix, p_keep) AS r;
$$;
