-- pglease.renew(p_name, p_holder, p_fence, p_ttl): extend a live tenure.
--
-- Compare-and-swap on (holder, role, fence) of a live lease: when p_holder
-- holds the lease with fence p_fence, took it as the caller's role
-- (session_user), and it has not expired, expires_at is re-pinned to now +
-- p_ttl (never added to what is left) and renewed = true. Otherwise
-- (another holder, another role, another fence, released, expired, unknown
-- name) renewed = false, nothing changes, and expires_at, expires_in are
-- NULL: an expired tenure is over, even for its last holder, who must
-- acquire again (new fence). A tenure from before 0.2.0 (no role) is bound
-- to the role of its first renewal.
-- Time is the server clock read after any wait for the row lock;
-- expires_in = p_ttl, true when the call returns.
-- Raises 22004 for a NULL argument, 22023 for a bad name, holder, TTL or a
-- negative fence; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.renew(
    p_name text, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role text := session_user::text;
    v_ttl  interval;
    v_tid  tid;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('renew', 'p_name', p_name);
        PERFORM pglease._check_text('renew', 'p_holder', p_holder);
        PERFORM pglease._check_fence('renew', p_fence);
    END IF;
    -- The TTL as plain seconds, as pglease._check_ttl returns it (date_part's
    -- float is the same number of microseconds as extract's numeric, and
    -- cheaper).
    v_ttl := make_interval(secs => date_part('epoch', p_ttl));
    IF (v_ttl > interval '0' AND v_ttl <= interval '24 hours') IS NOT TRUE THEN
        v_ttl := pglease._check_ttl('renew', p_ttl);
    END IF;

    -- Every statement finds the row by its primary key, whatever the
    -- planner's statistics say (right after a purge and VACUUM they say the
    -- table is empty): the holder is compared with IS NOT DISTINCT FROM,
    -- which leases_holder_idx cannot serve, so no plan walks that index's
    -- entries of p_holder (one per tenure it ever took, dead ones too).
    -- The result is the same as with =, p_holder being NOT NULL.
    -- Fast path: lock the row when this is the caller's live tenure and
    -- nobody else has it locked; decided then, on the clock read then.
    SELECT l.ctid INTO v_tid FROM pglease.leases AS l
    WHERE l.name = p_name AND l.holder IS NOT DISTINCT FROM p_holder AND l.fence = p_fence
      AND coalesce(l.holder_role = v_role, true)
      AND l.expires_at > clock_timestamp()
    FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE pglease.leases AS l
        SET expires_at = clock_timestamp() + v_ttl, holder_role = v_role
        WHERE l.ctid = v_tid -- the locked row version stays where it is
        RETURNING l.expires_at INTO expires_at;
        renewed := true;
        expires_in := v_ttl;
        RETURN;
    END IF;
    -- Locked by a transaction in flight (the holder's own fenced write or
    -- renewal, a takeover, a purge): wait for it in a subtransaction, then
    -- decide on the clock read after the wait. A lock taken for nothing
    -- (the tenure ended or changed meanwhile) goes with the subtransaction,
    -- so it never delays a takeover or another holder's renewals.
    renewed := false;
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
        SET expires_at = clock_timestamp() + v_ttl, holder_role = v_role
        WHERE l.name = p_name AND l.holder IS NOT DISTINCT FROM p_holder AND l.fence = p_fence
          AND coalesce(l.holder_role = v_role, true)
          AND l.expires_at > clock_timestamp()
        RETURNING l.expires_at INTO expires_at;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: ended meanwhile';
        END IF;
        renewed := true;
        expires_in := v_ttl;
    EXCEPTION WHEN SQLSTATE 'PGL03' THEN
        expires_at := NULL;
    END;
END
$$;
