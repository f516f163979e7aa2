-- Every partition's figures, merged into what one database would return:
-- the per-name arrays of all partitions sorted by name (in the proxy
-- database's collation, which should be the partitions') and cut at
-- p_max_names, the names cut added to the partitions' own dropped
-- counts; totals, row counts, sizes and purged rows summed; the oldest
-- free ages the largest of any partition; version the oldest of any
-- partition (during an upgrade, what every partition offers). Each
-- partition reads its own snapshot on its own clock. Fails when any
-- partition fails (an exporter then reports pglease_up 0).
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r     record;
    v_cut integer;
BEGIN
    lease_names := '{}'; lease_held := '{}'; lease_expiry_seconds := '{}'; lease_fences := '{}';
    scope_names := '{}'; scope_in_use := '{}'; scope_capacities := '{}';
    leases_dropped := 0; scopes_dropped := 0;
    leases_held := 0; leases_expired := 0; leases_free := 0;
    slots_held := 0; slots_expired := 0; slots_free := 0;
    lease_waiters := 0; slot_waiters := 0;
    lease_oldest_free_seconds := 0; scope_oldest_free_seconds := 0;
    purged_rows := 0;
    FOR r IN SELECT * FROM pglease._all_metrics(p_names, p_max_names) LOOP
        IF version IS NULL
           OR string_to_array(r.version, '.')::integer[] < string_to_array(version, '.')::integer[] THEN
            version := r.version;
        END IF;
        lease_names := lease_names || r.lease_names;
        lease_held := lease_held || r.lease_held;
        lease_expiry_seconds := lease_expiry_seconds || r.lease_expiry_seconds;
        lease_fences := lease_fences || r.lease_fences;
        leases_dropped := leases_dropped + r.leases_dropped;
        scope_names := scope_names || r.scope_names;
        scope_in_use := scope_in_use || r.scope_in_use;
        scope_capacities := scope_capacities || r.scope_capacities;
        scopes_dropped := scopes_dropped + r.scopes_dropped;
        leases_held := leases_held + r.leases_held;
        leases_expired := leases_expired + r.leases_expired;
        leases_free := leases_free + r.leases_free;
        slots_held := slots_held + r.slots_held;
        slots_expired := slots_expired + r.slots_expired;
        slots_free := slots_free + r.slots_free;
        lease_waiters := lease_waiters + r.lease_waiters;
        slot_waiters := slot_waiters + r.slot_waiters;
        IF tables IS NULL THEN
            tables := r.tables; table_rows := r.table_rows; table_bytes := r.table_bytes;
        ELSE
            SELECT array_agg(t.n + u.n ORDER BY t.i), array_agg(t.b + u.b ORDER BY t.i)
            INTO table_rows, table_bytes
            FROM unnest(table_rows, table_bytes) WITH ORDINALITY AS t(n, b, i)
            JOIN unnest(r.table_rows, r.table_bytes) WITH ORDINALITY AS u(n, b, i) ON u.i = t.i;
        END IF;
        lease_oldest_free_seconds := greatest(lease_oldest_free_seconds, r.lease_oldest_free_seconds);
        scope_oldest_free_seconds := greatest(scope_oldest_free_seconds, r.scope_oldest_free_seconds);
        purged_rows := purged_rows + r.purged_rows;
    END LOOP;

    v_cut := greatest(cardinality(lease_names) - p_max_names, 0);
    IF v_cut > 0 OR cardinality(lease_names) > 1 THEN
        SELECT coalesce(array_agg(m.n ORDER BY m.n), '{}'),
               coalesce(array_agg(m.h ORDER BY m.n), '{}'),
               coalesce(array_agg(m.e ORDER BY m.n), '{}'),
               coalesce(array_agg(m.f ORDER BY m.n), '{}')
        INTO lease_names, lease_held, lease_expiry_seconds, lease_fences
        FROM (SELECT u.n, u.h, u.e, u.f
              FROM unnest(lease_names, lease_held, lease_expiry_seconds, lease_fences) AS u(n, h, e, f)
              ORDER BY u.n
              LIMIT p_max_names) AS m;
        leases_dropped := leases_dropped + v_cut;
    END IF;
    v_cut := greatest(cardinality(scope_names) - p_max_names, 0);
    IF v_cut > 0 OR cardinality(scope_names) > 1 THEN
        SELECT coalesce(array_agg(m.n ORDER BY m.n), '{}'),
               coalesce(array_agg(m.u ORDER BY m.n), '{}'),
               coalesce(array_agg(m.c ORDER BY m.n), '{}')
        INTO scope_names, scope_in_use, scope_capacities
        FROM (SELECT x.n, x.u, x.c
              FROM unnest(scope_names, scope_in_use, scope_capacities) AS x(n, u, c)
              ORDER BY x.n
              LIMIT p_max_names) AS m;
        scopes_dropped := scopes_dropped + v_cut;
    END IF;
END
$$;
