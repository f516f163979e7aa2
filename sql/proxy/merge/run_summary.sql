-- Every partition's jobs (each job lives on the partition of its lease
-- name), merged into what one database would return: sorted by name and
-- cut at p_max_names, the names cut added to the partitions' own dropped
-- counts. Fails when any partition fails.
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r     record;
    v_cut integer;
BEGIN
    job_names := '{}'; last_started := '{}'; last_ended := '{}'; last_holders := '{}';
    last_outcomes := '{}'; last_exit_statuses := '{}'; last_success := '{}'; last_windows := '{}'; jobs_dropped := 0;
    FOR r IN SELECT * FROM pglease._all_run_summary(p_names, p_max_names) LOOP
        job_names := job_names || r.job_names;
        last_started := last_started || r.last_started;
        last_ended := last_ended || r.last_ended;
        last_holders := last_holders || r.last_holders;
        last_outcomes := last_outcomes || r.last_outcomes;
        last_exit_statuses := last_exit_statuses || r.last_exit_statuses;
        last_success := last_success || r.last_success;
        last_windows := last_windows || r.last_windows;
        jobs_dropped := jobs_dropped + r.jobs_dropped;
    END LOOP;
    v_cut := greatest(cardinality(job_names) - p_max_names, 0);
    SELECT coalesce(array_agg(m.n ORDER BY m.n), '{}'), coalesce(array_agg(m.s ORDER BY m.n), '{}'),
           coalesce(array_agg(m.e ORDER BY m.n), '{}'), coalesce(array_agg(m.h ORDER BY m.n), '{}'),
           coalesce(array_agg(m.o ORDER BY m.n), '{}'), coalesce(array_agg(m.x ORDER BY m.n), '{}'),
           coalesce(array_agg(m.l ORDER BY m.n), '{}'), coalesce(array_agg(m.w ORDER BY m.n), '{}')
    INTO job_names, last_started, last_ended, last_holders, last_outcomes, last_exit_statuses, last_success, last_windows
    FROM (SELECT u.n, u.s, u.e, u.h, u.o, u.x, u.l, u.w
          FROM unnest(job_names, last_started, last_ended, last_holders, last_outcomes,
                      last_exit_statuses, last_success, last_windows) AS u(n, s, e, h, o, x, l, w)
          ORDER BY u.n
          LIMIT p_max_names) AS m;
    jobs_dropped := jobs_dropped + v_cut;
END
$$;
