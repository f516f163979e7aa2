-- The rules of tenures, each written once. Internal: not granted to
-- clients. The predicates are SQL functions the planner inlines into
-- the statements that use them (same plans as the expression written out).
-- The one way a call that changes a caller's live tenure locks its row is
-- in 03_row_locks.sql, generated from sql/templates/row_lock.sql.

-- _free(p_cur, p_expires, p_to, p_to_role, p_for, p_holder, p_role, p_now):
-- whether a lease whose row says holder p_cur until p_expires (release
-- requested for p_to of p_to_role for p_for after that end) is free for
-- holder p_holder of role p_role at p_now: no live tenure, and not
-- reserved for someone else (see pglease._reserved). A shard group takes
-- its unowned shards on it.
CREATE OR REPLACE FUNCTION pglease._free(
    p_cur text, p_expires timestamptz,
    p_to text, p_to_role text, p_for interval,
    p_holder text, p_role text, p_now timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT (p_cur IS NULL OR p_expires <= p_now)
       AND NOT pglease._reserved(p_expires, p_to, p_to_role, p_for, p_holder, p_role, p_now)
$$;

-- _takeable(p_cur, p_cur_role, p_expires, p_to, p_to_role, p_for,
--           p_holder, p_role, p_now): whether a lease whose row says
-- holder p_cur of role p_cur_role until p_expires (release requested for
-- p_to of p_to_role for p_for after that end) is holder p_holder of role
-- p_role's to take at p_now: free for it (pglease._free), or p_holder's
-- own live tenure (a tenure from before 0.2.0, without a role, counts as
-- the caller's). Never NULL for a lease row. pglease.acquire and
-- pglease.acquire_batch grant on it and refuse on its negation. Pass p_now
-- as a variable, not clock_timestamp(): it is read several times, and a
-- volatile argument read more than once keeps the planner from inlining
-- the function.
CREATE OR REPLACE FUNCTION pglease._takeable(
    p_cur text, p_cur_role text, p_expires timestamptz,
    p_to text, p_to_role text, p_for interval,
    p_holder text, p_role text, p_now timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT pglease._free(p_cur, p_expires, p_to, p_to_role, p_for, p_holder, p_role, p_now)
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
