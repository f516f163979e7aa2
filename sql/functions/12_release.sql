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
    v_role text := session_user::text;
    v_sure boolean;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('release', 'p_name', p_name);
        PERFORM pglease._check_text('release', 'p_holder', p_holder);
        PERFORM pglease._check_fence('release', p_fence);
    END IF;

    -- The lock refused acquires wait for (see pglease._wake); when anyone
    -- holds the row locked, the UPDATE below waits as it would anyway, and
    -- the release notifies whether or not someone registered.
    PERFORM 1 FROM pglease.leases AS l
    WHERE l.name = p_name AND l.holder = p_holder AND l.fence = p_fence
      AND coalesce(l.holder_role = v_role, true)
      AND l.expires_at > clock_timestamp()
    FOR UPDATE SKIP LOCKED;
    v_sure := FOUND;
    UPDATE pglease.leases AS l
    SET holder = NULL, expires_at = least(l.expires_at, clock_timestamp())
    WHERE l.name = p_name
      AND l.holder = p_holder
      AND l.fence = p_fence
      AND coalesce(l.holder_role = v_role, true)
      AND l.expires_at > clock_timestamp();
    released := FOUND;
    IF released THEN
        PERFORM pglease._wake('lease', p_name, v_sure);
    END IF;
END
$$;
