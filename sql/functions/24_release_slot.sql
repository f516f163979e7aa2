-- pglease.release_slot(p_scope, p_slot, p_holder, p_fence): give a live slot
-- back early.
--
-- Compare-and-release, exactly like pglease.release: released = true when
-- (p_holder, p_fence) of the caller's role (session_user) held the slot
-- live (the tenure ends at the server clock read after any wait for the
-- row lock, see pglease._slot_lock; waiters
-- hear it by a NOTIFY on 'pglease', see pglease._slot_wake); otherwise released
-- = false and nothing changes. The slot row keeps its fence, and stays
-- counted in the scope's units in use until the next claim in the scope
-- (which takes the scope lock; a release waits for it only while the
-- scope's queue has a waiter, see below) finds it over on its
-- clock (the release sets check_at to its end, so that the claim looks at
-- it; see pglease._slot_claim_locked) and un-counts it or takes it again.
-- Raises 22004 for NULL, 22023 for a bad scope, holder, slot or negative
-- fence; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.release_slot(
    p_scope text, p_slot integer, p_holder text, p_fence bigint,
    OUT released boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role text := session_user::text;
    v_counted boolean := false;
    v_wake    boolean; -- notify: a claim holds the scope lock, or a waiter is registered
    v_now  timestamptz;
    v_tid  tid;
BEGIN
    IF NOT pglease._slot_ok(p_scope, p_slot, p_holder, p_fence) THEN
        PERFORM pglease._check_slot('release_slot', p_scope, p_slot, p_holder, p_fence);
    END IF;

    -- The common release, on a scope whose queue is empty, takes both of
    -- its locks in one statement, each without waiting: the caller's live
    -- slot, then the scope's row (a joined row's tables are locked in the
    -- order of the locking clauses, so a slot locked by someone else is
    -- skipped before the scope's row is tried, and no wait below holds the
    -- scope lock). With both, no claim is in flight in the scope (a refused
    -- claim keeps a FOR KEY SHARE lock, which this FOR UPDATE does not get
    -- either). The queue is probed before any lock: a release of a queued
    -- scope locks nothing here, and takes the scope's lock before its
    -- slot's below, as claims do; had it locked its slot here, its wait for
    -- the scope's lock could close a cycle with a claim that waits for the
    -- slot. A waiter queued while this statement runs holds the scope row
    -- FOR KEY SHARE until it commits, so the statement finds no row and the
    -- release goes the other way, which notifies it.
    SELECT s.ctid INTO v_tid
    FROM pglease.slots AS s, pglease.slot_scopes AS sc
    WHERE s.scope = p_scope AND s.slot = p_slot
      AND pglease._live_tenure(s.holder, s.holder_role, s.fence, s.expires_at,
                               p_holder, v_role, p_fence, clock_timestamp())
      AND sc.scope = p_scope
      AND NOT EXISTS (SELECT 1 FROM pglease.slot_queue AS q WHERE q.scope = p_scope)
    FOR NO KEY UPDATE OF s SKIP LOCKED
    FOR UPDATE OF sc SKIP LOCKED;
    IF FOUND THEN
        v_wake := false;
    ELSE
        -- While the scope's queue has a waiter, a release says how many
        -- units it leaves free (pglease._slot_wake), and it must count
        -- them alone: it takes the scope lock before its change, as claims
        -- do (scope, then slot: no deadlock with them), so that the
        -- releases of a queued scope count one after another, each seeing
        -- those before it. Only the caller's live tenure takes it (read
        -- here without a lock), so a stranger's call holds up no claim.
        -- Any other release notifies without a count, which wakes every
        -- waiter. One statement: the queue is looked at first (a one-time
        -- filter), the slot only when it has a waiter.
        PERFORM 1 FROM pglease.slots AS s
        WHERE EXISTS (SELECT 1 FROM pglease.slot_queue AS q WHERE q.scope = p_scope)
          AND s.scope = p_scope AND s.slot = p_slot
          AND pglease._live_tenure(s.holder, s.holder_role, s.fence, s.expires_at,
                                   p_holder, v_role, p_fence, clock_timestamp());
        IF FOUND THEN
            PERFORM 1 FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope FOR NO KEY UPDATE;
            v_counted := true;
        END IF;
        v_tid := pglease._slot_lock(p_scope, p_slot, p_holder, p_fence, v_role);
        IF v_tid IS NULL THEN
            released := false;
            RETURN; -- not the caller's live tenure
        END IF;
        IF NOT v_counted THEN
            -- The lock claims hold while they count (see pglease._wake),
            -- taken before the change without waiting: when a claim holds
            -- it, notify whether or not someone registered; otherwise only
            -- when someone did, read with the update: its snapshot is taken
            -- after this lock, so it sees the registration of a refused
            -- claim that held the lock until just before.
            PERFORM 1 FROM pglease.slot_scopes AS sc WHERE sc.scope = p_scope
            FOR UPDATE SKIP LOCKED;
            v_wake := NOT FOUND;
        END IF;
    END IF;
    v_now := clock_timestamp();
    UPDATE pglease.slots AS s
    SET holder = NULL, expires_at = least(s.expires_at, v_now),
        check_at = least(s.check_at, v_now)
    WHERE s.ctid = v_tid -- the locked row version stays where it is
    RETURNING v_counted OR v_wake
              OR EXISTS (SELECT FROM pglease.waiters AS w
                         WHERE w.kind = 'slot' AND w.name = p_scope
                           AND w.until > clock_timestamp())
    INTO v_wake;
    released := true;
    IF v_wake THEN
        PERFORM pglease._slot_wake(p_scope, v_counted);
    END IF;
END
$$;
