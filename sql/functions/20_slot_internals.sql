-- Internal building blocks of the slot claims. Not granted to clients; they
-- run with the search_path of the SECURITY DEFINER entry points that call
-- them (see 00_checks.sql).

-- _scope_lock(p_scope): creates the scope's row if missing and locks it FOR
-- NO KEY UPDATE until the caller's (sub)transaction ends. Claims in one
-- scope are serialised by this lock, so counting the units in use and
-- taking a slot cannot interleave. (A refused claim rolls its lock back
-- and keeps only a FOR KEY SHARE lock, which no claim waits for; see
-- pglease.claim_slot.)
-- It returns only once the row is the caller's: locked, or inserted by its
-- transaction (which no one else can lock or delete before it ends). A
-- purge can delete the row while this call waits for its lock (the lock
-- then returns no row), also after this call found the row missing and
-- another claim created it; so each miss tries to create the row, and each
-- conflict looks again: a claim that counted without the lock could grant
-- more units than the capacity.
-- The lock only: the caller counts on the clock it reads once every lock
-- is granted (see pglease._slot_claim_locked).
CREATE OR REPLACE FUNCTION pglease._scope_lock(p_scope text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    LOOP
        PERFORM 1 FROM pglease.slot_scopes AS s WHERE s.scope = p_scope FOR NO KEY UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO pglease.slot_scopes AS s (scope, created_by)
        VALUES (p_scope, CASE WHEN pglease._check_quota(NULL, 'scopes') THEN session_user END)
        ON CONFLICT ON CONSTRAINT slot_scopes_pkey DO NOTHING;
        EXIT WHEN FOUND;
    END LOOP;
END
$$;

-- _slot_claim_locked: one claim of p_units units in a scope whose lock the
-- caller holds, on the clock p_now read after that lock (and every other
-- wait). Returns claimed = true with the slot, its fence, its units and
-- in_use = units in use counting this claim; or claimed = false with slot,
-- fence and units NULL, in_use = units in use and retry_in = time from
-- p_now until the earliest of their tenures ends (> 0; 0 only when none is
-- counted, a claim refused after ten changed attempts).
-- A slot is in use at p_now when its tenure ends after p_now (expires_at >
-- p_now): a release stamps expires_at with its own clock, so a release that
-- committed after p_now was read still counts as in use for this claim,
-- and every slot taken starts at or after its previous tenure's end.
-- One capacity per scope: a claim of k units succeeds only while the units
-- in use plus k are at most p_capacity and at most the smallest capacity
-- any of the live tenures was claimed with (tenures from before 0.2.0 have
-- none). So the scope never has more units in use than the capacity any
-- live holder claimed with, however claims with different capacities race.
-- No starvation: while the scope's queue (pglease.slot_queue) has a head
-- (its oldest refused claim that has not lapsed) other than this holder,
-- first refused less than 30 seconds ago, a claim must also leave room for
-- the head's units, unless the head asks for more than the capacity this
-- claim sees, or, for a claim of another role than the head's, for more
-- than that capacity less the units the head's own role holds live. So a claim of k units that
-- is head gets in at its first claim after k units are free, and no claim
-- registered after it takes them; it becomes head once every claim
-- refused before it has claimed or lapsed.
-- Raises PGL06 (nothing changes) when p_units exceeds that smallest
-- capacity: such a claim could never succeed while those holders live.
-- A holder (p_holder of the caller's role) that already has a live slot gets
-- it back, re-pinned to p_now + p_ttl (same fence, capacity and units,
-- whatever p_units says). p_reentrant false says that the caller, holding
-- the scope lock, found no slot row of the holder's in the scope (live or
-- not yet released) before it read p_now, so none is live at p_now (only
-- a claim starts a tenure), and skips that step. p_counted is the scope's
-- counter as the caller read it under the lock, and p_queued whether the
-- scope's queue had an entry then (either NULL: read here).
-- Otherwise it takes a slot numbered up to p_capacity whose tenure is
-- over (fence + 1): one that ended since the scope was last looked at, in
-- place (it stays counted: one row written), else the lowest-numbered slot
-- not counted, else it creates the next slot number (fence floor + 1, see
-- pglease.purge).
-- The units in use are counted, not read: first the counted slots whose
-- check_at passed and that ended by p_now are un-counted, and then the
-- counted slots are exactly those in use, their units are the scope's
-- counter, their smallest capacity the first entry of
-- slots_counted_capacity_idx. Every step is an index read: the cost grows
-- neither with the slots in use nor with p_capacity.
CREATE OR REPLACE FUNCTION pglease._slot_claim_locked(
    p_scope text, p_holder text, p_capacity integer, p_units integer,
    p_now timestamptz, p_ttl interval, p_counted integer, p_reentrant boolean,
    p_queued boolean,
    OUT claimed boolean, OUT slot integer, OUT fence bigint, OUT units integer,
    OUT in_use integer, OUT retry_in interval)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_queued boolean;
    v_role   text := session_user::text;
    v_count  integer;
    v_cap    integer;
    v_gone   integer;
    v_take   integer;
    v_tunits integer;
    v_more   boolean;
    v_best   timestamptz;
    v_head   integer;
    v_hrole  text;
    v_own    integer := 0;
    v_since  timestamptz;
    v_mine   boolean;
    v_reserve integer;
    v_check  timestamptz;
    v_end    timestamptz;
BEGIN
    v_count := p_counted;
    v_queued := p_queued;
    IF v_count IS NULL OR v_queued IS NULL THEN
        SELECT sc.counted INTO v_count FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope;
        v_queued := EXISTS (SELECT 1 FROM pglease.slot_queue AS q WHERE q.scope = p_scope);
    END IF;
    in_use := v_count;
    claimed := false;

    -- The outer statement finds the slot by its scope, never by the holder
    -- (compared with IS NOT DISTINCT FROM, as in pglease.renew).
    -- Re-entrant: our own live slot comes back (it is counted).
    IF p_reentrant THEN
        UPDATE pglease.slots AS s
        SET expires_at = p_now + p_ttl, holder_role = v_role,
            check_at = least(s.check_at, p_now + p_ttl)
        WHERE (s.scope, s.slot) = (
                SELECT o.scope, o.slot FROM pglease.slots AS o
                WHERE o.holder = p_holder AND o.scope = p_scope AND o.expires_at > p_now
                  AND coalesce(o.holder_role = v_role, true)
                ORDER BY o.slot LIMIT 1)
          AND s.holder IS NOT DISTINCT FROM p_holder AND s.expires_at > p_now
        RETURNING s.slot::integer, s.fence::bigint, s.units::integer INTO slot, fence, units;
        IF FOUND THEN
            claimed := true;
            RETURN; -- nothing was un-counted: in_use is the counter
        END IF;
    END IF;

    -- A counted slot that ended, to take again in place.
    -- v_more: whether any other counted slot ended (read with it, so that
    -- the un-count below, a costlier statement, runs only when it has work;
    -- ORDER BY and LIMIT keep it a range of slots_counted_check_idx, where
    -- the generic plan of an EXISTS may scan the whole table).
    SELECT s.slot::integer, s.units::integer,
           (SELECT o.slot FROM pglease.slots AS o
            WHERE o.scope = p_scope AND o.counted AND o.check_at <= p_now
              AND o.expires_at <= p_now AND o.slot <> s.slot
            ORDER BY o.check_at LIMIT 1) IS NOT NULL
    INTO v_take, v_tunits, v_more
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.counted AND s.check_at <= p_now
      AND s.expires_at <= p_now AND s.slot <= p_capacity
    ORDER BY s.check_at LIMIT 1;
    -- Every other counted slot that ended by p_now is un-counted. The
    -- update waits for a renewal in flight of the row (which checked the
    -- tenure live before it ended) and then reads the row as renewed and
    -- leaves it; a renewal that comes later finds the tenure over on its
    -- own clock, without waiting. A slot that is still live is never
    -- written here (a claim locks no live tenure, so an open claiming
    -- transaction delays no renewal): one renewed since its check_at
    -- passed is only read, until its holder's renewal moves check_at
    -- (see pglease.renew_slot).
    IF v_take IS NULL OR v_more THEN
        WITH gone AS (
            UPDATE pglease.slots AS s
            SET counted = false
            WHERE s.scope = p_scope AND s.counted AND s.check_at <= p_now
              AND s.expires_at <= p_now AND s.slot IS DISTINCT FROM v_take
            RETURNING s.units)
        SELECT coalesce(sum(g.units), 0)::integer INTO v_gone FROM gone AS g;
        in_use := in_use - v_gone;
    END IF;

    SELECT min(s.capacity) INTO v_cap
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.counted AND s.slot IS DISTINCT FROM v_take;

    -- No starvation: the head of the scope's queue (the oldest refused
    -- claim that has not lapsed, see pglease.slot_queue) keeps room for its
    -- units against every other claim, unless it could not fit anyway: it
    -- asks for more than the capacity, or, against a claim of another
    -- role, for more than the capacity less the units the head's own role
    -- holds live (which its role, not the caller's, must release first: a
    -- role cannot make its waiter keep room from other roles with its own
    -- units). Within one role the head keeps its room whatever that role
    -- holds: a fleet's big claim is not starved by its own small ones. An
    -- empty queue (the common case) costs the caller's one index probe.
    -- Lapsed entries are deleted, but for those
    -- locked by a refusal in flight, which are skipped: a claim never
    -- waits for a refused claim's transaction.
    IF v_queued THEN
        DELETE FROM pglease.slot_queue AS q
        WHERE q.ctid = ANY (ARRAY(SELECT d.ctid FROM pglease.slot_queue AS d
                                  WHERE d.scope = p_scope AND d.until <= p_now
                                  FOR UPDATE SKIP LOCKED));
        SELECT q.units, q.holder_role, q.holder = p_holder AND q.holder_role = v_role, q.since
        INTO v_head, v_hrole, v_mine, v_since
        FROM pglease.slot_queue AS q
        WHERE q.scope = p_scope AND q.until > p_now
        ORDER BY q.since, q.holder, q.holder_role LIMIT 1;
        -- A head keeps room for 30 seconds from its first refusal at most:
        -- then it waits as any claim, and the entries behind it, in order,
        -- get their turn (a claim refused after it is head only once it
        -- claimed or lapsed).
        IF v_since <= p_now - interval '30 seconds' THEN
            v_head := NULL;
        END IF;
        IF v_head IS NOT NULL AND v_hrole <> v_role THEN
            v_own := coalesce((SELECT sum(s.units)::integer FROM pglease.slots AS s
                               WHERE s.scope = p_scope AND s.counted
                                 AND s.holder_role = v_hrole AND s.expires_at > p_now), 0);
        END IF;
    END IF;
    v_reserve := CASE WHEN v_mine OR v_head + v_own > least(p_capacity, v_cap) THEN 0
                      ELSE coalesce(v_head, 0) END;

    IF v_take IS NOT NULL THEN
        IF in_use - v_tunits + p_units + v_reserve <= least(p_capacity, v_cap) THEN
            UPDATE pglease.slots AS s
            SET holder = p_holder, holder_role = v_role, capacity = p_capacity,
                units = p_units, fence = s.fence + 1, acquired_at = p_now,
                expires_at = p_now + p_ttl, check_at = p_now + p_ttl
            WHERE s.scope = p_scope AND s.slot = v_take AND s.counted
              AND s.expires_at <= p_now
            RETURNING s.slot::integer, s.fence::bigint, s.units::integer INTO slot, fence, units;
            claimed := FOUND;
        END IF;
        IF claimed THEN
            in_use := in_use - v_tunits + p_units;
        ELSE
            -- Not taken: un-count it, or (renewed meanwhile) count it live.
            UPDATE pglease.slots AS s SET counted = false
            WHERE s.scope = p_scope AND s.slot = v_take AND s.counted
              AND s.expires_at <= p_now;
            IF FOUND THEN
                in_use := in_use - v_tunits;
            ELSE
                SELECT min(s.capacity) INTO v_cap
                FROM pglease.slots AS s WHERE s.scope = p_scope AND s.counted;
            END IF;
        END IF;
    END IF;

    IF NOT claimed THEN
        IF p_units > v_cap THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL06',
                MESSAGE = format('pglease.claim_slot: %s units do not fit in scope %L: its live holders claimed it with capacity %s',
                                 p_units, p_scope, v_cap),
                HINT = 'Claim at most that many units, or wait until those holders are gone.';
        END IF;
        -- A pass fails only when the slot it chose changed under it.
        FOR attempt IN 1..10 LOOP
            EXIT WHEN in_use + p_units + v_reserve > least(p_capacity, v_cap);
            UPDATE pglease.slots AS s
            SET holder = p_holder, holder_role = v_role, capacity = p_capacity,
                units = p_units, fence = s.fence + 1, acquired_at = p_now,
                expires_at = p_now + p_ttl, check_at = p_now + p_ttl, counted = true
            WHERE (s.scope, s.slot) = (
                    SELECT f.scope, f.slot FROM pglease.slots AS f
                    WHERE f.scope = p_scope AND NOT f.counted
                      AND f.slot <= p_capacity AND f.expires_at <= p_now
                    ORDER BY f.slot LIMIT 1)
              AND s.expires_at <= p_now AND NOT s.counted
            RETURNING s.slot::integer, s.fence::bigint, s.units::integer INTO slot, fence, units;
            IF NOT FOUND THEN
                SELECT coalesce(max(s.slot), 0) + 1 INTO slot
                FROM pglease.slots AS s WHERE s.scope = p_scope;
                IF slot <= p_capacity THEN
                    -- A new slot starts above the fence floor (see
                    -- pglease.purge, which takes the scope lock we hold, so
                    -- this statement sees the floor of any purge of the scope).
                    INSERT INTO pglease.slots AS s (scope, slot, holder, fence, acquired_at, expires_at,
                                                    holder_role, capacity, counted, units, check_at,
                                                    created_by)
                    VALUES (p_scope, slot, p_holder,
                            (SELECT f.last_value FROM pglease.slot_fence_floor AS f) + 1,
                            p_now, p_now + p_ttl, v_role, p_capacity, true, p_units, p_now + p_ttl,
                            CASE WHEN pglease._check_quota(NULL, 'slots') THEN v_role END)
                    ON CONFLICT ON CONSTRAINT slots_pkey DO NOTHING
                    RETURNING s.fence::bigint, s.units::integer INTO fence, units;
                END IF;
            END IF;
            IF fence IS NOT NULL THEN
                claimed := true;
                in_use := in_use + p_units;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    IF in_use IS DISTINCT FROM v_count THEN
        UPDATE pglease.slot_scopes AS sc SET counted = in_use WHERE sc.scope = p_scope;
    END IF;
    IF claimed THEN
        IF v_queued THEN
            DELETE FROM pglease.slot_queue AS q
            WHERE q.scope = p_scope AND q.holder = p_holder AND q.holder_role = v_role;
        END IF;
        RETURN;
    END IF;
    slot := NULL;
    fence := NULL;
    units := NULL;
    -- On p_now, the reading that decided: every counted slot ends after it
    -- (those that ended by then were un-counted above). Read in check_at
    -- order, which is at most each end: once check_at reaches the earliest
    -- end seen, no later slot ends earlier. So retry_in > 0 when any is
    -- counted, and p_now + retry_in is exactly the earliest end; the slots
    -- read are those renewed since their check_at passed, and the first
    -- one not renewed since.
    FOR v_check, v_end IN
        SELECT s.check_at, s.expires_at FROM pglease.slots AS s
        WHERE s.scope = p_scope AND s.counted
        ORDER BY s.check_at
    LOOP
        EXIT WHEN v_check >= v_best;
        v_best := least(v_best, v_end);
    END LOOP;
    retry_in := v_best - p_now;
    retry_in := greatest(coalesce(retry_in, interval '0'), interval '0');
END
$$;

-- _slot_queue(p_scope, p_holder, p_units, p_now, p_retry_in): a claim of
-- p_units refused on the clock p_now joins the scope's queue, or keeps its
-- place in it (since stays that of its first refusal; the units are those
-- of this claim). Its entry lapses unless the holder claims again within
-- p_retry_in or 5 seconds, whichever is less, plus 2 seconds (runslots
-- claims again at least every 5 seconds while it waits). The caller holds
-- no scope lock (a refused claim rolled it back): only this role's entry
-- is written, which no other role's claim waits for.
CREATE OR REPLACE FUNCTION pglease._slot_queue(
    p_scope text, p_holder text, p_units integer, p_now timestamptz, p_retry_in interval)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pglease.slot_queue AS q
                   WHERE q.scope = p_scope AND q.holder = p_holder AND q.holder_role = session_user) THEN
        PERFORM pglease._check_quota(NULL, 'queue');
    END IF;
    INSERT INTO pglease.slot_queue AS q (scope, holder, holder_role, units, since, until)
    VALUES (p_scope, p_holder, session_user::text, p_units, p_now,
            p_now + least(p_retry_in, interval '5 seconds') + interval '2 seconds')
    ON CONFLICT ON CONSTRAINT slot_queue_pkey
    DO UPDATE SET units = excluded.units, until = excluded.until;
END
$$;

-- _slot_wake(p_scope, p_counted): the NOTIFY of a release in p_scope, once
-- the caller (pglease.release_slot) has decided that one is due. With
-- p_counted, the caller took the scope lock before its release because the
-- scope's queue had a waiter (a blocking claim), and the payload has one
-- more field (0.3.0): "free", the units the release leaves free as it
-- counts them (the smallest capacity of the counted tenures, the released
-- one too, less the units of the tenures live on its clock, read from the
-- scope's counter and the counted rows whose check_at passed: index
-- ranges). A waiter of k units has room only when k <= free; a client
-- that ignores the field wakes at each notification. Only a release that
-- held the scope lock from before its own change may count: two releases
-- counting at once would each miss the other's, not yet committed, both
-- say too few units free, and a waiter that needs them all would hear of
-- none (a lost wake-up). Without p_counted the payload has no "free", which wakes every
-- waiter.
CREATE OR REPLACE FUNCTION pglease._slot_wake(p_scope text, p_counted boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_now   timestamptz := clock_timestamp();
    v_used  integer;
    v_ended integer;
    v_cap   integer;
BEGIN
    IF NOT p_counted THEN
        PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
            'kind', 'slot', 'event', 'released', 'name', p_scope)::text);
        RETURN;
    END IF;
    SELECT sc.counted INTO v_used FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope;
    SELECT coalesce(sum(s.units), 0)::integer INTO v_ended
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.counted AND s.check_at <= v_now AND s.expires_at <= v_now;
    SELECT min(s.capacity) INTO v_cap
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.counted;
    PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
        'kind', 'slot', 'event', 'released', 'name', p_scope,
        'free', greatest(coalesce(v_cap, 0) - (coalesce(v_used, 0) - v_ended), 0))::text);
END
$$;

-- _slot_retry_in(p_scope, p_now, p_retry_in): the retry_in of a claim
-- refused on the clock p_now, once its scope lock is rolled back and the
-- scope's row is locked FOR KEY SHARE (see pglease.claim_slot): p_retry_in,
-- or less when a tenure of the scope ended (was released) after p_now,
-- in the moment between the two locks: p_now + the result is the
-- earliest end, as a refusal's retry_in always is. Reads the counted rows
-- whose check_at passed (a release sets it to the release): an index range.
CREATE OR REPLACE FUNCTION pglease._slot_retry_in(p_scope text, p_now timestamptz, p_retry_in interval)
RETURNS interval
LANGUAGE sql VOLATILE
AS $$
    SELECT coalesce(least(p_retry_in, min(s.expires_at) - p_now), p_retry_in)
    FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.counted AND s.check_at <= clock_timestamp()
      AND s.expires_at > p_now AND s.expires_at <= clock_timestamp()
$$;
