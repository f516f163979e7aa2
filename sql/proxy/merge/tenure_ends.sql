-- The ends of every partition, summed by how.
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT e.ended_how, sum(e.tenures)::bigint
    FROM pglease._all_tenure_ends() AS e
    GROUP BY e.ended_how
    ORDER BY min(array_position(ARRAY['released', 'handed_over', 'forced', 'expired', 'taken_over',
                                      'purged'], e.ended_how));
$$;
