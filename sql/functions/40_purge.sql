-- pglease.purge(p_free_for): delete what has been free for at least
-- p_free_for, so that tables stay bounded when names come and go (a lease
-- per order or job).
--
-- Deletes, and returns how many rows it deleted in all:
--   * lease rows released or expired at least p_free_for ago (expires_at is
--     the release or expiry time);
--   * the slot rows and the scope row of every scope whose slots have all
--     been free for at least p_free_for (a scope is purged whole, so slot
--     numbers stay dense from 1);
--   * waiter registrations past their until;
--   * run ledger rows (pglease.runs) that ended at least p_free_for ago,
--     and runs begun that long ago that never ended and whose tenure is
--     over; never a job's newest succeeded run (it keeps its window
--     closed) nor a run whose tenure is live.
--   * waiter registrations past their until (and, uncounted, observer and
--     candidate registrations past theirs).
-- Before any of them is gone, the fence floor (pglease.fence_floor) is
-- raised to the largest fence deleted, in the same transaction, and a name
-- or slot created afterwards starts at floor + 1: fences never go backwards,
-- also across purge, crash and failover (the floor is a logged row committed
-- with the deletes).
-- Takes only locks of rows that are free: rows locked by anyone (a takeover
-- in progress, a refused call, a fenced transaction, a claim holding the
-- scope) are skipped and left for the next purge, so no live holder's renew
-- ever waits for it. An acquire or claim of a name being purged waits until
-- the purge commits, then starts above the floor.
-- Raises 22004 for a NULL p_free_for and 22023 for a negative one; nothing is
-- deleted then.
CREATE OR REPLACE FUNCTION pglease.purge(p_free_for interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now        timestamptz := clock_timestamp();
    v_cutoff     timestamptz;
    v_leases     bigint;
    v_lease_max  bigint;
    v_slots      bigint := 0::bigint;
    v_slot_max   bigint := 0::bigint;
    v_n          bigint;
    v_max        bigint;
    v_waiters    bigint;
    v_runs       bigint;
    v_scope      text;
BEGIN
    IF p_free_for IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.purge: p_free_for must not be NULL',
            HINT = 'Pass how long a lease or slot must have been free to be deleted, e.g. interval ''1 day''.';
    END IF;
    IF extract(epoch FROM p_free_for) < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.purge: p_free_for must be 0 or more, got %s', p_free_for),
            HINT = 'Pass how long a lease or slot must have been free to be deleted, e.g. interval ''1 day''.';
    END IF;
    v_cutoff := v_now - make_interval(secs => extract(epoch FROM p_free_for));

    -- Leases: the row lock taken FOR UPDATE rechecks the condition against
    -- the newest committed version, so a row taken over after this
    -- statement's snapshot is left alone. The locked names are deleted by
    -- primary key (= ANY of an array: no join), so the cost stays linear
    -- whatever the statistics say; a join planned on the statistics left
    -- by the previous purge and VACUUM (an empty table) was a nested loop,
    -- quadratic in the rows deleted.
    WITH gone AS (
        DELETE FROM pglease.leases AS l
        WHERE l.name = ANY (ARRAY(SELECT d.name FROM pglease.leases AS d
                                  WHERE d.expires_at <= v_cutoff
                                  FOR UPDATE SKIP LOCKED))
          AND l.expires_at <= v_cutoff
        RETURNING l.fence
    )
    SELECT count(*), coalesce(max(g.fence), 0) INTO v_leases, v_lease_max FROM gone AS g;

    -- Slot scopes, one at a time: lock the scope as a claim does, then look
    -- again (a new statement sees every claim that committed before the
    -- lock), and delete the whole scope only when none of its slots was in
    -- use since the cutoff.
    FOR v_scope IN
        SELECT sc.scope FROM pglease.slot_scopes AS sc
        WHERE NOT EXISTS (SELECT 1 FROM pglease.slots AS s
                          WHERE s.scope = sc.scope AND s.expires_at > v_cutoff)
    LOOP
        PERFORM 1 FROM pglease.slot_scopes AS sc WHERE sc.scope = v_scope
        FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN EXISTS (SELECT 1 FROM pglease.slots AS s
                              WHERE s.scope = v_scope AND s.expires_at > v_cutoff);
        WITH gone AS (
            DELETE FROM pglease.slots AS s WHERE s.scope = v_scope RETURNING s.fence
        )
        SELECT count(*), coalesce(max(g.fence), 0) INTO v_n, v_max FROM gone AS g;
        DELETE FROM pglease.slot_scopes AS sc WHERE sc.scope = v_scope;
        v_slots := v_slots + v_n + 1;
        v_slot_max := greatest(v_slot_max, v_max);
    END LOOP;

    -- Waiters likewise, by kind and then name.
    WITH gone AS (
        DELETE FROM pglease.waiters AS w
        WHERE w.kind = 'lease'
          AND w.name = ANY (ARRAY(SELECT d.name FROM pglease.waiters AS d
                                  WHERE d.kind = 'lease' AND d.until < v_now
                                  FOR UPDATE SKIP LOCKED))
          AND w.until < v_now
        RETURNING 1
    ), gone_slots AS (
        DELETE FROM pglease.waiters AS w
        WHERE w.kind = 'slot'
          AND w.name = ANY (ARRAY(SELECT d.name FROM pglease.waiters AS d
                                  WHERE d.kind = 'slot' AND d.until < v_now
                                  FOR UPDATE SKIP LOCKED))
          AND w.until < v_now
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_slots) INTO v_waiters;

    -- The run ledger (0.3.0): runs that ended before the cutoff, and runs
    -- still 'running' that started before it whose tenure is not live (so
    -- never a run that can still record its end), except each job's newest
    -- succeeded run, which keeps its window closed however old it is. Rows
    -- locked by a run_end in flight are skipped.
    WITH gone AS (
        DELETE FROM pglease.runs AS r
        WHERE (r.name, r.fence) IN (
            SELECT d.name, d.fence FROM pglease.runs AS d
            WHERE (d.ended_at <= v_cutoff
                   OR (d.outcome IN ('running', 'lost') AND d.ended_at IS NULL AND d.started_at <= v_cutoff
                       AND NOT EXISTS (SELECT 1 FROM pglease.leases AS l
                                       WHERE l.name = d.name AND l.fence = d.fence
                                         AND l.holder IS NOT NULL AND l.expires_at > v_now)))
              AND NOT (d.outcome = 'succeeded'
                       AND d.ended_at = (SELECT max(s.ended_at) FROM pglease.runs AS s
                                         WHERE s.name = d.name AND s.outcome = 'succeeded'))
            FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*) INTO v_runs FROM gone;
    -- Lapsed observer and candidate registrations (0.3.0, see
    -- pglease.observe and pglease.acquire with p_value), not counted.
    DELETE FROM pglease.observers AS o
    WHERE o.name = ANY (ARRAY(SELECT d.name FROM pglease.observers AS d
                              WHERE d.until < v_now FOR UPDATE SKIP LOCKED))
      AND o.until < v_now;
    DELETE FROM pglease.candidates AS c
    WHERE (c.name, c.holder) IN (SELECT d.name, d.holder FROM pglease.candidates AS d
                                 WHERE d.until < v_now FOR UPDATE SKIP LOCKED)
      AND c.until < v_now;

    IF v_leases + v_slots > 0 THEN
        INSERT INTO pglease.fence_floor AS f (id, lease_fence, slot_fence, purged)
        VALUES (true, v_lease_max, v_slot_max, v_leases + v_slots)
        ON CONFLICT ON CONSTRAINT fence_floor_pkey DO UPDATE
        SET lease_fence = greatest(f.lease_fence, excluded.lease_fence),
            slot_fence  = greatest(f.slot_fence, excluded.slot_fence),
            purged      = f.purged + excluded.purged;
    END IF;
    RETURN v_leases + v_slots + v_waiters + v_runs;
END
$$;

-- pglease.purge_due(p_every, p_free_for): pglease.purge(p_free_for), at
-- most once per p_every across every caller of the database. Clients (the
-- Go supervisor, runslots.Run, pglease run) call it now and then; the
-- first caller after p_every has passed purges, the others return at once.
-- Returns the rows deleted, or NULL when no purge was due or another purge
-- is running. Raises 22004 for NULL arguments and 22023 for a p_every not
-- more than 0 or a negative p_free_for; nothing is deleted then.
CREATE OR REPLACE FUNCTION pglease.purge_due(p_every interval, p_free_for interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
BEGIN
    IF p_every IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.purge_due: p_every must not be NULL',
            HINT = 'Pass how often to purge, e.g. interval ''1 hour''.';
    END IF;
    IF extract(epoch FROM p_every) <= 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.purge_due: p_every must be more than 0, got %s', p_every),
            HINT = 'Pass how often to purge, e.g. interval ''1 hour''.';
    END IF;
    IF p_free_for IS NULL OR extract(epoch FROM p_free_for) < 0 THEN
        RETURN pglease.purge(p_free_for); -- raises the precise error
    END IF;

    INSERT INTO pglease.fence_floor AS f (id) VALUES (true)
    ON CONFLICT ON CONSTRAINT fence_floor_pkey DO NOTHING;
    PERFORM 1 FROM pglease.fence_floor AS f
    WHERE f.last_purge IS NULL
       OR f.last_purge <= v_now - make_interval(secs => extract(epoch FROM p_every))
    FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    UPDATE pglease.fence_floor AS f SET last_purge = v_now;
    RETURN pglease.purge(p_free_for);
END
$$;
