-- pglease.renew_holder(p_holder, p_ttl): renew every live lease and slot of
-- one holder, taken by the caller's role (session_user), in one call.
-- Tenures of the same holder string taken by another role are another
-- holder's: neither renewed nor reported.
--
-- Returns one row of arrays (aligned by index within each group):
--   * leases, lease_fences: the leases renewed;
--   * slot_scopes, slots, slot_fences: the slots renewed;
--   * lost_leases, lost_slot_scopes, lost_slots: tenures of p_holder that
--     had expired by now (lost; acquire or claim again for a new fence).
--   Empty arrays, never NULL, when there is nothing.
--   * expires_at = now + p_ttl and expires_in = p_ttl, where now is the
--     server clock read once when the call starts: a lower bound, the
--     same for every tenure renewed, not each tenure's end. Every tenure
--     renewed ends at expires_at or later: at the later of its previous
--     end and now + p_ttl (renew_holder never moves an end earlier, so a
--     tenure granted or re-pinned with a longer TTL, or while the call
--     ran, keeps the end its grant gave it), or, when its row was locked
--     and waited for, at the clock read after that wait + p_ttl. A client
--     may take as every renewed tenure's deadline the time it sent the
--     call + expires_in (the Keeper does, with p_ttl), never later; a
--     tenure's own end is in pglease.lease_status and pglease.slot_status.
--     (One value rather than an end per tenure keeps the result type
--     that older clients read, so that an upgrade replaces the function in
--     place; a new result type would need DROP FUNCTION.)
-- As with pglease.renew, a tenure is renewed only when it is live on the
-- clock read after any wait for its row lock: one whose row another
-- transaction holds (the holder's own fenced write, say) is waited for, in
-- a subtransaction, and then renewed, or left alone when it ended
-- meanwhile.
-- A lease or slot the caller believes it holds but that appears nowhere
-- ended (released, taken over, or expired while the call ran, after now
-- but before its row was read): it is lost too.
-- Leases come in byte order of their names (COLLATE "C"), slots by scope
-- and slot.
-- Raises 22004 for NULL, 22023 for a bad holder or TTL; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.renew_holder(
    p_holder text, p_ttl interval,
    OUT leases text[], OUT lease_fences bigint[],
    OUT slot_scopes text[], OUT slots integer[], OUT slot_fences bigint[],
    OUT lost_leases text[], OUT lost_slot_scopes text[], OUT lost_slots integer[],
    OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_role  text := session_user::text;
    v_ttl   interval;
    v_name  text;
    v_slot  integer;
    v_fence bigint;
    v_live  bigint;
    v_fast  integer;
    v_tid   tid;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_holder) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM pglease._check_text('renew_holder', 'p_holder', p_holder);
    END IF;
    v_ttl := coalesce(pglease._ttl(p_ttl), pglease._check_ttl('renew_holder', p_ttl));

    -- Fast path for the leases: the caller's live rows nobody else has
    -- locked, each decided on the clock read when it is locked, then
    -- updated in one statement. It never waits (SKIP LOCKED), so neither a
    -- long fenced transaction nor a stranger's lock holds up the others,
    -- and a cancel ends the call at once; the rows it skipped are waited
    -- for one at a time in the slow path below. A row locked by this
    -- statement stays where it is, so the UPDATE finds it again by its
    -- ctid (a TID scan), not by its name.
    WITH renewed AS (
        UPDATE pglease.leases AS l
        SET expires_at = greatest(l.expires_at, v_now + v_ttl), holder_role = v_role
        WHERE l.ctid = ANY (ARRAY(
            SELECT m.ctid FROM pglease.leases AS m
            WHERE m.holder = p_holder AND coalesce(m.holder_role = v_role, true)
              AND m.expires_at > clock_timestamp()
            FOR NO KEY UPDATE SKIP LOCKED))
        RETURNING l.name, l.fence
    )
    SELECT coalesce(array_agg(r.name), '{}'), coalesce(array_agg(r.fence), '{}')
    INTO leases, lease_fences
    FROM (SELECT * FROM renewed ORDER BY name COLLATE "C") AS r;
    v_fast := cardinality(leases);

    -- The caller's live leases now, and those lost (over at v_now), in
    -- one pass over the holder's rows. When every live one was renewed
    -- above (they are a subset of these), the slow path has nothing to do
    -- and is not run, and the leases are in order already.
    SELECT count(*) FILTER (WHERE l.expires_at > clock_timestamp()),
           coalesce(array_agg(l.name ORDER BY l.name COLLATE "C") FILTER (WHERE l.expires_at <= v_now), '{}')
    INTO v_live, lost_leases
    FROM pglease.leases AS l
    WHERE l.holder = p_holder AND coalesce(l.holder_role = v_role, true);

    -- The slots: the rows nobody else has locked, then the slow path.
    WITH mine AS (
        SELECT s.scope, s.slot FROM pglease.slots AS s
        WHERE s.holder = p_holder AND coalesce(s.holder_role = v_role, true)
          AND s.expires_at > clock_timestamp()
        FOR NO KEY UPDATE SKIP LOCKED
    ), renewed AS (
        UPDATE pglease.slots AS s
        SET expires_at = greatest(s.expires_at, v_now + v_ttl), holder_role = v_role
        FROM mine AS m
        WHERE (s.scope, s.slot) = (m.scope, m.slot)
        RETURNING s.scope, s.slot::integer AS slot, s.fence::bigint AS fence
    )
    SELECT coalesce(array_agg(r.scope), '{}'), coalesce(array_agg(r.slot), '{}'),
           coalesce(array_agg(r.fence), '{}')
    INTO slot_scopes, slots, slot_fences
    FROM renewed AS r;

    -- Slow path: live tenures of the caller whose row was locked, each
    -- locked as pglease.renew locks it (pglease._lease_lock,
    -- pglease._slot_lock: wait, then decide on the clock read after the
    -- wait, keeping no lock for a tenure that ended meanwhile). What the
    -- fast path renewed is left out by a hashed NOT IN: = ANY over the
    -- array would compare each row with every element (quadratic in the
    -- holder's leases).
    IF v_live > v_fast THEN
        FOR v_name, v_fence IN
            SELECT l.name, l.fence FROM pglease.leases AS l
            WHERE l.holder = p_holder AND coalesce(l.holder_role = v_role, true)
              AND l.expires_at > clock_timestamp()
              AND l.name NOT IN (SELECT r.name FROM unnest(leases) AS r(name))
        LOOP
            v_tid := pglease._lease_lock(v_name, p_holder, v_fence, v_role);
            IF v_tid IS NOT NULL THEN
                UPDATE pglease.leases AS l
                SET expires_at = greatest(l.expires_at, clock_timestamp() + v_ttl), holder_role = v_role
                WHERE l.ctid = v_tid;
                leases := leases || v_name;
                lease_fences := lease_fences || v_fence;
            END IF;
        END LOOP;
    END IF;
    FOR v_name, v_slot, v_fence IN
        SELECT s.scope, s.slot::integer, s.fence::bigint FROM pglease.slots AS s
        WHERE s.holder = p_holder AND coalesce(s.holder_role = v_role, true)
          AND s.expires_at > clock_timestamp()
          AND (s.scope, s.slot) NOT IN (SELECT r.scope, r.slot
                                        FROM unnest(slot_scopes, slots) AS r(scope, slot))
    LOOP
        v_tid := pglease._slot_lock(v_name, v_slot, p_holder, v_fence, v_role);
        IF v_tid IS NOT NULL THEN
            UPDATE pglease.slots AS s
            SET expires_at = greatest(s.expires_at, clock_timestamp() + v_ttl), holder_role = v_role
            WHERE s.ctid = v_tid;
            slot_scopes := slot_scopes || v_name;
            slots := slots || v_slot;
            slot_fences := slot_fences || v_fence;
        END IF;
    END LOOP;

    -- In the documented order: by name (byte order), and by scope and slot.
    IF v_live > v_fast THEN
        SELECT coalesce(array_agg(r.name ORDER BY r.name COLLATE "C"), '{}'),
               coalesce(array_agg(r.fence ORDER BY r.name COLLATE "C"), '{}')
        INTO leases, lease_fences
        FROM unnest(leases, lease_fences) AS r(name, fence);
    END IF;
    SELECT coalesce(array_agg(r.scope ORDER BY r.scope, r.slot), '{}'),
           coalesce(array_agg(r.slot ORDER BY r.scope, r.slot), '{}'),
           coalesce(array_agg(r.fence ORDER BY r.scope, r.slot), '{}')
    INTO slot_scopes, slots, slot_fences
    FROM unnest(slot_scopes, slots, slot_fences) AS r(scope, slot, fence);

    -- Lost slots: what is still ours but over by now.
    SELECT coalesce(array_agg(s.scope ORDER BY s.scope, s.slot), '{}'),
           coalesce(array_agg(s.slot::integer ORDER BY s.scope, s.slot), '{}')
    INTO lost_slot_scopes, lost_slots
    FROM pglease.slots AS s
    WHERE s.holder = p_holder AND coalesce(s.holder_role = v_role, true)
      AND s.expires_at <= v_now;

    expires_at := v_now + v_ttl;
    expires_in := v_ttl;
END
$$;
