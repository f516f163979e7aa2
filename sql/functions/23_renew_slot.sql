-- pglease.renew_slot(p_scope, p_slot, p_holder, p_fence, p_ttl): extend a
-- live slot tenure.
--
-- Compare-and-swap on (holder, role, fence) of a live slot, exactly like
-- pglease.renew: renewed = true with expires_at = now + p_ttl, or
-- renewed = false with expires_at, expires_in NULL when the slot is not live
-- under (p_holder, p_fence) taken by the caller's role (session_user).
-- now is the server clock read after any wait for the row lock (see
-- pglease._slot_lock).
-- It changes expires_at and holder_role, which no index holds: a HOT update
-- (see pglease.slots); and check_at, indexed, only when it is less than a
-- quarter of p_ttl ahead or beyond the new end: then to the new end. So a
-- holder renewing every third of its TTL writes the index once per TTL,
-- its row is looked at by claims only once its tenure may have ended, and
-- claims never have to write a live row.
-- Raises 22004 for NULL, 22023 for a bad scope, holder, slot (1..1000000),
-- negative fence or TTL; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.renew_slot(
    p_scope text, p_slot integer, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role text := session_user::text;
    v_ttl  interval;
    v_tid  tid;
    v_end  timestamptz;
BEGIN
    IF NOT pglease._slot_ok(p_scope, p_slot, p_holder, p_fence) THEN
        PERFORM pglease._check_slot('renew_slot', p_scope, p_slot, p_holder, p_fence);
    END IF;
    v_ttl := coalesce(pglease._ttl(p_ttl), pglease._check_ttl('renew_slot', p_ttl));

    v_tid := pglease._slot_lock(p_scope, p_slot, p_holder, p_fence, v_role);
    renewed := v_tid IS NOT NULL;
    IF renewed THEN
        v_end := clock_timestamp() + v_ttl;
        UPDATE pglease.slots AS s
        SET expires_at = v_end, holder_role = v_role,
            check_at = CASE WHEN s.check_at BETWEEN v_end - v_ttl * 0.75 AND v_end
                            THEN s.check_at ELSE v_end END
        WHERE s.ctid = v_tid
        RETURNING s.expires_at INTO expires_at;
        expires_in := v_ttl;
    END IF;
END
$$;
