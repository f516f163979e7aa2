-- The elements split by partition (pglease._route of each name, as the
-- single acquire routes it), one pglease._one_acquire_batch call per
-- partition that owns some, in partition order, and the results put back
-- in input order. Each partition commits its own elements: a batch through
-- the proxy is committed per partition, not as a whole. When a partition
-- fails, the call raises, and the elements of the partitions called before
-- it may have been granted: as after a lost reply, acquire them again
-- (the holder's own re-acquire gets the same tenures). A call whose arrays
-- are NULL or of different lengths goes whole to one partition, which
-- raises the contract's error.
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count integer;
    v_part  integer;
    v_idx   integer[];
    v_names text[];
    v_ttls  interval[];
    v_vals  text[];
    v_n     integer;
    r       record;
BEGIN
    v_count := pglease._partition_count();
    IF v_count = 0 OR p_names IS NULL OR p_ttls IS NULL OR p_holder IS NULL
       OR cardinality(p_names) <> cardinality(p_ttls)
       OR (p_values IS NOT NULL AND cardinality(p_values) <> cardinality(p_names)) THEN
        SELECT * INTO acquired, fences, holders, expires_at, expires_in, lease_values, fresh, sqlstates
        FROM pglease._one_acquire_batch(p_names, p_holder, p_ttls, p_values);
        RETURN;
    END IF;
    v_n := cardinality(p_names);
    acquired := array_fill(false, ARRAY[v_n]);
    fences := array_fill(NULL::bigint, ARRAY[v_n]);
    holders := array_fill(NULL::text, ARRAY[v_n]);
    expires_at := array_fill(NULL::timestamptz, ARRAY[v_n]);
    expires_in := array_fill(NULL::interval, ARRAY[v_n]);
    lease_values := array_fill(NULL::text, ARRAY[v_n]);
    fresh := array_fill(false, ARRAY[v_n]);
    sqlstates := array_fill(NULL::text, ARRAY[v_n]);
    FOR v_part IN
        SELECT DISTINCT pglease._route(u.name) & (v_count - 1) FROM unnest(p_names) AS u(name) ORDER BY 1
    LOOP
        SELECT array_agg(u.i::integer ORDER BY u.i), array_agg(u.name ORDER BY u.i),
               array_agg(u.ttl ORDER BY u.i), array_agg(u.value ORDER BY u.i)
        INTO v_idx, v_names, v_ttls, v_vals
        FROM unnest(p_names, p_ttls, p_values) WITH ORDINALITY AS u(name, ttl, value, i)
        WHERE (pglease._route(u.name) & (v_count - 1)) = v_part;
        SELECT * INTO r FROM pglease._one_acquire_batch(v_names, p_holder, v_ttls,
            CASE WHEN p_values IS NULL THEN NULL ELSE v_vals END);
        FOR j IN 1..cardinality(v_idx) LOOP
            acquired[v_idx[j]] := r.acquired[j];
            fences[v_idx[j]] := r.fences[j];
            holders[v_idx[j]] := r.holders[j];
            expires_at[v_idx[j]] := r.expires_at[j];
            expires_in[v_idx[j]] := r.expires_in[j];
            lease_values[v_idx[j]] := r.lease_values[j];
            fresh[v_idx[j]] := r.fresh[j];
            sqlstates[v_idx[j]] := r.sqlstates[j];
        END LOOP;
    END LOOP;
END
$$;
