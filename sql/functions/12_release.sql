-- pglease.release(p_name, p_holder, p_fence): end a live tenure early.
--
-- Compare-and-release: when p_holder holds the lease with fence p_fence, took
-- it as the caller's role (session_user), and it has not expired, the lease
-- becomes free and released = true; the tenure ends at the server clock
-- read after any wait for the row lock (expires_at); waiters hear it by a
-- NOTIFY on channel 'pglease' at commit (see pglease._wake). Otherwise
-- released = false and nothing changes (a false release means the tenure
-- had already ended, or is not the caller's: another role is another
-- holder).
-- The holder's value goes with the tenure; observers hear of the release
-- (see pglease._observed_wake).
-- The row and its fence stay: the next tenure gets fence + 1, so fences never
-- go backwards, also across release.
-- Raises 22004 for a NULL argument, 22023 for a bad name, holder or a negative
-- fence; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.release(
    p_name text, p_holder text, p_fence bigint,
    OUT released boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role     text := session_user::text;
    v_tid      tid;
    v_observed boolean;
    v_waited   boolean;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('release', 'p_name', p_name);
        PERFORM pglease._check_text('release', 'p_holder', p_holder);
        PERFORM pglease._check_fence('release', p_fence);
    END IF;

    -- The holder is compared as in pglease.renew (IS NOT DISTINCT FROM):
    -- every statement finds the row by its primary key.
    -- Fast path: the lock refused acquires wait for (FOR UPDATE, see
    -- pglease._wake), when nobody else has the row locked; decided then.
    SELECT l.ctid INTO v_tid FROM pglease.leases AS l
    WHERE l.name = p_name AND l.holder IS NOT DISTINCT FROM p_holder AND l.fence = p_fence
      AND coalesce(l.holder_role = v_role, true)
      AND l.expires_at > clock_timestamp()
    FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE pglease.leases AS l
        SET holder = NULL, expires_at = least(l.expires_at, clock_timestamp()), value = NULL
        WHERE l.ctid = v_tid -- the locked row version stays where it is
        -- One look for observers (pglease._observed_wake, which looks
        -- again) and waiters, read with the update: its snapshot is taken
        -- after the lock refused acquires take, so notify waiters only
        -- when a registration is visible (pglease._wake with p_sure,
        -- inline).
        RETURNING EXISTS (SELECT FROM pglease.observers AS o
                          WHERE o.name = p_name AND o.until > clock_timestamp()),
                  EXISTS (SELECT FROM pglease.waiters AS w
                          WHERE w.kind = 'lease' AND w.name = p_name AND w.until > clock_timestamp())
        INTO v_observed, v_waited;
        released := true;
        IF v_observed THEN
            PERFORM pglease._observed_wake(p_name);
        END IF;
        IF v_waited THEN
            PERFORM pglease._wake('lease', p_name, false);
        END IF;
        RETURN;
    END IF;
    -- Locked by a transaction in flight (maybe a refused acquire that may
    -- register as a waiter: notify whether or not one registered): wait in
    -- a subtransaction and decide on the clock read after the wait, as
    -- pglease.renew does.
    released := false;
    PERFORM 1 FROM pglease.leases AS l
    WHERE l.name = p_name AND l.holder IS NOT DISTINCT FROM p_holder AND l.fence = p_fence
      AND coalesce(l.holder_role = v_role, true)
      AND l.expires_at > clock_timestamp();
    IF NOT FOUND THEN
        RETURN; -- not the caller's live tenure
    END IF;
    BEGIN
        PERFORM 1 FROM pglease.leases AS l
        WHERE l.name = p_name AND l.holder IS NOT DISTINCT FROM p_holder AND l.fence = p_fence
          AND coalesce(l.holder_role = v_role, true)
        FOR NO KEY UPDATE;
        UPDATE pglease.leases AS l
        SET holder = NULL, expires_at = least(l.expires_at, clock_timestamp()), value = NULL
        WHERE l.name = p_name AND l.holder IS NOT DISTINCT FROM p_holder AND l.fence = p_fence
          AND coalesce(l.holder_role = v_role, true)
          AND l.expires_at > clock_timestamp();
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: ended meanwhile';
        END IF;
        released := true;
    EXCEPTION WHEN SQLSTATE 'PGL03' THEN
        RETURN;
    END;
    PERFORM pglease._wake('lease', p_name, false);
    PERFORM pglease._observed_wake(p_name);
END
$$;
