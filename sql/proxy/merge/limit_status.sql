-- Every partition's levels merged into what one database would return:
-- limits are set on every partition alike, so a target's buckets,
-- limited buckets and reservations are summed, its fewest tokens left is
-- the fewest of any partition, limits the most any partition has, and
-- read_at the earliest partition's clock reading. Cut at p_max by target.
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT s.target, bool_and(s.exact), max(s.rate), max(s.per), max(s.burst), max(s.owner_role),
           sum(s.buckets)::bigint, sum(s.limited)::bigint, min(s.min_remaining),
           sum(s.reserved)::bigint, max(s.limits), min(s.read_at)
    FROM pglease._all_limit_status(p_max) AS s
    GROUP BY s.target
    ORDER BY s.target
    LIMIT p_max;
$$;
