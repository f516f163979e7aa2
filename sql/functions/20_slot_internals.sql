-- Internal building blocks of the slot claims. Not granted to clients.

-- _scope_lock(p_scope): creates the scope's row if missing and locks it until
-- the caller's transaction ends. Claims in one scope are serialised by this
-- lock, so counting live holders and taking a slot cannot interleave. Then
-- it touches (a no-op update) every slot that looks expired but still has
-- a holder: this waits for any renewal in flight of it (which checked the
-- tenure live before it expired, and would extend it after the claim
-- counted the slot free), and a renewal that comes later waits for the
-- claim's commit and then, the row having changed, checks it again on the
-- clock read again and finds the tenure over, which it was.
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
    UPDATE pglease.slots AS s SET expires_at = s.expires_at
    WHERE s.scope = p_scope AND s.holder IS NOT NULL AND s.expires_at <= clock_timestamp();
END
$$;

-- _slot_claim_locked: one claim in a scope whose lock the caller holds, on
-- the clock p_now read after that lock (and every other wait). Returns
-- claimed = true with the slot, its fence and in_use counting this claim;
-- or claimed = false with slot and fence NULL, in_use = slots in use and
-- retry_in = time until the earliest of them ends.
-- A slot is in use at p_now when its tenure ends after p_now (expires_at >
-- p_now): a release stamps expires_at with its own clock, so a release that
-- committed after p_now was read still counts as in use for this claim,
-- and every slot taken starts at or after its previous tenure's end.
-- One capacity per scope: a claim succeeds only while the slots in use are
-- fewer than p_capacity and fewer than the smallest capacity any of their
-- tenures was claimed with (tenures from before 0.2.0 have none). So the
-- scope never has more live holders than the capacity any live holder
-- claimed with, however claims with different capacities race.
-- A holder (p_holder of the caller's role) that already has a live slot gets
-- it back, re-pinned to p_now + p_ttl (same fence, same capacity).
-- Otherwise it reuses the longest-free slot numbered up to p_capacity
-- (fence + 1), else creates the next slot number (fence floor + 1, see
-- pglease.purge). Cost grows with the slots in use, never with p_capacity.
CREATE OR REPLACE FUNCTION pglease._slot_claim_locked(
    p_scope text, p_holder text, p_capacity integer,
    p_now timestamptz, p_ttl interval,
    OUT claimed boolean, OUT slot integer, OUT fence bigint, OUT in_use integer,
    OUT retry_in interval)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role text := session_user::text;
    v_cap  integer;
BEGIN
    -- The outer statement finds the slot by its scope, never by the holder
    -- (compared with IS NOT DISTINCT FROM, as in pglease.renew).
    -- Re-entrant: our own live slot comes back.
    UPDATE pglease.slots AS s
    SET expires_at = p_now + p_ttl, holder_role = v_role
    WHERE (s.scope, s.slot) = (
            SELECT o.scope, o.slot FROM pglease.slots AS o
            WHERE o.holder = p_holder AND o.scope = p_scope AND o.expires_at > p_now
              AND coalesce(o.holder_role = v_role, true)
            ORDER BY o.slot LIMIT 1)
      AND s.holder IS NOT DISTINCT FROM p_holder AND s.expires_at > p_now
    RETURNING s.slot, s.fence INTO slot, fence;
    IF FOUND THEN
        claimed := true;
        SELECT count(*)::integer INTO in_use FROM pglease.slots AS s
        WHERE s.scope = p_scope AND s.expires_at > p_now;
        RETURN;
    END IF;

    -- A pass fails only when the slot it chose changed under it; count
    -- again then.
    FOR attempt IN 1..10 LOOP
        SELECT count(*)::integer, min(s.capacity) INTO in_use, v_cap
        FROM pglease.slots AS s
        WHERE s.scope = p_scope AND s.expires_at > p_now;
        IF in_use >= least(p_capacity, v_cap) THEN
            EXIT;
        END IF;

        UPDATE pglease.slots AS s
        SET holder = p_holder, holder_role = v_role, capacity = p_capacity,
            fence = s.fence + 1, acquired_at = p_now, expires_at = p_now + p_ttl
        WHERE (s.scope, s.slot) = (
                SELECT f.scope, f.slot FROM pglease.slots AS f
                WHERE f.scope = p_scope AND f.expires_at <= p_now
                  AND f.slot <= p_capacity
                ORDER BY f.expires_at LIMIT 1)
          AND s.expires_at <= p_now
        RETURNING s.slot, s.fence INTO slot, fence;
        IF NOT FOUND THEN
            SELECT coalesce(max(s.slot), 0) + 1 INTO slot
            FROM pglease.slots AS s WHERE s.scope = p_scope;
            IF slot <= p_capacity THEN
                -- A new slot starts above the fence floor (see
                -- pglease.purge, which takes the scope lock we hold, so
                -- this statement sees the floor of any purge of the scope).
                INSERT INTO pglease.slots AS s (scope, slot, holder, fence, acquired_at, expires_at,
                                                holder_role, capacity)
                VALUES (p_scope, slot, p_holder,
                        coalesce((SELECT f.slot_fence FROM pglease.fence_floor AS f), 0) + 1,
                        p_now, p_now + p_ttl, v_role, p_capacity)
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
    SELECT min(s.expires_at) - clock_timestamp() INTO retry_in
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.expires_at > p_now;
    retry_in := greatest(coalesce(retry_in, interval '0'), interval '0');
END
$$;
