-- Internal building blocks of the slot claims. Not granted to clients.

-- _scope_lock(p_scope): creates the scope's row if missing and locks it until
-- the caller's transaction ends. Claims in one scope are serialised by this
-- lock, so counting live holders and taking a slot cannot interleave.
CREATE OR REPLACE FUNCTION pglease._scope_lock(p_scope text)
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM 1 FROM pglease.slot_scopes AS s WHERE s.scope = p_scope FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO pglease.slot_scopes AS s (scope) VALUES (p_scope)
        ON CONFLICT ON CONSTRAINT slot_scopes_pkey DO NOTHING;
        PERFORM 1 FROM pglease.slot_scopes AS s WHERE s.scope = p_scope FOR UPDATE;
    END IF;
END
$$;

-- _slot_claim_locked: one claim in a scope whose lock the caller holds.
-- Returns claimed = true with the slot, its fence and in_use counting this
-- claim; or claimed = false with slot and fence NULL, in_use = live holders
-- and retry_in = time until the earliest live slot expires. A holder that
-- already has a live slot gets it back, re-pinned to p_now + p_ttl (same
-- fence). Otherwise a claim succeeds only while fewer than
-- p_capacity holders are live; it reuses the longest-free slot numbered up to
-- p_capacity (fence + 1), else creates the next slot number (fence floor + 1, see pglease.purge).
-- Cost grows with the number of live holders, never with p_capacity.
CREATE OR REPLACE FUNCTION pglease._slot_claim_locked(
    p_scope text, p_holder text, p_capacity integer,
    p_now timestamptz, p_ttl interval,
    OUT claimed boolean, OUT slot integer, OUT fence bigint, OUT in_use integer,
    OUT retry_in interval)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Re-entrant: our own live slot comes back.
    UPDATE pglease.slots AS s
    SET expires_at = p_now + p_ttl
    WHERE (s.scope, s.slot) = (
            SELECT o.scope, o.slot FROM pglease.slots AS o
            WHERE o.holder = p_holder AND o.scope = p_scope AND o.expires_at > p_now
            ORDER BY o.slot LIMIT 1)
      AND s.holder = p_holder AND s.expires_at > p_now
    RETURNING s.slot, s.fence INTO slot, fence;
    IF FOUND THEN
        claimed := true;
        SELECT count(*)::integer INTO in_use FROM pglease.slots AS s
        WHERE s.scope = p_scope AND s.expires_at > p_now AND s.holder IS NOT NULL;
        RETURN;
    END IF;

    -- A pass fails only when a slot we saw free was renewed under us by a
    -- renewal whose clock read was earlier than ours; count again then.
    -- A free slot is one whose holder is NULL or whose tenure ended by
    -- p_now, exactly the slots the count leaves out: a release that
    -- committed after p_now was read (release_slot takes no scope lock, and
    -- claim_slots may wait on a row lock in an earlier scope) stamps
    -- expires_at later than p_now, and the slot is free all the same.
    FOR attempt IN 1..10 LOOP
        SELECT count(*)::integer INTO in_use FROM pglease.slots AS s
        WHERE s.scope = p_scope AND s.expires_at > p_now AND s.holder IS NOT NULL;
        IF in_use >= p_capacity THEN
            EXIT;
        END IF;

        UPDATE pglease.slots AS s
        SET holder = p_holder, fence = s.fence + 1,
            acquired_at = p_now, expires_at = p_now + p_ttl
        WHERE (s.scope, s.slot) = (
                SELECT f.scope, f.slot FROM pglease.slots AS f
                WHERE f.scope = p_scope AND (f.holder IS NULL OR f.expires_at <= p_now)
                  AND f.slot <= p_capacity
                ORDER BY f.expires_at LIMIT 1)
          AND (s.holder IS NULL OR s.expires_at <= p_now)
        RETURNING s.slot, s.fence INTO slot, fence;
        IF NOT FOUND THEN
            SELECT coalesce(max(s.slot), 0) + 1 INTO slot
            FROM pglease.slots AS s WHERE s.scope = p_scope;
            IF slot <= p_capacity THEN
                -- A new slot starts above the fence floor (see
                -- pglease.purge, which takes the scope lock we hold, so
                -- this statement sees the floor of any purge of the scope).
                INSERT INTO pglease.slots AS s (scope, slot, holder, fence, acquired_at, expires_at)
                VALUES (p_scope, slot, p_holder,
                        coalesce((SELECT f.slot_fence FROM pglease.fence_floor AS f), 0) + 1,
                        p_now, p_now + p_ttl)
                ON CONFLICT ON CONSTRAINT slots_pkey DO NOTHING
                RETURNING s.fence INTO fence;
            END IF;
        END IF;
        IF fence IS NOT NULL THEN
            claimed := true;
            in_use := in_use + 1;
            RETURN;
        END IF;
    END LOOP;
    claimed := false;
    slot := NULL;
    fence := NULL;
    SELECT min(s.expires_at) - p_now INTO retry_in
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.expires_at > p_now AND s.holder IS NOT NULL;
    retry_in := greatest(coalesce(retry_in, interval '0'), interval '0');
END
$$;
