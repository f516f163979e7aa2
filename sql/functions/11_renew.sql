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
-- Time is the server clock read when the row is checked, after any wait for
-- its lock; expires_in is expires_at minus the clock when the call returns.
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
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('renew', 'p_name', p_name);
        PERFORM pglease._check_text('renew', 'p_holder', p_holder);
        PERFORM pglease._check_fence('renew', p_fence);
    END IF;
    v_ttl := make_interval(secs => extract(epoch FROM p_ttl));
    IF (v_ttl > interval '0' AND v_ttl <= interval '24 hours') IS NOT TRUE THEN
        v_ttl := pglease._check_ttl('renew', p_ttl);
    END IF;

    -- clock_timestamp() in the statement: read again when the row is
    -- rechecked after a lock wait.
    UPDATE pglease.leases AS l
    SET expires_at = clock_timestamp() + v_ttl,
        holder_role = v_role
    WHERE l.name = p_name
      AND l.holder = p_holder
      AND l.fence = p_fence
      AND coalesce(l.holder_role = v_role, true)
      AND l.expires_at > clock_timestamp()
    RETURNING l.expires_at INTO expires_at;
    renewed := FOUND;
    IF renewed THEN
        expires_in := expires_at - clock_timestamp();
    END IF;
END
$$;
