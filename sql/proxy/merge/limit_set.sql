-- Set on every partition (a key's limit is read on the partition that
-- holds the key); true when it replaced a limit (on any partition).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT bool_or(r) FROM pglease._all_limit_set(p_target, p_rate, p_per, p_burst, p_exact) AS r;
$$;
