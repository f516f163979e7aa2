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
-- release_requested is true when the renewal succeeded and
-- pglease.request_release has asked this tenure's holder to hand over
-- (release, and acquire no more for a while); false otherwise.
-- Time is the server clock read after any wait for the row lock (see
-- pglease._lease_lock); expires_in = p_ttl, true when the call returns.
-- Raises 22004 for a NULL argument, 22023 for a bad name, holder, TTL or a
-- negative fence; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.renew(
    p_name text, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval,
    OUT release_requested boolean)
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
    -- The TTL as plain seconds, as pglease._check_ttl returns it.
    v_ttl := make_interval(secs => date_part('epoch', p_ttl));
    IF (v_ttl > interval '0' AND v_ttl <= interval '24 hours') IS NOT TRUE THEN
        v_ttl := pglease._check_ttl('renew', p_ttl);
    END IF;

    v_tid := pglease._lease_lock(p_name, p_holder, p_fence, v_role);
    renewed := v_tid IS NOT NULL;
    release_requested := false;
    IF renewed THEN
        -- The row is locked: no release request is in flight (a request
        -- locks the row too), so the row version written says whether one
        -- was made.
        UPDATE pglease.leases AS l
        SET expires_at = clock_timestamp() + v_ttl, holder_role = v_role
        WHERE l.ctid = v_tid
        RETURNING l.expires_at, l.release_requested_at IS NOT NULL
        INTO expires_at, release_requested;
        expires_in := v_ttl;
    END IF;
END
$$;
