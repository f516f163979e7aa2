-- pglease._lease_take: grants lease p_name, whose row the caller has locked
-- and read (p_old_*), to p_holder of role p_role at p_now. Internal: not
-- granted to clients.
--
-- Returns the fence and expires_at (p_now + p_ttl): the same tenure (same
-- fence, same start) re-pinned when p_holder of that role (or of no role:
-- a tenure from before 0.2.0, which this binds) holds it live at p_now;
-- else a new tenure with fence p_old_fence + 1 starting at p_now.
CREATE OR REPLACE FUNCTION pglease._lease_take(
    p_name text, p_holder text, p_role text, p_ttl interval, p_now timestamptz,
    p_old_holder text, p_old_role text, p_old_fence bigint, p_old_expires timestamptz,
    OUT fence bigint, OUT expires_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_old_holder = p_holder AND p_old_expires > p_now
       AND coalesce(p_old_role = p_role, true) THEN
        UPDATE pglease.leases AS l
        SET expires_at = p_now + p_ttl, holder_role = p_role
        WHERE l.name = p_name;
        fence := p_old_fence;
    ELSE
        UPDATE pglease.leases AS l
        SET holder = p_holder, holder_role = p_role, fence = p_old_fence + 1,
            acquired_at = p_now, expires_at = p_now + p_ttl
        WHERE l.name = p_name;
        fence := p_old_fence + 1;
    END IF;
    expires_at := p_now + p_ttl;
END
$$;
