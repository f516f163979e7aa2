-- Each partition decides on its own whether a purge is due; the rows deleted
-- where one ran, summed, or NULL when none ran.
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT sum(n)::bigint FROM pglease._all_purge_due(p_every, p_free_for) AS n;
$$;
