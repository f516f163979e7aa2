-- The rules of tenures, each written once. Internal: not granted to
-- clients. The two predicates are SQL functions the planner inlines into
-- the statements that use them (same plans as the expression written out);
-- the two lock functions are the one way a call that changes a caller's
-- live tenure locks its row.

-- _takeable(p_cur, p_cur_role, p_expires, p_to, p_to_role, p_for,
--           p_holder, p_role, p_now): whether a lease whose row says
-- holder p_cur of role p_cur_role until p_expires (release requested for
-- p_to of p_to_role for p_for after that end) is holder p_holder of role
-- p_role's to take at p_now: free or over and not reserved for someone
-- else (see pglease._reserved), or p_holder's own live tenure (a tenure
-- from before 0.2.0, without a role, counts as the caller's). Never NULL
-- for a lease row. pglease.acquire and pglease.acquire_batch grant on it
-- and refuse on its negation. Pass p_now as a variable, not
-- clock_timestamp(): it is read three times, and a volatile argument read
-- more than once keeps the planner from inlining the function.
CREATE OR REPLACE FUNCTION pglease._takeable(
    p_cur text, p_cur_role text, p_expires timestamptz,
    p_to text, p_to_role text, p_for interval,
    p_holder text, p_role text, p_now timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT ((p_cur IS NULL OR p_expires <= p_now)
            AND NOT pglease._reserved(p_expires, p_to, p_to_role, p_for, p_holder, p_role, p_now))
        OR (p_cur IS NOT DISTINCT FROM p_holder AND coalesce(p_cur_role = p_role, true)
            AND p_expires > p_now)
$$;

-- _live_tenure(p_cur, p_cur_role, p_cur_fence, p_expires, p_holder, p_role,
--              p_fence, p_now): whether a lease or slot row is the live
-- tenure (p_holder, p_fence) of role p_role at p_now: the compare of every
-- compare-and-swap (renew, release, set_value, assert_held, their slot
-- forms). A tenure without a role (from before 0.2.0) is bound to the
-- role of the first call that changes it. The holder is compared with IS
-- NOT DISTINCT FROM, which no holder index serves: a statement that adds
-- the key's equality finds the row by its primary key, whatever the
-- statistics say. Declared VOLATILE so that it is inlined also where p_now
-- is clock_timestamp().
CREATE OR REPLACE FUNCTION pglease._live_tenure(
    p_cur text, p_cur_role text, p_cur_fence bigint, p_expires timestamptz,
    p_holder text, p_role text, p_fence bigint, p_now timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT p_cur IS NOT DISTINCT FROM p_holder AND p_cur_fence = p_fence
       AND coalesce(p_cur_role = p_role, true) AND p_expires > p_now
$$;

-- _lease_lock(p_name, p_holder, p_fence, p_role): the row of lease p_name
-- locked FOR NO KEY UPDATE when it is the live tenure (p_holder, p_fence)
-- of role p_role, or NULL, with no lock kept, when it is not.
-- Returns the locked row version's ctid (it stays where it is until the
-- caller's transaction ends: update it by ctid). A row nobody else has
-- locked is locked at once; a row locked by a transaction in flight (the
-- holder's own fenced write or renewal, a takeover, a purge) is waited for,
-- in a subtransaction, and then judged live or not on the clock read after
-- the wait: a lock taken for a tenure that ended meanwhile goes with the
-- subtransaction, so it never delays a takeover or another holder's
-- renewals. A row that is not the caller's live tenure is not waited for.
CREATE OR REPLACE FUNCTION pglease._lease_lock(
    p_name text, p_holder text, p_fence bigint, p_role text)
RETURNS tid
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_tid     tid;
    v_expires timestamptz;
BEGIN
    SELECT l.ctid INTO v_tid FROM pglease.leases AS l
    WHERE l.name = p_name
      AND pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                               p_holder, p_role, p_fence, clock_timestamp())
    FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN v_tid;
    END IF;
    PERFORM 1 FROM pglease.leases AS l
    WHERE l.name = p_name
      AND pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                               p_holder, p_role, p_fence, clock_timestamp());
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    BEGIN
        SELECT l.ctid, l.expires_at INTO v_tid, v_expires FROM pglease.leases AS l
        WHERE l.name = p_name
          AND pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                                   p_holder, p_role, p_fence, '-infinity')
        FOR NO KEY UPDATE;
        IF NOT FOUND OR v_expires <= clock_timestamp() THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: ended meanwhile';
        END IF;
        RETURN v_tid;
    EXCEPTION WHEN SQLSTATE 'PGL03' THEN
        RETURN NULL;
    END;
END
$$;

-- _slot_lock(p_scope, p_slot, p_holder, p_fence, p_role): as
-- pglease._lease_lock, for slot p_slot of scope p_scope.
CREATE OR REPLACE FUNCTION pglease._slot_lock(
    p_scope text, p_slot integer, p_holder text, p_fence bigint, p_role text)
RETURNS tid
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_tid     tid;
    v_expires timestamptz;
BEGIN
    SELECT s.ctid INTO v_tid FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.slot = p_slot
      AND pglease._live_tenure(s.holder, s.holder_role, s.fence, s.expires_at,
                               p_holder, p_role, p_fence, clock_timestamp())
    FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN v_tid;
    END IF;
    PERFORM 1 FROM pglease.slots AS s
    WHERE s.scope = p_scope AND s.slot = p_slot
      AND pglease._live_tenure(s.holder, s.holder_role, s.fence, s.expires_at,
                               p_holder, p_role, p_fence, clock_timestamp());
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    BEGIN
        SELECT s.ctid, s.expires_at INTO v_tid, v_expires FROM pglease.slots AS s
        WHERE s.scope = p_scope AND s.slot = p_slot
          AND pglease._live_tenure(s.holder, s.holder_role, s.fence, s.expires_at,
                                   p_holder, p_role, p_fence, '-infinity')
        FOR NO KEY UPDATE;
        IF NOT FOUND OR v_expires <= clock_timestamp() THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: ended meanwhile';
        END IF;
        RETURN v_tid;
    EXCEPTION WHEN SQLSTATE 'PGL03' THEN
        RETURN NULL;
    END;
END
$$;
