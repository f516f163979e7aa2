-- Template of pglease.renew and pglease.renew_lease, rendered into
-- sql/functions/11_renew.sql by scripts/gen-rules.sh (make generate): one
-- renewal, two result types. Each section below a --8<-- NAME line is a
-- function's contract; the body section is their one body. @NAME@
-- placeholders: FUNC, OUT (more results), INIT (a line setting them
-- before the renewal), RETURNING and INTO (what the update returns).
--8<-- renew
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
--8<-- renew_lease
-- pglease.renew_lease(p_name, p_holder, p_fence, p_ttl): pglease.renew,
-- and whether a release of the tenure was requested.
--
-- Returns what pglease.renew returns, and release_requested: true when
-- the renewal succeeded and pglease.request_release has asked this tenure's
-- holder to hand over (release, and acquire no more for a while); false
-- otherwise. Raises what pglease.renew raises, naming renew_lease. Decides
-- as pglease.renew, with the same checks and the same lock
-- (pglease._lease_lock); the request is read from the row version the
-- renewal writes (a request locks the row too, so none is in flight).
--8<-- body
CREATE OR REPLACE FUNCTION pglease.@FUNC@(
    p_name text, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval@OUT@)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role text := session_user::text;
    v_ttl  interval;
    v_tid  tid;
BEGIN
    IF NOT pglease._tenure_ok(p_name, p_holder, p_fence) THEN
        PERFORM pglease._check_tenure('@FUNC@', p_name, p_holder, p_fence);
    END IF;
    v_ttl := coalesce(pglease._ttl(p_ttl), pglease._check_ttl('@FUNC@', p_ttl));
    v_tid := pglease._lease_lock(p_name, p_holder, p_fence, v_role);
    renewed := v_tid IS NOT NULL;
@INIT@
    IF renewed THEN
        UPDATE pglease.leases AS l
        SET expires_at = clock_timestamp() + v_ttl, holder_role = v_role
        WHERE l.ctid = v_tid
        RETURNING @RETURNING@
        INTO @INTO@;
        expires_in := v_ttl;
    END IF;
END
$$;
