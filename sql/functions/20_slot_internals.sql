-- Internal building blocks of the slot claims. Not granted to clients; they
-- run with the search_path of the SECURITY DEFINER entry points that call
-- them (see 00_checks.sql).

-- _scope_lock(p_scope): creates the scope's row if missing and locks it until
-- the caller's transaction ends. Claims in one scope are serialised by this
-- lock, so counting live holders and taking a slot cannot interleave. Then
-- it un-counts (pglease.slots.counted, with the scope's counter) every
-- counted slot whose tenure ended by the clock read after the lock: only
-- those that ended since the previous claim, read by an index range. The
-- un-count is an update of each such row: it waits for any renewal in
-- flight of it (which checked the tenure live before it ended: the row is
-- then re-read, found extended and stays counted), and a renewal that comes
-- later waits for the claim's commit and then, the row having changed,
-- checks it again on the clock read again and finds the tenure over, which
-- it was.
CREATE OR REPLACE FUNCTION pglease._scope_lock(p_scope text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now  timestamptz;
    v_gone integer;
BEGIN
    PERFORM 1 FROM pglease.slot_scopes AS s WHERE s.scope = p_scope FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO pglease.slot_scopes AS s (scope) VALUES (p_scope)
        ON CONFLICT ON CONSTRAINT slot_scopes_pkey DO NOTHING;
        PERFORM 1 FROM pglease.slot_scopes AS s WHERE s.scope = p_scope FOR UPDATE;
    END IF;
    v_now := clock_timestamp();
    UPDATE pglease.slots AS s SET counted = false
    WHERE s.scope = p_scope AND s.counted AND s.expires_at <= v_now;
    GET DIAGNOSTICS v_gone = ROW_COUNT;
    IF v_gone > 0 THEN
        UPDATE pglease.slot_scopes AS sc SET counted = sc.counted - v_gone
        WHERE sc.scope = p_scope;
    END IF;
END
$$;

-- _slot_claim_locked: one claim in a scope whose lock the caller holds, on
-- the clock p_now read after that lock (and every other wait). Returns
-- claimed = true with the slot, its fence and in_use counting this claim;
-- or claimed = false with slot and fence NULL, in_use = slots in use and
-- retry_in = time from p_now until the earliest of them ends (> 0; 0 only
-- when none is counted, a claim refused after ten changed attempts).
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
-- pglease.purge).
-- The slots in use are counted, not read: first the counted slots that
-- ended by p_now are un-counted (see pglease._scope_lock, which did so on
-- an earlier clock: normally none is left), and then the counted slots are
-- exactly those in use, their number is the scope's counter, their smallest
-- capacity the first entry of slots_counted_capacity_idx. Every step is an
-- index read: the cost grows neither with the slots in use nor with
-- p_capacity.
CREATE OR REPLACE FUNCTION pglease._slot_claim_locked(
    p_scope text, p_holder text, p_capacity integer,
    p_now timestamptz, p_ttl interval,
    OUT claimed boolean, OUT slot integer, OUT fence bigint, OUT in_use integer,
    OUT retry_in interval)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_role text := session_user::text;
    v_cap  integer;
    v_gone integer;
BEGIN
    UPDATE pglease.slots AS s SET counted = false
    WHERE s.scope = p_scope AND s.counted AND s.expires_at <= p_now;
    GET DIAGNOSTICS v_gone = ROW_COUNT;
    SELECT sc.counted - v_gone INTO in_use
    FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope;

    -- The outer statement finds the slot by its scope, never by the holder
    -- (compared with IS NOT DISTINCT FROM, as in pglease.renew).
    -- Re-entrant: our own live slot comes back (it is counted).
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
    ELSE
        SELECT min(s.capacity) INTO v_cap
        FROM pglease.slots AS s WHERE s.scope = p_scope AND s.counted;
        -- A pass fails only when the slot it chose changed under it.
        FOR attempt IN 1..10 LOOP
            EXIT WHEN in_use >= least(p_capacity, v_cap);
            UPDATE pglease.slots AS s
            SET holder = p_holder, holder_role = v_role, capacity = p_capacity,
                fence = s.fence + 1, acquired_at = p_now, expires_at = p_now + p_ttl,
                counted = true
            WHERE (s.scope, s.slot) = (
                    SELECT f.scope, f.slot FROM pglease.slots AS f
                    WHERE f.scope = p_scope AND f.expires_at <= p_now
                      AND f.slot <= p_capacity
                    ORDER BY f.expires_at LIMIT 1)
              AND s.expires_at <= p_now AND NOT s.counted
            RETURNING s.slot, s.fence INTO slot, fence;
            IF NOT FOUND THEN
                SELECT coalesce(max(s.slot), 0) + 1 INTO slot
                FROM pglease.slots AS s WHERE s.scope = p_scope;
                IF slot <= p_capacity THEN
                    -- A new slot starts above the fence floor (see
                    -- pglease.purge, which takes the scope lock we hold, so
                    -- this statement sees the floor of any purge of the scope).
                    INSERT INTO pglease.slots AS s (scope, slot, holder, fence, acquired_at, expires_at,
                                                    holder_role, capacity, counted)
                    VALUES (p_scope, slot, p_holder,
                            coalesce((SELECT f.slot_fence FROM pglease.fence_floor AS f), 0) + 1,
                            p_now, p_now + p_ttl, v_role, p_capacity, true)
                    ON CONFLICT ON CONSTRAINT slots_pkey DO NOTHING
                    RETURNING s.fence INTO fence;
                END IF;
            END IF;
            IF fence IS NOT NULL THEN
                claimed := true;
                in_use := in_use + 1;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    IF claimed OR v_gone > 0 THEN
        UPDATE pglease.slot_scopes AS sc SET counted = in_use WHERE sc.scope = p_scope;
    END IF;
    IF claimed THEN
        RETURN;
    END IF;
    claimed := false;
    slot := NULL;
    fence := NULL;
    -- On p_now, the reading that decided: every counted slot ends after it
    -- (those that ended by then were un-counted above), so retry_in > 0
    -- when any is counted, and p_now + retry_in is exactly the earliest end.
    SELECT min(s.expires_at) - p_now INTO retry_in
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.counted;
    retry_in := greatest(coalesce(retry_in, interval '0'), interval '0');
END
$$;
