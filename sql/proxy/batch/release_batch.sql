-- The elements split by partition, as for acquire_batch, one
-- pglease._one_release_batch call per partition that owns some, and the
-- results put back in input order. Each partition commits its own
-- elements; when a partition fails, the call raises and the elements of
-- the partitions called before it may have been released (a release is
-- idempotent: releasing them again returns false). A call whose arrays are
-- NULL or of different lengths goes whole to one partition, which raises
-- the contract's error.
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_count  integer;
    v_part   integer;
    v_idx    integer[];
    v_names  text[];
    v_fences bigint[];
    v_n      integer;
    r        record;
BEGIN
    v_count := pglease._partition_count();
    IF v_count = 0 OR p_names IS NULL OR p_fences IS NULL OR p_holder IS NULL
       OR cardinality(p_names) <> cardinality(p_fences) THEN
        SELECT * INTO released, sqlstates
        FROM pglease._one_release_batch(p_names, p_holder, p_fences);
        RETURN;
    END IF;
    v_n := cardinality(p_names);
    released := array_fill(false, ARRAY[v_n]);
    sqlstates := array_fill(NULL::text, ARRAY[v_n]);
    FOR v_part IN
        SELECT DISTINCT pglease._route(u.name) & (v_count - 1) FROM unnest(p_names) AS u(name) ORDER BY 1
    LOOP
        SELECT array_agg(u.i::integer ORDER BY u.i), array_agg(u.name ORDER BY u.i),
               array_agg(u.fence ORDER BY u.i)
        INTO v_idx, v_names, v_fences
        FROM unnest(p_names, p_fences) WITH ORDINALITY AS u(name, fence, i)
        WHERE (pglease._route(u.name) & (v_count - 1)) = v_part;
        SELECT * INTO r FROM pglease._one_release_batch(v_names, p_holder, v_fences);
        FOR j IN 1..cardinality(v_idx) LOOP
            released[v_idx[j]] := r.released[j];
            sqlstates[v_idx[j]] := r.sqlstates[j];
        END LOOP;
    END LOOP;
END
$$;
