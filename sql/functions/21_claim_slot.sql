-- pglease.claim_slot(p_scope, p_holder, p_capacity, p_ttl, p_units,
-- p_wait): take p_units units of a scope's capacity, all or nothing, as one
-- slot with one fence. p_wait (default false) says that the caller will
-- claim again when refused (a blocking claim): a refused claim then joins
-- the scope's queue (pglease.slot_queue), whose head keeps room for its
-- units against later claims, so it is not starved by claims of fewer
-- units (against other roles' claims, only while the units its own role
-- holds leave it room); a claim with p_wait false is never queued (a
-- one-shot claim must not hold room it will not take). The four-argument
-- form (0.2.0) is p_units 1, p_wait false, without the units column.
--
-- A tenure belongs to the pair (p_holder, the caller's database role:
-- session_user); the same holder string from another role is another
-- holder. A scope has one capacity at a time: the smallest of the capacities
-- its live holders claimed with, and of the caller's p_capacity (see
-- pglease._slot_claim_locked); units in use are the sum of the live
-- holders' units. Lowering the capacity takes effect at once
-- for new claims (no live holder is evicted: they keep their slots until
-- they release or expire); raising it takes effect once no live holder
-- claimed with a smaller one. Returns one row:
--   * p_holder of the caller's role already has a live slot in the scope:
--     claimed = true, that slot and fence, expiry re-pinned to now + p_ttl
--     (a retry after a lost reply leaks nothing).
--     units = the units that tenure holds (whatever p_units says).
--   * units in use + p_units at most the scope's capacity: claimed = true,
--     a slot numbered 1..p_capacity with a fence larger than any earlier
--     tenure of that slot, starting at now, at or after that tenure's end,
--     expires_at = now + p_ttl, units = p_units; in_use (units in use)
--     counts this claim.
--   * more than the capacity: claimed = false, slot, fence, units,
--     expires_at, expires_in NULL, in_use = units in use, retry_in =
--     the earliest of their ends minus now, so > 0 (a refused caller can
--     sleep that long, or until a release NOTIFY: it is registered as a
--     waiter until then, see pglease._wake). retry_in is NULL when claimed.
-- now is the server clock read once the scope lock is granted (and again
-- after a wait for a renewal in flight of the holder's own slot), and the
-- call decides on it; expires_in = p_ttl, and both are true when the call
-- returns, but for the call's own few microseconds. One wait can follow
-- that reading: taking (or un-counting) an ended slot waits for another
-- holder's renewal of it still in flight, one that found the tenure live
-- before its end. If the renewal commits, the slot stays that holder's and
-- the call decides on the same reading; if it rolls back, the slot is
-- taken with a start and an expiry from that reading: the tenure is
-- shorter than p_ttl by the wait, never longer.
-- Claims in one scope are serialised by a row lock; a granted claim holds
-- it until the caller's transaction ends, so the cap holds however many
-- claimers race (and other claims of the scope wait for a grant left open
-- in a transaction). A refused claim releases it before it returns, and
-- keeps only a lock no claim waits for. The decision runs in a
-- subtransaction: a transaction that makes more than 64 claims holds more
-- than 64 subtransactions, which slows every session's snapshots
-- (PostgreSQL's subtransaction cache overflows); claim in transactions of
-- their own, or in several scopes at once with pglease.claim_slots. One
-- round trip; its cost grows neither with live holders nor with p_capacity
-- (the scope keeps count of its live holders; see
-- pglease._slot_claim_locked).
-- Raises 22004 for NULL, 22023 for a scope or holder not 1 to 256 bytes, a
-- capacity not in 1..1000000, units not in 1..p_capacity, a TTL not in
-- (0, 24 hours]; 42501 for a scope under a prefix bound to a role the
-- caller is not a member of (see pglease.prefix_bind); PGL06 when p_units
-- is more than the smallest capacity the
-- scope's live holders claimed with; nothing changes then.
--
-- enable_bitmapscan is off for the call (and the claim's building blocks
-- it calls): every take and release leaves a dead entry of
-- slots_counted_check_idx in the range of the scope that the next claim
-- reads; a plain index scan marks such entries dead as it passes (an
-- insertion into a full leaf page then removes them), but a bitmap scan
-- never marks them, so under a bitmap plan, which the planner picks on the
-- statistics of a table in use, the range every claim reads, with its heap
-- pages, grows until a VACUUM. plan_cache_mode is force_generic_plan for
-- the call too: the reads compare with the clock, a constant to the plans
-- PostgreSQL makes for a statement's values, and on statistics older than
-- the table those can keep looking cheaper than the generic plan, so every
-- call would plan its statements again (see docs/scaling.md). The generic
-- plans read the same index ranges.
CREATE OR REPLACE FUNCTION pglease.claim_slot(
    p_scope text, p_holder text, p_capacity integer, p_ttl interval, p_units integer,
    p_wait boolean DEFAULT false,
    OUT claimed boolean, OUT slot integer, OUT fence bigint,
    OUT expires_at timestamptz, OUT expires_in interval, OUT in_use integer,
    OUT retry_in interval, OUT units integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_now   timestamptz;
    v_ttl   interval;
    v_role  text := session_user::text;
    v_count integer;
    v_mine  boolean;
    v_tid    tid;     -- the common claim's slot: its row, number, units, capacity
    v_tslot  integer;
    v_tunits integer;
    v_tcap   integer;
    v_ended  integer; -- counted slots that ended on v_now, up to two
    v_queued boolean;
    v_cap    integer;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_scope) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256
        AND p_capacity BETWEEN 1 AND 1000000
        AND p_units BETWEEN 1 AND p_capacity
        AND p_wait IS NOT NULL) IS NOT TRUE THEN
        PERFORM pglease._check_text('claim_slot', 'p_scope', p_scope);
        PERFORM pglease._check_text('claim_slot', 'p_holder', p_holder);
        PERFORM pglease._check_int('claim_slot', 'p_capacity', p_capacity, 1, 1000000);
        PERFORM pglease._check_int('claim_slot', 'p_units', p_units, 1, p_capacity);
        PERFORM pglease._check_flag('claim_slot', 'p_wait', p_wait);
    END IF;
    v_ttl := coalesce(pglease._ttl(p_ttl), pglease._check_ttl('claim_slot', p_ttl));
    PERFORM pglease._check_owner('claim_slot', 'p_scope', p_scope);

    -- The decision runs in a subtransaction: a refusal rolls it back, with
    -- the scope lock and whatever it un-counted (the next claim does that
    -- again), so that a refused call left open in a transaction holds up
    -- no claim. Only a grant keeps the lock until the caller's
    -- transaction ends.
    BEGIN
        -- The scope lock (pglease._scope_lock), and the scope's counter as the
        -- lock returns it: the row version of the last claim that held it.
        SELECT sc.counted INTO v_count FROM pglease.slot_scopes AS sc
        WHERE sc.scope = p_scope FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            PERFORM pglease._scope_lock(p_scope);
            SELECT sc.counted INTO v_count FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope;
        END IF;
        -- Whether the scope's queue has an entry (one index probe; almost
        -- always none).
        v_queued := EXISTS (SELECT 1 FROM pglease.slot_queue AS q WHERE q.scope = p_scope);
        -- The clock is read once the scope is ours: slots that expired or were
        -- released meanwhile count as free. One read then: the first two
        -- counted slots that ended on it, and whether the holder has a slot
        -- row in the scope (live or not yet released). It takes no lock, so no
        -- wait follows the clock read.
        v_now := clock_timestamp();
        SELECT e.tids[1], e.slots[1], e.units[1], e.caps[1], coalesce(cardinality(e.tids), 0),
               EXISTS (SELECT 1 FROM pglease.slots AS h
                       WHERE h.holder = p_holder AND h.scope = p_scope
                         AND coalesce(h.holder_role = v_role, true))
        INTO v_tid, v_tslot, v_tunits, v_tcap, v_ended, v_mine
        FROM (SELECT array_agg(t.ctid) AS tids, array_agg(t.slot::integer) AS slots,
                     array_agg(t.units::integer) AS units, array_agg(t.capacity::integer) AS caps
              FROM (SELECT t.ctid, t.slot, t.units, t.capacity FROM pglease.slots AS t
                    WHERE t.scope = p_scope AND t.counted AND t.check_at <= v_now
                      AND t.expires_at <= v_now
                    ORDER BY t.check_at LIMIT 2) AS t) AS e;
        IF v_mine THEN
            -- Lock the holder's own slot rows in the scope: this waits for a
            -- renewal in flight of one (which a re-entrant claim re-pins), and
            -- then sees the row as renewed; the clock is read again after it.
            -- Liveness is not tested here: a row that looks ended may be under
            -- a renewal that checked it live before its end and commits after.
            -- None found (a release cleared it meanwhile): the holder has no
            -- tenure in the scope that a renewal could extend, and none starts
            -- before the clock read (only a claim, which needs the scope lock,
            -- starts one).
            PERFORM 1 FROM pglease.slots AS s
            WHERE s.scope = p_scope AND s.holder = p_holder
              AND coalesce(s.holder_role = v_role, true)
            FOR NO KEY UPDATE;
            v_mine := FOUND;
            v_now := clock_timestamp();
        -- The common claim: the holder has no slot here, the queue is empty,
        -- and the counted slot that ended first is the only one that ended,
        -- so nothing is un-counted; it is taken in place when the units fit.
        -- This decides exactly as pglease._slot_claim_locked would (same
        -- reads, same test, no reserve with no queue), with the test in
        -- PL/pgSQL rather than as subqueries of the UPDATE (a statement's cost
        -- here is mostly its plan's set-up), and the take by the row's
        -- address, which the UPDATE checks is still that slot's (no lock kept
        -- the row version read: once a renewal replaced it, its place on the
        -- page can hold another row). When the slot is taken back with its
        -- capacity and units, the units in use do not change and the capacity
        -- test holds by the scope's invariant (sql/schema/10_schema.sql: the
        -- units in use are at most the capacity of every counted slot), so the
        -- smallest capacity of the others is read only when either changes.
        -- Anything else, or nothing taken (the UPDATE re-tests the row, which
        -- a renewal in flight may have extended), goes to
        -- pglease._slot_claim_locked on the same clock: nothing changed.
        ELSIF v_ended = 1 AND v_tslot <= p_capacity AND NOT v_queued THEN
            IF v_tcap IS DISTINCT FROM p_capacity OR v_tunits <> p_units THEN
                SELECT min(o.capacity) INTO v_cap FROM pglease.slots AS o
                WHERE o.scope = p_scope AND o.counted AND o.slot <> v_tslot;
            END IF;
            IF (v_tcap = p_capacity AND v_tunits = p_units)
               OR v_count - v_tunits + p_units <= least(p_capacity, v_cap) THEN
                UPDATE pglease.slots AS s
                SET holder = p_holder, holder_role = v_role, capacity = p_capacity,
                    units = p_units, fence = s.fence + 1, acquired_at = v_now,
                    expires_at = v_now + v_ttl, check_at = v_now + v_ttl
                WHERE s.ctid = v_tid AND s.scope = p_scope AND s.slot = v_tslot
                  AND s.counted AND s.expires_at <= v_now
                RETURNING s.slot::integer, s.fence::bigint, s.units::integer INTO slot, fence, units;
                claimed := FOUND;
                IF claimed THEN
                    in_use := v_count - v_tunits + p_units;
                    IF in_use <> v_count THEN
                        UPDATE pglease.slot_scopes AS sc SET counted = in_use WHERE sc.scope = p_scope;
                    END IF;
                END IF;
            END IF;
        END IF;
        IF claimed IS NOT TRUE THEN
            SELECT c.claimed, c.slot, c.fence, c.in_use, c.retry_in, c.units
            INTO claimed, slot, fence, in_use, retry_in, units
            FROM pglease._slot_claim_locked(p_scope, p_holder, p_capacity, p_units, v_now, v_ttl,
                                            v_count, v_mine, v_queued) AS c;
        END IF;
        IF NOT claimed THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL02', MESSAGE = 'pglease: refused';
        END IF;
    EXCEPTION WHEN SQLSTATE 'PGL02' THEN
        claimed := false;
    END;
    IF claimed THEN
        expires_at := v_now + v_ttl;
        expires_in := v_ttl;
    ELSE
        -- Refused: the scope's row stays locked FOR KEY SHARE until the
        -- caller's transaction ends. No claim waits for that lock (claims
        -- take FOR NO KEY UPDATE), but a release does not get the FOR
        -- UPDATE it tries without waiting, and so notifies: the
        -- registration below, not yet committed, cannot miss a release.
        -- A release that committed between the rollback and this lock
        -- ended a tenure after v_now: its end is the earliest.
        PERFORM 1 FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope FOR KEY SHARE;
        retry_in := pglease._slot_retry_in(p_scope, v_now, retry_in);
        PERFORM pglease._wait_register('slot', p_scope, v_now + retry_in);
        IF p_wait THEN
            PERFORM pglease._slot_queue(p_scope, p_holder, p_units, v_now, retry_in);
        END IF;
    END IF;
END
$$;
