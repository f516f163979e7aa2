-- Set on every partition; the setting it had (on any partition).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT bool_or(r) FROM pglease._all_history_archive(p_on) AS r;
$$;
