-- pglease.purge(p_free_for): delete what has been free for at least
-- p_free_for, so that tables stay bounded when names come and go (a lease
-- per order or job).
--
-- Deletes, and returns how many rows it deleted in all:
--   * lease rows released or expired at least p_free_for ago (expires_at is
--     the release or expiry time), except a row reserved for a preferred
--     holder (pglease.request_release) until its reservation ends;
--   * the slot rows and the scope row of every scope whose slots have all
--     been free for at least p_free_for (a scope is purged whole, so slot
--     numbers stay dense from 1);
--   * run ledger rows (pglease.runs) that ended at least p_free_for ago,
--     and runs begun that long ago that never ended and whose tenure is
--     over; never a success whose window has not ended, nor a job's newest
--     succeeded run, nor a run whose tenure is live;
--   * shard groups (pglease.group_create) nobody has taken part in since
--     p_free_for ago and whose shard leases are all gone (purged by an
--     earlier purge), with their shard lists and member rows;
--   * rate-limit key states full since p_free_for ago and holding no
--     reservation (0.4.0: deleting one changes no decision), and
--     reservations expired by now, whose amounts it gives back to their
--     buckets as their next take would (see pglease._limit_purge);
--   * tenure history rows (0.4.0, pglease.tenures) whose tenures ended
--     longer ago than the keep of the history prefixes covering them
--     (see pglease._history_purge), whatever p_free_for;
--   * waiter registrations past their until (and, uncounted, lapsed
--     observer, candidate and slot queue registrations).
-- Whose rows: the schema owner, a superuser and members of
-- pglease_operator purge every role's rows; any other caller purges only
-- the rows its own role (session_user) left: leases and runs whose last
-- holder was of its role, scopes all of whose slots were, its groups, and
-- its own registrations. So a client that keeps its purge open in a transaction
-- holds up only names its own role last held, which it could keep by
-- renewing anyway (docs/security.md).
-- Before any of them is gone, the fence floors (pglease.lease_fence_floor,
-- pglease.slot_fence_floor) are raised to the largest fence deleted, and a
-- name or slot created afterwards starts at floor + 1: fences never go
-- backwards, also across purge, crash, failover and at any isolation
-- level (the floors are sequences, which every caller reads as they stand).
-- Takes only locks of rows that are free: rows locked by anyone (a takeover
-- in progress, a refused call, a fenced transaction, a claim holding the
-- scope, another purge) are skipped and left for the next purge, so it
-- waits for nobody, and no live holder's renew ever waits for it. An
-- acquire or claim of a name being purged waits until the purge commits,
-- then starts above the floor.
-- Raises 22004 for a NULL p_free_for and 22023 for a negative one or one
-- of more than 100 years; nothing is deleted then.
CREATE OR REPLACE FUNCTION pglease.purge(p_free_for interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now        timestamptz := clock_timestamp();
    v_role       text := session_user::text;
    v_all        boolean := pglease._trusted();
    v_cutoff     timestamptz;
    v_leases     bigint;
    v_lease_max  bigint;
    v_slots      bigint := 0::bigint;
    v_slot_max   bigint := 0::bigint;
    v_n          bigint;
    v_max        bigint;
    v_waiters    bigint;
    v_runs       bigint;
    v_groups     bigint;
    v_limits     bigint;
    v_scope      text;
    v_scopes     text[];
BEGIN
    v_cutoff := v_now - pglease._check_age('purge', 'p_free_for', p_free_for);

    -- Shard groups nobody takes part in any more: created before the
    -- cutoff, no member live since it, and no shard lease left (a group
    -- goes after its shard leases: the purge after the one that deleted
    -- the last of them). Groups locked by a sync in flight are skipped.
    WITH gone AS (
        DELETE FROM pglease.groups AS g
        WHERE g.name = ANY (ARRAY(
                SELECT d.name FROM pglease.groups AS d
                WHERE d.created_at <= v_cutoff AND (v_all OR d.group_role = v_role)
                  AND NOT EXISTS (SELECT 1 FROM pglease.group_members AS m
                                  WHERE m.group_name = d.name AND m.expires_at > v_cutoff)
                  AND NOT EXISTS (SELECT 1 FROM pglease.group_shards AS s
                                  JOIN pglease.leases AS l ON l.name = '{' || d.name || '}/' || s.shard
                                  WHERE s.group_name = d.name)
                FOR UPDATE SKIP LOCKED))
        RETURNING 1
    )
    SELECT count(*) INTO v_groups FROM gone;

    -- Leases: the row lock taken FOR UPDATE rechecks the condition against
    -- the newest committed version, so a row taken over after this
    -- statement's snapshot is left alone. The locked names are deleted by
    -- primary key (= ANY of an array: no join), so the cost stays linear
    -- whatever the statistics say.
    WITH gone AS (
        DELETE FROM pglease.leases AS l
        WHERE l.name = ANY (ARRAY(SELECT d.name FROM pglease.leases AS d
                                  WHERE d.expires_at <= v_cutoff
                                    AND (v_all OR d.holder_role = v_role)
                                    AND NOT pglease._reserved(d.expires_at, d.release_to,
                                            d.release_to_role, d.release_for, NULL, NULL, v_now)
                                  FOR UPDATE SKIP LOCKED))
          AND l.expires_at <= v_cutoff
          AND NOT pglease._reserved(l.expires_at, l.release_to, l.release_to_role,
                                    l.release_for, NULL, NULL, v_now)
        RETURNING l.fence
    )
    SELECT count(*), coalesce(max(g.fence), 0) INTO v_leases, v_lease_max FROM gone AS g;

    -- Slot scopes, one at a time: lock the scope as a claim does, then look
    -- again (a new statement sees every claim that committed before the
    -- lock), and delete the whole scope only when none of its slots was in
    -- use since the cutoff.
    v_scopes := ARRAY(
        SELECT sc.scope FROM pglease.slot_scopes AS sc
        WHERE NOT EXISTS (SELECT 1 FROM pglease.slots AS s
                          WHERE s.scope = sc.scope
                            AND (s.expires_at > v_cutoff
                                 OR (NOT v_all AND s.holder_role IS DISTINCT FROM v_role)))
          AND (v_all OR EXISTS (SELECT 1 FROM pglease.slots AS s WHERE s.scope = sc.scope)));
    FOREACH v_scope IN ARRAY v_scopes LOOP
        PERFORM 1 FROM pglease.slot_scopes AS sc WHERE sc.scope = v_scope
        FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        CONTINUE WHEN EXISTS (SELECT 1 FROM pglease.slots AS s
                              WHERE s.scope = v_scope
                                AND (s.expires_at > v_cutoff
                                     OR (NOT v_all AND s.holder_role IS DISTINCT FROM v_role)));
        WITH gone AS (
            DELETE FROM pglease.slots AS s WHERE s.scope = v_scope RETURNING s.fence
        )
        SELECT count(*), coalesce(max(g.fence), 0) INTO v_n, v_max FROM gone AS g;
        DELETE FROM pglease.slot_scopes AS sc WHERE sc.scope = v_scope;
        v_slots := v_slots + v_n + 1;
        v_slot_max := greatest(v_slot_max, v_max);
    END LOOP;

    -- Lapsed registrations: the caller's own, or everyone's for a trusted
    -- caller. Rows locked by a registration in flight are skipped.
    -- Each by the row versions locked (ctid = ANY of an array: a TID scan,
    -- no join), as the leases by name above.
    WITH gone AS (
        DELETE FROM pglease.waiters AS w
        WHERE w.ctid = ANY (ARRAY(SELECT d.ctid FROM pglease.waiters AS d
                                  WHERE d.until < v_now AND (v_all OR d.caller_role = v_role)
                                  FOR UPDATE SKIP LOCKED))
        RETURNING 1
    )
    SELECT count(*) INTO v_waiters FROM gone;

    -- The run ledger: runs that ended before the cutoff, and runs still
    -- 'running' that started before it whose tenure is not live (so never a
    -- run that can still record its end); never a success whose window has
    -- not ended (it keeps the window closed), nor each job's newest
    -- succeeded run, whatever its age. Rows locked by a run_end in flight
    -- are skipped.
    WITH gone AS (
        DELETE FROM pglease.runs AS r
        WHERE (r.name, r.fence) IN (
            SELECT d.name, d.fence FROM pglease.runs AS d
            WHERE (v_all OR d.holder_role = v_role)
              AND (d.ended_at <= v_cutoff
                   OR (d.outcome IN ('running', 'lost') AND d.ended_at IS NULL AND d.started_at <= v_cutoff
                       AND NOT EXISTS (SELECT 1 FROM pglease.leases AS l
                                       WHERE l.name = d.name AND l.fence = d.fence
                                         AND l.holder IS NOT NULL AND l.expires_at > v_now)))
              AND NOT (d.outcome = 'succeeded'
                       AND (d.window_start + d.run_window > v_now
                            OR d.window_start = (SELECT max(s.window_start) FROM pglease.runs AS s
                                                 WHERE s.name = d.name AND s.outcome = 'succeeded')))
            FOR UPDATE SKIP LOCKED)
        RETURNING 1
    )
    SELECT count(*) INTO v_runs FROM gone;
    DELETE FROM pglease.observers AS o
    WHERE o.ctid = ANY (ARRAY(SELECT d.ctid FROM pglease.observers AS d
                              WHERE d.until < v_now AND (v_all OR d.caller_role = v_role)
                              FOR UPDATE SKIP LOCKED));
    DELETE FROM pglease.candidates AS c
    WHERE c.ctid = ANY (ARRAY(SELECT d.ctid FROM pglease.candidates AS d
                              WHERE d.until < v_now AND (v_all OR d.holder_role = v_role)
                              FOR UPDATE SKIP LOCKED));
    DELETE FROM pglease.slot_queue AS q
    WHERE q.ctid = ANY (ARRAY(SELECT d.ctid FROM pglease.slot_queue AS d
                              WHERE d.until < v_now AND (v_all OR d.holder_role = v_role)
                              FOR UPDATE SKIP LOCKED));
    v_limits := pglease._limit_purge(v_cutoff, v_all, v_role)
                + pglease._history_purge(v_now, v_all, v_role);

    IF v_leases + v_slots + v_waiters + v_runs + v_groups + v_limits > 0 THEN
        PERFORM pglease._raise_floors(v_lease_max, v_slot_max,
                                      v_leases + v_slots + v_waiters + v_runs + v_groups + v_limits);
    END IF;
    RETURN v_leases + v_slots + v_waiters + v_runs + v_groups + v_limits;
END
$$;

-- pglease.purge_due(p_every, p_free_for): pglease.purge(p_free_for), at
-- most once per p_every across every caller of the database of the
-- caller's role (session_user): each role purges what it left, so each
-- role takes its own turns. Clients (the Go supervisor, runslots.Run,
-- pglease run) call it now and then; the first caller of a role after
-- p_every has passed purges, the others return at once. Returns the rows
-- deleted, or NULL when no purge was due. Never waits for a caller of
-- another role; one of the same role whose purge is in flight is skipped.
-- Raises 22004 for NULL arguments and 22023 for a p_every not more than 0,
-- or either of more than 100 years, or a negative p_free_for; nothing is
-- deleted then.
CREATE OR REPLACE FUNCTION pglease.purge_due(p_every interval, p_free_for interval)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_every interval;
BEGIN
    v_every := pglease._check_age('purge_due', 'p_every', p_every);
    IF v_every = interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.purge_due: p_every must be more than 0, got %s', p_every),
            HINT = 'Pass how often to purge, e.g. interval ''1 hour''.';
    END IF;
    PERFORM pglease._check_age('purge_due', 'p_free_for', p_free_for);
    INSERT INTO pglease.purge_turns AS t (role_name, last_purge)
    VALUES (session_user, '-infinity')
    ON CONFLICT ON CONSTRAINT purge_turns_pkey DO NOTHING;
    UPDATE pglease.purge_turns AS t SET last_purge = clock_timestamp()
    WHERE t.role_name = ANY (ARRAY(SELECT d.role_name FROM pglease.purge_turns AS d
                                   WHERE d.role_name = session_user
                                     AND d.last_purge <= clock_timestamp() - v_every
                                   FOR UPDATE SKIP LOCKED));
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN pglease.purge(p_free_for);
END
$$;
