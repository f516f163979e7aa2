-- Batched calls (0.3.0, docs/sql.md#batched-calls): acquire or release many
-- leases of one holder in one call and one commit. Each element is decided
-- as the single-name function decides it: its own compare-and-set, its own
-- fence, its own refusal, bound to the calling role (session_user) as the
-- single call binds it. The elements are committed together, with the
-- caller's transaction.
--
-- Two paths. The set-based one first: when every element is one the
-- single call's fast path would grant (acquire: a lease that is ours to
-- take, free, expired or our own live tenure; release: the caller's live
-- tenure), with distinct names, and no row is locked by anyone else, one
-- statement locks all the rows in name order without waiting (NOWAIT), the
-- clock is read after the locks, and one statement writes every decision
-- that clock reading makes (a new tenure with the next fence, our own
-- re-pinned, a release), exactly the single fast path's decision per
-- element; it is cheaper per element than the single calls.
-- Otherwise, when any element is anything else (a bad argument, a
-- refusal, a name with no row yet, a name given twice, a row someone has
-- locked), the set-based attempt is rolled back, locks and all, and every
-- element is the single-name function itself, called once per element
-- (the per-element path; acquire_batch runs pglease.acquire's fast path
-- inline there for a name that is ours to take and not locked: the same
-- statement, the same decision). So a batch cannot decide a name
-- differently from the single call.
--
-- Both functions run with plan_cache_mode = force_generic_plan: their
-- statements take arrays, and custom plans for them would be made again
-- on every call.
--
-- Order: the results are in input order (element i of every OUT array
-- answers element i of the input). The per-element path processes the
-- elements in name order (ties in input order), so that two batches
-- sharing names lock their rows in the same order and cannot deadlock on
-- each other; the set-based path never waits for a lock, so it cannot
-- take part in a deadlock either. A name given twice is decided twice, in
-- input order, as two single calls one after the other would be: the
-- second acquire is the holder's own re-acquire (same fence, expiry
-- re-pinned), the second release finds the tenure ended (released =
-- false).
--
-- Bad elements: an element whose own argument is bad (a NULL or empty
-- name, a name over 256 bytes, a TTL not in (0, 24 hours], a value over
-- 1024 bytes, a NULL or negative fence) is not called: its sqlstate is the
-- SQLSTATE the single call would raise (22004 or 22023), its other result
-- columns are false or NULL, and nothing changes for it; the other
-- elements are decided as usual. sqlstate is NULL for every element that
-- was decided. So one caller's bad name never fails another caller's call
-- coalesced into the same batch.

-- pglease.acquire_batch(p_names, p_holder, p_ttls, p_values): pglease.acquire
-- (the four-argument form) for each element: p_names[i] for p_ttls[i], with
-- the value p_values[i] (p_values may be NULL: no values).
--
-- Returns one row of arrays, one element per input element, in input
-- order:
--   * acquired[i], fences[i], holders[i], expires_at[i], expires_in[i],
--     lease_values[i]: what pglease.acquire(p_names[i], p_holder,
--     p_ttls[i], p_values[i]) returns, in every case it documents (a
--     grant, the holder's own re-acquire, a refusal with the holder's
--     tenure);
--   * fresh[i]: true when the grant started a new tenure (a fence no
--     tenure had when the element was decided), false for a re-acquire of
--     the caller's own live tenure and for a refusal or a bad element. A
--     client that gave up on a call may release a fresh grant it no longer
--     wants without ending a tenure it still uses;
--   * sqlstates[i]: NULL when the element was decided; 22004 or 22023 for
--     a bad element (see above), 42501 for a name under a prefix another
--     role owns (see pglease.prefix_bind); neither was called.
-- Raises 22004 when p_names, p_holder or p_ttls is NULL, 22023 for a
-- holder not 1 to 256 bytes, arrays of different lengths (p_values, when
-- not NULL, too), or more than 1000 elements; 40001 when some element's
-- lease changed under ten attempts in a row (retry; see pglease.acquire),
-- 40P01 when it deadlocked with another transaction; nothing is changed
-- then, for any element.
CREATE OR REPLACE FUNCTION pglease.acquire_batch(
    p_names text[], p_holder text, p_ttls interval[], p_values text[],
    OUT acquired boolean[], OUT fences bigint[], OUT holders text[],
    OUT expires_at timestamptz[], OUT expires_in interval[],
    OUT lease_values text[], OUT fresh boolean[], OUT sqlstates text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n       integer;
    v_prior   bigint;
    v_state   text;
    v_role    text := session_user::text;
    v_ttl     interval;
    v_now     timestamptz;
    v_holder  text;
    v_hrole   text;
    v_fence   bigint;
    v_expires timestamptz;
    v_value   text;
    v_tid     tid;
    v_locked   bigint;
    v_distinct bigint;
    v_names   text[];
    v_is      bigint[];
    v_ttls    interval[];
    v_values  text[];
    v_holders text[];
    v_hroles  text[];
    v_fences  bigint[];
    v_ends    timestamptz[];
    v_olds    text[];
    v_changed text[];
    e         record;
    r         record;
BEGIN
    PERFORM pglease._batch_check('acquire_batch', p_names, p_holder, 'p_ttls', cardinality(p_ttls), p_ttls IS NULL);
    v_n := cardinality(p_names);
    IF p_values IS NOT NULL AND cardinality(p_values) <> v_n THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.acquire_batch: p_values has %s elements and p_names %s', cardinality(p_values), v_n),
            HINT = 'Pass one value per name (NULL for none), or NULL for no values.';
    END IF;
    -- The set-based path (see the file's header): all elements or none.
    IF v_n > 0 THEN
        BEGIN
            -- Lock, in name order and without waiting, the row of every
            -- valid element that is ours to take, as pglease.acquire's fast
            -- path tests it.
            v_now := clock_timestamp();
            SELECT count(*), count(DISTINCT x.name), array_agg(x.name), array_agg(x.i),
                   array_agg(x.ttl), array_agg(x.value), array_agg(x.holder),
                   array_agg(x.holder_role), array_agg(x.fence), array_agg(x.expires_at),
                   array_agg(x.old)
            INTO v_locked, v_distinct, v_names, v_is, v_ttls, v_values, v_holders, v_hroles,
                 v_fences, v_ends, v_olds
            FROM (SELECT u.i, l.name, make_interval(secs => date_part('epoch', u.ttl)) AS ttl,
                         u.value, l.holder, l.holder_role, l.fence, l.expires_at, l.value AS old
                  FROM unnest(p_names, p_ttls, p_values) WITH ORDINALITY AS u(name, ttl, value, i)
                  JOIN pglease.leases AS l ON l.name = u.name
                  WHERE date_part('epoch', u.ttl) > 0 AND date_part('epoch', u.ttl) <= 86400
                    AND pglease._may_take(l.name)
                    AND coalesce(octet_length(u.value) <= 1024, true)
                    AND pglease._takeable(l.holder, l.holder_role, l.expires_at, l.release_to,
                                          l.release_to_role, l.release_for, p_holder, v_role, v_now)
                  ORDER BY l.name COLLATE "C"
                  FOR NO KEY UPDATE OF l NOWAIT) AS x;
            IF v_locked < v_n OR v_distinct < v_n THEN
                RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: per element';
            END IF;
            -- Decide every element on the clock read after the locks: our
            -- own live tenure re-pinned, else a new tenure when the lease is
            -- still ours to take then (it is, unless our own tenure ended
            -- in between with a release request for another holder).
            v_now := clock_timestamp();
            WITH d AS (
                SELECT x.*, x.holder = p_holder AND x.expires_at > v_now
                            AND coalesce(x.holder_role = v_role, true) AS own
                FROM unnest(v_names, v_is, v_ttls, v_values, v_holders, v_hroles, v_fences, v_ends, v_olds)
                     AS x(name, i, ttl, value, holder, holder_role, fence, expires_at, old)
            ), w AS (
                UPDATE pglease.leases AS l
                SET holder = p_holder, holder_role = v_role,
                    fence = CASE WHEN d.own THEN d.fence ELSE d.fence + 1 END,
                    acquired_at = CASE WHEN d.own THEN l.acquired_at ELSE v_now END,
                    expires_at = v_now + d.ttl, value = d.value,
                    release_requested_at = CASE WHEN d.own THEN l.release_requested_at END,
                    release_to = CASE WHEN d.own THEN l.release_to END,
                    release_for = CASE WHEN d.own THEN l.release_for END,
                    release_to_role = CASE WHEN d.own THEN l.release_to_role END
                FROM d
                WHERE l.name = d.name
                  AND pglease._takeable(d.holder, d.holder_role, d.expires_at, l.release_to,
                                        l.release_to_role, l.release_for, p_holder, v_role, v_now)
                RETURNING d.i, d.name, d.own, d.ttl, d.value, d.old, l.fence
            )
            SELECT count(*), array_agg(true ORDER BY w.i), array_agg(w.fence ORDER BY w.i),
                   array_agg(p_holder ORDER BY w.i), array_agg(v_now + w.ttl ORDER BY w.i),
                   array_agg(w.ttl ORDER BY w.i), array_agg(w.value ORDER BY w.i),
                   array_agg(NOT w.own ORDER BY w.i), array_agg(NULL::text ORDER BY w.i),
                   array_agg(w.name) FILTER (WHERE NOT w.own OR w.old IS DISTINCT FROM w.value)
            INTO v_locked, acquired, fences, holders, expires_at, expires_in, lease_values,
                 fresh, sqlstates, v_changed
            FROM w;
            IF v_locked < v_n THEN
                RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: per element';
            END IF;
            -- Observers hear of every new tenure and changed value.
            PERFORM pglease._observed_wake(o.name) FROM pglease.observers AS o
            WHERE o.name = ANY (v_changed) AND o.until > clock_timestamp();
            RETURN;
        EXCEPTION WHEN lock_not_available OR SQLSTATE 'PGL03' THEN
            NULL; -- rolled back, locks and all: the per-element path
        END;
    END IF;
    -- The per-element path, in name order, ties in input order.
    acquired := array_fill(false, ARRAY[v_n]);
    fences := array_fill(NULL::bigint, ARRAY[v_n]);
    holders := array_fill(NULL::text, ARRAY[v_n]);
    expires_at := array_fill(NULL::timestamptz, ARRAY[v_n]);
    expires_in := array_fill(NULL::interval, ARRAY[v_n]);
    lease_values := array_fill(NULL::text, ARRAY[v_n]);
    fresh := array_fill(false, ARRAY[v_n]);
    sqlstates := array_fill(NULL::text, ARRAY[v_n]);
    FOR e IN
        SELECT u.i::integer AS i, u.name, u.ttl, u.value
        FROM unnest(p_names, p_ttls, p_values) WITH ORDINALITY AS u(name, ttl, value, i)
        ORDER BY u.name COLLATE "C", u.i
    LOOP
        v_state := CASE
            WHEN e.name IS NULL OR e.ttl IS NULL THEN '22004'
            WHEN octet_length(e.name) NOT BETWEEN 1 AND 256
                 OR date_part('epoch', e.ttl) <= 0 OR date_part('epoch', e.ttl) > 86400
                 OR octet_length(e.value) > 1024 THEN '22023'
            WHEN NOT pglease._may_take(e.name) THEN '42501'
        END;
        IF v_state IS NOT NULL THEN
            sqlstates[e.i] := v_state;
            CONTINUE;
        END IF;
        -- pglease.acquire's fast path, inline: lock the row at once when it
        -- is ours to take (free, expired, or our own live tenure) and
        -- nobody has it locked, and grant on the clock read after the
        -- lock. The TTL as pglease.acquire normalizes it.
        v_ttl := make_interval(secs => date_part('epoch', e.ttl));
        v_now := clock_timestamp();
        SELECT l.holder, l.holder_role, l.fence, l.expires_at, l.value, l.ctid
        INTO v_holder, v_hrole, v_fence, v_expires, v_value, v_tid
        FROM pglease.leases AS l
        WHERE l.name = e.name
          AND pglease._takeable(l.holder, l.holder_role, l.expires_at, l.release_to,
                                l.release_to_role, l.release_for, p_holder, v_role, v_now)
        FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            v_now := clock_timestamp();
            IF v_holder = p_holder AND v_expires > v_now
               AND coalesce(v_hrole = v_role, true) THEN
                -- The caller's own live tenure, re-pinned; observers hear
                -- of a changed value (as pglease.acquire with a value).
                UPDATE pglease.leases AS l
                SET expires_at = v_now + v_ttl, holder_role = v_role, value = e.value
                WHERE l.ctid = v_tid;
                fences[e.i] := v_fence;
                IF v_value IS DISTINCT FROM e.value THEN
                    PERFORM pglease._observed_wake(e.name);
                END IF;
            ELSE
                UPDATE pglease.leases AS l
                SET holder = p_holder, holder_role = v_role, fence = v_fence + 1,
                    acquired_at = v_now, expires_at = v_now + v_ttl, value = e.value,
                    release_requested_at = NULL, release_to = NULL, release_for = NULL,
                    release_to_role = NULL
                WHERE l.ctid = v_tid;
                fences[e.i] := v_fence + 1;
                fresh[e.i] := true;
                PERFORM pglease._observed_wake(e.name);
            END IF;
            acquired[e.i] := true;
            holders[e.i] := p_holder;
            expires_at[e.i] := v_now + v_ttl;
            expires_in[e.i] := v_ttl;
            lease_values[e.i] := e.value;
            CONTINUE;
        END IF;
        -- Any other element: the call. A fence above every fence the name
        -- had before it is a new tenure (pglease.acquire gives a new tenure
        -- the next fence).
        SELECT l.fence INTO v_prior FROM pglease.leases AS l WHERE l.name = e.name;
        SELECT a.acquired, a.fence, a.holder, a.expires_at, a.expires_in, a.value INTO r
        FROM pglease.acquire(e.name, p_holder, e.ttl, e.value) AS a;
        acquired[e.i] := r.acquired;
        fences[e.i] := r.fence;
        holders[e.i] := r.holder;
        expires_at[e.i] := r.expires_at;
        expires_in[e.i] := r.expires_in;
        lease_values[e.i] := r.value;
        fresh[e.i] := r.acquired AND r.fence > coalesce(v_prior, 0);
    END LOOP;
END
$$;

-- pglease.release_batch(p_names, p_holder, p_fences): pglease.release for
-- each element: the tenure p_fences[i] of p_names[i] by p_holder.
--
-- Returns one row of arrays, one element per input element, in input
-- order: released[i] is what pglease.release(p_names[i], p_holder,
-- p_fences[i]) returns (true: the caller's live tenure was released;
-- false: it had ended, or is not the caller's: another role's tenure is
-- never released), and sqlstates[i] is NULL when the element was decided,
-- 22004 or 22023 for a bad element (see above: released[i] = false, not
-- called).
-- Raises 22004 when p_names, p_holder or p_fences is NULL, 22023 for a
-- holder not 1 to 256 bytes, arrays of different lengths or more than 1000
-- elements; 40P01 when it deadlocked with another transaction; nothing is
-- changed then, for any element.
CREATE OR REPLACE FUNCTION pglease.release_batch(
    p_names text[], p_holder text, p_fences bigint[],
    OUT released boolean[], OUT sqlstates text[])
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_n        integer;
    v_role     text := session_user::text;
    v_locked   bigint;
    v_distinct bigint;
    v_names    text[];
    e          record;
BEGIN
    PERFORM pglease._batch_check('release_batch', p_names, p_holder, 'p_fences', cardinality(p_fences), p_fences IS NULL);
    v_n := cardinality(p_names);
    -- The set-based path (see the file's header): all elements or none.
    IF v_n > 0 THEN
        BEGIN
            -- Lock, in name order and without waiting, every element's row
            -- that is the caller's live tenure, with the lock refused
            -- acquires wait for (FOR UPDATE, as pglease.release's fast
            -- path).
            SELECT count(*), count(DISTINCT x.name), array_agg(x.name)
            INTO v_locked, v_distinct, v_names
            FROM (SELECT l.name
                  FROM unnest(p_names, p_fences) AS u(name, fence)
                  JOIN pglease.leases AS l ON l.name = u.name
                  WHERE pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                                             p_holder, v_role, u.fence, clock_timestamp())
                  ORDER BY l.name COLLATE "C"
                  FOR UPDATE OF l NOWAIT) AS x;
            IF v_locked < v_n OR v_distinct < v_n THEN
                RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: per element';
            END IF;
            -- Each tenure ends at the clock read as its row is written.
            UPDATE pglease.leases AS l
            SET holder = NULL, expires_at = least(l.expires_at, clock_timestamp()), value = NULL
            WHERE l.name = ANY (v_names);
            -- Observers and registered waiters hear of the releases (we
            -- hold the lock refused acquires take, as pglease.release's
            -- fast path: a registration that is not visible now cannot be).
            PERFORM pglease._observed_wake(o.name) FROM pglease.observers AS o
            WHERE o.name = ANY (v_names) AND o.until > clock_timestamp();
            PERFORM pglease._wake('lease', w.name, false) FROM pglease.waiters AS w
            WHERE w.kind = 'lease' AND w.name = ANY (v_names) AND w.until > clock_timestamp();
            released := array_fill(true, ARRAY[v_n]);
            sqlstates := array_fill(NULL::text, ARRAY[v_n]);
            RETURN;
        EXCEPTION WHEN lock_not_available OR SQLSTATE 'PGL03' THEN
            NULL; -- rolled back, locks and all: the per-element path
        END;
    END IF;
    -- The per-element path, in name order, ties in input order.
    released := array_fill(false, ARRAY[v_n]);
    sqlstates := array_fill(NULL::text, ARRAY[v_n]);
    FOR e IN
        SELECT u.i::integer AS i, u.name, u.fence
        FROM unnest(p_names, p_fences) WITH ORDINALITY AS u(name, fence, i)
        ORDER BY u.name COLLATE "C", u.i
    LOOP
        IF e.name IS NULL OR e.fence IS NULL THEN
            sqlstates[e.i] := '22004';
        ELSIF octet_length(e.name) NOT BETWEEN 1 AND 256 OR e.fence < 0 THEN
            sqlstates[e.i] := '22023';
        ELSE
            released[e.i] := (SELECT r.released FROM pglease.release(e.name, p_holder, e.fence) AS r);
        END IF;
    END LOOP;
END
$$;

-- pglease._batch_check(p_func, p_names, p_holder, p_arg, p_len, p_null):
-- the whole-call checks of a batched function: p_names and p_holder not
-- NULL, p_holder 1 to 256 bytes, the per-element array p_arg (of length
-- p_len, NULL when p_null) as long as p_names, at most 1000 elements.
-- Raises 22004 or 22023 as the batched functions document.
CREATE OR REPLACE FUNCTION pglease._batch_check(
    p_func text, p_names text[], p_holder text, p_arg text, p_len integer, p_null boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    IF p_names IS NULL OR p_null THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, CASE WHEN p_names IS NULL THEN 'p_names' ELSE p_arg END),
            HINT = 'Pass an array, empty for no elements.';
    END IF;
    PERFORM pglease._check_text(p_func, 'p_holder', p_holder);
    IF coalesce(p_len, 0) <> coalesce(cardinality(p_names), 0) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s has %s elements and p_names %s', p_func, p_arg, coalesce(p_len, 0), cardinality(p_names)),
            HINT = format('Pass one %s element per name.', p_arg);
    END IF;
    IF cardinality(p_names) > 1000 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: at most 1000 elements per call, got %s', p_func, cardinality(p_names)),
            HINT = 'Split the batch.';
    END IF;
END
$$;
