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
-- Time is the server clock read after any wait for the row lock (see
-- pglease._lease_lock); expires_in = p_ttl, true when the call returns.
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
    IF NOT pglease._tenure_ok(p_name, p_holder, p_fence) THEN
        PERFORM pglease._check_tenure('renew', p_name, p_holder, p_fence);
    END IF;
    v_ttl := coalesce(pglease._ttl(p_ttl), pglease._check_ttl('renew', p_ttl));

    v_tid := pglease._lease_lock(p_name, p_holder, p_fence, v_role);
    renewed := v_tid IS NOT NULL;
    IF renewed THEN
        UPDATE pglease.leases AS l
        SET expires_at = clock_timestamp() + v_ttl, holder_role = v_role
        WHERE l.ctid = v_tid
        RETURNING l.expires_at INTO expires_at;
        expires_in := v_ttl;
    END IF;
END
$$;
