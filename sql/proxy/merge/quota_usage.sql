-- Every cap with the rows its role has on all partitions together (each
-- partition caps its own rows at max_rows).
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT u.role_name, u.kind, max(u.max_rows), sum(u.used)::bigint
    FROM pglease._all_quota_usage() AS u
    GROUP BY u.role_name, u.kind
    ORDER BY u.role_name, u.kind;
$$;
