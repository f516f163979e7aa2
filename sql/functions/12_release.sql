-- pglease.release(p_name, p_holder, p_fence): end a live tenure early.
--
-- Compare-and-release: when p_holder holds the lease with fence p_fence, took
-- it as the caller's role (session_user), and it has not expired, the lease
-- becomes free and released = true; the tenure ends at the server clock
-- read after any wait for the row lock (expires_at; see
-- pglease._lease_lock); waiters hear it by a
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
    v_sure     boolean; -- locked FOR UPDATE: no refused acquire in flight
BEGIN
    IF NOT pglease._tenure_ok(p_name, p_holder, p_fence) THEN
        PERFORM pglease._check_tenure('release', p_name, p_holder, p_fence);
    END IF;

    -- Fast path: the lock refused acquires wait for (FOR UPDATE, see
    -- pglease._wake), when nobody else has the row locked. Then nobody
    -- can register as a waiter unseen: waiters are notified only when a
    -- registration is visible. Otherwise the row is locked as every
    -- compare-and-swap locks it (pglease._lease_lock), and a refused
    -- acquire in flight may register after this call looks: waiters are
    -- always notified.
    SELECT l.ctid INTO v_tid FROM pglease.leases AS l
    WHERE l.name = p_name
      AND pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                               p_holder, v_role, p_fence, clock_timestamp())
    FOR UPDATE SKIP LOCKED;
    v_sure := FOUND;
    IF NOT v_sure THEN
        v_tid := pglease._lease_lock(p_name, p_holder, p_fence, v_role);
    END IF;
    released := v_tid IS NOT NULL;
    IF NOT released THEN
        RETURN; -- not the caller's live tenure
    END IF;
    UPDATE pglease.leases AS l
    SET holder = NULL, expires_at = least(l.expires_at, clock_timestamp()), value = NULL
    WHERE l.ctid = v_tid -- the locked row version stays where it is
    -- One look for observers (pglease._observed_wake, which looks again)
    -- and waiters, read with the update: its snapshot is taken after the
    -- lock.
    RETURNING EXISTS (SELECT FROM pglease.observers AS o
                      WHERE o.name = p_name AND o.until > clock_timestamp()),
              EXISTS (SELECT FROM pglease.waiters AS w
                      WHERE w.kind = 'lease' AND w.name = p_name AND w.until > clock_timestamp())
    INTO v_observed, v_waited;
    IF v_observed OR NOT v_sure THEN
        PERFORM pglease._observed_wake(p_name);
    END IF;
    IF v_waited OR NOT v_sure THEN
        PERFORM pglease._wake('lease', p_name, false);
    END IF;
END
$$;
