-- The cron functions (0.3.0): hold a tenure at least a given time after
-- its grant, and a run ledger that lets a fleet run a job at most once
-- per window (docs/cron.md). Every time is the server's clock, read after
-- the call's lock waits; every write is bound to the tenure (holder,
-- fence, and the database role that took it: session_user), as in
-- pglease.release and pglease.assert_held.

-- pglease.release_after(p_name, p_holder, p_fence, p_hold_at_least): end a
-- live tenure, but not before p_hold_at_least after it was granted.
--
-- When p_holder holds the lease with fence p_fence, took it as the
-- caller's role, and it has not expired (as pglease.release decides it,
-- on the clock read after waiting for the row lock: now):
--   * granted at least p_hold_at_least ago (acquired_at + p_hold_at_least
--     <= now): exactly pglease.release: the lease is free at once, its
--     value cleared, waiters and observers notified; held_until = now;
--   * else the tenure stays held, with the same holder and fence, until
--     held_until = acquired_at + p_hold_at_least (its expires_at is set to
--     that, earlier or later than it was): nobody else can acquire the
--     lease before then, and it frees by expiry then, so the next tenure
--     gets fence + 1 as always.
-- released = true in both cases. Otherwise released = false, held_until
-- is NULL and nothing changes (the tenure had ended, or is not the
-- caller's). While held this way the tenure is still the holder's (a
-- renew or a plain release by it works on it as on any live tenure).
-- acquired_at is the grant of this tenure (a same-holder re-acquire keeps
-- it), so a hold is counted from the grant on the server's clock,
-- whatever the hosts' clocks say.
-- Raises 22004 for a NULL argument; 22023 for a bad name, holder or a
-- negative fence, or a p_hold_at_least not in (0, 24 hours]; nothing is
-- changed then.
CREATE OR REPLACE FUNCTION pglease.release_after(
    p_name text, p_holder text, p_fence bigint, p_hold_at_least interval,
    OUT released boolean, OUT held_until timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role     text := session_user::text;
    v_hold     interval;
    v_now      timestamptz;
    v_acquired timestamptz;
BEGIN
    PERFORM pglease._check_tenure('release_after', p_name, p_holder, p_fence);
    v_hold := pglease._check_span('release_after', 'p_hold_at_least', p_hold_at_least, interval '24 hours');

    released := false;
    SELECT l.acquired_at INTO v_acquired FROM pglease.leases AS l
    WHERE l.name = p_name -- the tenure, live or not
      AND pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                               p_holder, v_role, p_fence, '-infinity')
    FOR UPDATE;
    v_now := clock_timestamp();
    IF NOT FOUND THEN
        RETURN; -- not the caller's tenure
    END IF;
    IF v_acquired + v_hold > v_now THEN
        UPDATE pglease.leases AS l
        SET expires_at = v_acquired + v_hold
        WHERE l.name = p_name AND l.expires_at > v_now;
        IF FOUND THEN
            released := true;
            held_until := v_acquired + v_hold;
        END IF;
        RETURN;
    END IF;
    UPDATE pglease.leases AS l
    SET holder = NULL, expires_at = v_now, value = NULL
    WHERE l.name = p_name AND l.expires_at > v_now;
    IF FOUND THEN
        released := true;
        held_until := v_now;
        PERFORM pglease._wake('lease', p_name, false);
        PERFORM pglease._observed_wake(p_name);
    END IF;
END
$$;

-- pglease._run_tenure(p_func, p_name, p_holder, p_fence): the checks of
-- run_begin and run_end. Locks the lease row FOR SHARE when it is the
-- caller's tenure (a takeover waits for the caller's commit, as with
-- pglease.assert_held; nothing is locked otherwise) and returns the
-- server clock read after the lock, or NULL when p_fence is not the live
-- tenure of p_holder of the caller's role. Raises 42501 when the lease's
-- current tenure with that fence was taken by another role. Internal.
CREATE OR REPLACE FUNCTION pglease._run_tenure(p_func text, p_name text, p_holder text, p_fence bigint)
RETURNS timestamptz
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_fence   bigint;
    v_expires timestamptz;
    v_hrole   text;
    v_now     timestamptz;
BEGIN
    SELECT l.holder_role, l.fence INTO v_hrole, v_fence FROM pglease.leases AS l WHERE l.name = p_name;
    IF v_fence = p_fence AND v_hrole <> session_user THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('pglease.%s: the tenure of lease %L with fence %s was taken by another role than %I',
                             p_func, p_name, p_fence, session_user),
            HINT = 'Record runs from the database role that acquired the lease.';
    END IF;
    -- Only the caller's own tenure is locked: a row another holder or role
    -- holds does not match, so a stranger's call (refused, then left open
    -- in its transaction) holds no lock anyone waits for.
    SELECT l.expires_at INTO v_expires
    FROM pglease.leases AS l
    WHERE l.name = p_name AND l.holder = p_holder AND l.fence = p_fence
      AND coalesce(l.holder_role = session_user, true)
    FOR SHARE;
    v_now := clock_timestamp();
    IF FOUND AND v_expires > v_now THEN
        -- Known as a fenced transaction (see pglease.assert_held).
        PERFORM pg_catalog.pg_try_advisory_xact_lock_shared(pglease._fenced_key(p_name, p_fence));
        RETURN v_now;
    END IF;
    RETURN NULL;
END
$$;

-- pglease.run_begin(p_name, p_holder, p_fence, p_window): start a run of
-- job p_name under the live tenure (p_holder, p_fence) of lease p_name,
-- unless its window has already had a successful run.
--
-- The window rule, on the server's clock read after the lease row lock
-- (now): windows are the multiples of p_window since the Unix epoch
-- (1970-01-01 00:00 UTC), and a run belongs to the window whose start is
-- nearest to now: window_start = round(now / p_window) * p_window. So a
-- cron tick at a window boundary T counts for window T when the run
-- starts anywhere in [T - p_window/2, T + p_window/2): hosts whose clocks
-- (and cron start delays) are within p_window/2 of the server's, early or
-- late, all land in the same window (docs/cron.md).
-- Returns one row:
--   * the window has a succeeded run: run = false, and done_fence,
--     done_holder, done_at (its end) describe it; nothing is written;
--   * else run = true: a ledger row (p_name, p_fence, window_start,
--     p_holder, the caller's role, started_at = now, outcome 'running')
--     is written, and any older tenure's run of p_name still 'running' is
--     marked 'lost' (its tenure has ended: it can never record success).
--     Called again under the same fence, it returns that row's window and
--     run = true while it is still running (one run per tenure).
-- Raises PGL01 when (p_holder, p_fence) is not the live tenure of lease
-- p_name of the caller's role; 42501 when that tenure was taken by another
-- role; 22004 for a NULL argument; 22023 for a bad name, holder, negative
-- fence or a p_window not in (0, 366 days]; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.run_begin(
    p_name text, p_holder text, p_fence bigint, p_window interval,
    OUT run boolean, OUT window_start timestamptz,
    OUT done_fence bigint, OUT done_holder text, OUT done_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_window  numeric;
    v_now     timestamptz;
    v_outcome text;
BEGIN
    PERFORM pglease._check_tenure('run_begin', p_name, p_holder, p_fence);
    v_window := extract(epoch FROM pglease._check_span('run_begin', 'p_window', p_window, interval '366 days'));

    v_now := pglease._run_tenure('run_begin', p_name, p_holder, p_fence);
    IF v_now IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL01',
            MESSAGE = format('pglease.run_begin: lease %L is not held with fence %s by %L', p_name, p_fence, p_holder),
            HINT = 'Your tenure is over; acquire the lease again.';
    END IF;

    -- A retry under the same tenure.
    SELECT r.window_start, r.outcome INTO window_start, v_outcome
    FROM pglease.runs AS r WHERE r.name = p_name AND r.fence = p_fence;
    IF FOUND THEN
        run := v_outcome = 'running';
        RETURN;
    END IF;

    window_start := to_timestamp((round(extract(epoch FROM v_now) / v_window) * v_window)::double precision);
    SELECT r.fence, r.holder, r.ended_at INTO done_fence, done_holder, done_at
    FROM pglease.runs AS r
    WHERE r.name = p_name AND r.window_start = run_begin.window_start AND r.outcome = 'succeeded';
    IF FOUND THEN
        run := false;
        RETURN;
    END IF;

    UPDATE pglease.runs AS r SET outcome = 'lost'
    WHERE r.name = p_name AND r.outcome = 'running' AND r.fence < p_fence;
    PERFORM pglease._check_quota('run_begin', 'runs');
    INSERT INTO pglease.runs (name, fence, window_start, run_window, holder, holder_role, started_at)
    VALUES (p_name, p_fence, window_start, make_interval(secs => v_window), p_holder, session_user, v_now);
    run := true;
END
$$;

-- pglease.run_end(p_name, p_holder, p_fence, p_exit_status): record the
-- end of the run pglease.run_begin started under tenure p_fence.
--
-- Fenced: the outcome counts only while the tenure is current. With the
-- lease row locked FOR SHARE (a takeover waits for this call's commit)
-- and the server clock read after the lock:
--   * (p_holder, p_fence) is the live tenure of the caller's role: the run
--     ends 'succeeded' (p_exit_status = 0) or 'failed' (any other),
--     recorded = true. A failed run leaves its window open;
--   * the tenure has ended (expired, released, taken over): the run ends
--     'lost', recorded = false: it cannot close its window;
--   * the run had already ended (a retry): nothing changes; recorded says
--     whether it was recorded then;
--   * no run began under p_fence (or it was purged): recorded = false,
--     outcome NULL, nothing changes.
-- ended_at is the clock reading, exit_status p_exit_status; outcome is the
-- run's outcome after the call.
-- Raises 42501 when the run (or the tenure) was begun by another role,
-- and 22004 for a NULL argument; 22023 for a bad name, holder, negative
-- fence or p_exit_status not in [0, 255]; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.run_end(
    p_name text, p_holder text, p_fence bigint, p_exit_status integer,
    OUT recorded boolean, OUT outcome text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role   text;
    v_holder text;
    v_now    timestamptz;
BEGIN
    PERFORM pglease._check_tenure('run_end', p_name, p_holder, p_fence);
    PERFORM pglease._check_int('run_end', 'p_exit_status', p_exit_status, 0, 255);

    recorded := false;
    SELECT r.holder_role, r.holder, r.outcome INTO v_role, v_holder, outcome
    FROM pglease.runs AS r WHERE r.name = p_name AND r.fence = p_fence;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF v_role <> session_user THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('pglease.run_end: the run of %L under fence %s was begun by another role than %I',
                             p_name, p_fence, session_user),
            HINT = 'Record runs from the database role that acquired the lease.';
    END IF;
    IF v_holder <> p_holder THEN
        RETURN;
    END IF;
    IF outcome <> 'running' THEN
        recorded := outcome IN ('succeeded', 'failed');
        RETURN;
    END IF;

    v_now := pglease._run_tenure('run_end', p_name, p_holder, p_fence);
    UPDATE pglease.runs AS r
    SET outcome = CASE WHEN v_now IS NULL THEN 'lost'
                       WHEN p_exit_status = 0 THEN 'succeeded' ELSE 'failed' END,
        ended_at = coalesce(v_now, clock_timestamp()),
        exit_status = p_exit_status
    WHERE r.name = p_name AND r.fence = p_fence AND r.outcome = 'running'
    RETURNING r.outcome INTO outcome;
    recorded := FOUND AND outcome <> 'lost';
    IF NOT FOUND THEN
        -- Ended meanwhile by a later tenure's run_begin, or purged.
        SELECT r.outcome INTO outcome FROM pglease.runs AS r WHERE r.name = p_name AND r.fence = p_fence;
    END IF;
END
$$;

-- pglease._run_outcome(p_name, p_fence, p_outcome): a run's outcome as
-- read now: 'lost' for a run still 'running' whose tenure is no longer
-- live (its pglease died; the next run_begin will mark it so), else
-- p_outcome. Internal.
CREATE OR REPLACE FUNCTION pglease._run_outcome(p_name text, p_fence bigint, p_outcome text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_outcome = 'running' AND NOT EXISTS (
                    SELECT 1 FROM pglease.leases AS l
                    WHERE l.name = p_name AND l.fence = p_fence AND l.holder IS NOT NULL
                      AND l.expires_at > pg_catalog.clock_timestamp())
                THEN 'lost' ELSE p_outcome END;
$$;

-- pglease.run_history(p_name, p_limit): the ledger of job p_name, newest
-- first (by started_at), at most p_limit rows: every run still kept (see
-- pglease.purge). A run still 'running' whose tenure is over reads as
-- 'lost'. Readable by any client role; reads only.
-- Raises 22004 for a NULL argument, 22023 for a bad name or a p_limit not
-- in [1, 10000].
CREATE OR REPLACE FUNCTION pglease.run_history(
    p_name text, p_limit integer,
    OUT fence bigint, OUT window_start timestamptz, OUT holder text,
    OUT started_at timestamptz, OUT ended_at timestamptz,
    OUT exit_status integer, OUT outcome text)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('run_history', 'p_name', p_name);
    PERFORM pglease._check_int('run_history', 'p_limit', p_limit, 1, 10000);
    RETURN QUERY
    SELECT r.fence, r.window_start, r.holder, r.started_at, r.ended_at, r.exit_status,
           pglease._run_outcome(r.name, r.fence, r.outcome)
    FROM pglease.runs AS r
    WHERE r.name = p_name
    ORDER BY r.started_at DESC, r.fence DESC
    LIMIT p_limit;
END
$$;

-- pglease.run_summary(p_names, p_max_names): the last run and the last
-- success of every job in the ledger whose name matches p_names (a POSIX
-- regular expression, as in pglease.metrics), the first p_max_names of
-- them by name. Returns one row of arrays aligned by index, sorted by
-- name, empty when there is none:
--   * job_names;
--   * last_started, last_ended: the newest run's started_at and ended_at
--     as seconds since the Unix epoch (ended 0 while it runs or when it
--     was lost without an end);
--   * last_holders, last_outcomes (as run_history reads them),
--     last_exit_statuses (-1 when none);
--   * last_success: the ended_at of the newest succeeded run, as seconds
--     since the epoch, 0 when none is kept;
--   * last_windows: the newest run's window length (run_begin's
--     p_window), in seconds;
-- and jobs_dropped, the jobs beyond p_max_names. Reads only.
-- Raises 22004 for a NULL argument, 22023 for p_names longer than 1,024
-- bytes or not a valid regular expression, or p_max_names not in
-- [0, 1000000].
CREATE OR REPLACE FUNCTION pglease.run_summary(
    p_names text, p_max_names integer,
    OUT job_names text[], OUT last_started double precision[], OUT last_ended double precision[],
    OUT last_holders text[], OUT last_outcomes text[], OUT last_exit_statuses integer[],
    OUT last_success double precision[], OUT last_windows double precision[],
    OUT jobs_dropped bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_names('run_summary', p_names);
    PERFORM pglease._check_int('run_summary', 'p_max_names', p_max_names, 0, 1000000);

    WITH jobs AS (
        SELECT DISTINCT r.name FROM pglease.runs AS r WHERE r.name ~ p_names
    ), kept AS (
        SELECT j.name FROM jobs AS j ORDER BY j.name LIMIT p_max_names
    ), rows AS (
        SELECT k.name, last.started_at, last.ended_at, last.holder,
               pglease._run_outcome(k.name, last.fence, last.outcome) AS outcome, last.exit_status, last.run_window,
               (SELECT max(s.ended_at) FROM pglease.runs AS s
                WHERE s.name = k.name AND s.outcome = 'succeeded') AS success
        FROM kept AS k
        CROSS JOIN LATERAL (SELECT r.fence, r.started_at, r.ended_at, r.holder, r.outcome, r.exit_status, r.run_window
                            FROM pglease.runs AS r WHERE r.name = k.name
                            ORDER BY r.started_at DESC, r.fence DESC LIMIT 1) AS last
    )
    SELECT coalesce(array_agg(x.name ORDER BY x.name), '{}'),
           coalesce(array_agg(extract(epoch FROM x.started_at)::double precision ORDER BY x.name), '{}'),
           coalesce(array_agg(coalesce(extract(epoch FROM x.ended_at)::double precision, 0) ORDER BY x.name), '{}'),
           coalesce(array_agg(x.holder ORDER BY x.name), '{}'),
           coalesce(array_agg(x.outcome ORDER BY x.name), '{}'),
           coalesce(array_agg(coalesce(x.exit_status, -1) ORDER BY x.name), '{}'),
           coalesce(array_agg(coalesce(extract(epoch FROM x.success)::double precision, 0) ORDER BY x.name), '{}'),
           coalesce(array_agg(extract(epoch FROM x.run_window)::double precision ORDER BY x.name), '{}')
    INTO job_names, last_started, last_ended, last_holders, last_outcomes, last_exit_statuses, last_success, last_windows
    FROM rows AS x;
    jobs_dropped := greatest((SELECT count(*) FROM (SELECT DISTINCT r.name FROM pglease.runs AS r WHERE r.name ~ p_names) AS d)
                             - p_max_names, 0);
END
$$;
