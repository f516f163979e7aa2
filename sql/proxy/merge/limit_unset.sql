-- Removed on every partition; true when there was one (on any partition).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT bool_or(r) FROM pglease._all_limit_unset(p_target) AS r;
$$;
