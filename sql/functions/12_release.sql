-- pglease.release(p_name, p_holder, p_fence): end a live tenure early.
--
-- Compare-and-release: when p_holder holds the lease with fence p_fence and
-- it has not expired, the lease becomes free and released = true; waiters
-- hear it by a NOTIFY on channel 'pglease' at commit (see pglease._wake).
-- Otherwise released = false and nothing changes (a false release means
-- the tenure had already ended).
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
    v_now timestamptz := clock_timestamp();
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('release', 'p_name', p_name);
        PERFORM pglease._check_text('release', 'p_holder', p_holder);
        PERFORM pglease._check_fence('release', p_fence);
    END IF;

    UPDATE pglease.leases AS l
    SET holder = NULL, expires_at = v_now
    WHERE l.name = p_name
      AND l.holder = p_holder
      AND l.fence = p_fence
      AND l.expires_at > v_now;
    released := FOUND;
    IF released THEN
        PERFORM pglease._wake('lease', p_name, NULL, p_fence, p_holder);
    END IF;
END
$$;
