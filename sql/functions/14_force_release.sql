-- pglease.force_release(p_name): operator override that ends the current
-- tenure of lease p_name, whoever holds it.
--
-- Returns released = true with the ended tenure's holder and fence when the
-- lease was held or expired; released = false (holder, fence NULL when the
-- name is unknown) when it was already free. The fence stays, so the next
-- holder gets fence + 1 and the old holder's fenced writes are refused.
-- The tenure ends at the server clock read after the row lock is granted.
-- A fenced transaction of the tenure (pglease.assert_held) keeps it out at
-- most 200 ms: then its backend is ended (see pglease._lock_for_takeover).
-- Wakes waiters and observers like pglease.release. Whatever role took the tenure: this
-- is the operator's override of the role binding. Not granted to pglease_client: run it
-- as the schema owner or grant it to an operators' role.
CREATE OR REPLACE FUNCTION pglease.force_release(
    p_name text,
    OUT released boolean, OUT holder text, OUT fence bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_sure boolean;
BEGIN
    PERFORM pglease._check_text('force_release', 'p_name', p_name);

    -- As pglease.release: the lock refused acquires wait for, when free.
    PERFORM 1 FROM pglease.leases AS l WHERE l.name = p_name FOR UPDATE SKIP LOCKED;
    v_sure := FOUND;
    -- The tenure's fenced transactions keep the row at most 200 ms more.
    IF NOT v_sure THEN
        SELECT l.fence INTO fence FROM pglease.leases AS l WHERE l.name = p_name;
        PERFORM pglease._lock_for_takeover(p_name, fence, clock_timestamp());
    END IF;
    SELECT l.holder, l.fence INTO holder, fence
    FROM pglease.leases AS l
    WHERE l.name = p_name
    FOR NO KEY UPDATE;
    released := FOUND AND holder IS NOT NULL;
    IF released THEN
        UPDATE pglease.leases AS l
        SET holder = NULL, expires_at = least(l.expires_at, clock_timestamp()), value = NULL
        WHERE l.name = p_name;
        PERFORM pglease._tenure_forced(p_name, 0, fence); -- the history says forced (0.4.0)
        PERFORM pglease._wake('lease', p_name, v_sure);
        PERFORM pglease._observed_wake(p_name);
    END IF;
END
$$;
