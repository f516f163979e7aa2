-- Set on every partition, each of which enforces it on the rows it holds;
-- the previous cap (the same on each, unless a partition was set by hand).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT max(p) FROM pglease._all_quota_set(p_role, p_kind, p_max) AS p;
$$;
