-- pglease.claim_and_take(p_scope, p_holder, p_capacity, p_ttl, p_units,
-- p_keys, p_costs): claim p_units units of slot scope p_scope (as
-- pglease.claim_slot with p_wait false) and take p_costs[i] tokens of each
-- rate-limited key p_keys[i] (as pglease.take; p_costs NULL: 1 each), all
-- or nothing (0.4.0, #51, docs/limits.md). The claim goes first, through
-- pglease.claim_slot itself; then the keys, narrowest first (the longest
-- key first, ties in byte order: one order for every caller, so that two
-- such calls never deadlock on each other's keys). One row:
--   * everything granted: claimed = true, slot, fence, expires_at,
--     expires_in and units as claim_slot returns them; refused_by and
--     retry_in NULL. The tokens are spent, all in the caller's
--     transaction.
--   * the claim refused: claimed = false, refused_by = p_scope, retry_in =
--     claim_slot's; the claim's refusal is claim_slot's own (the caller is
--     registered as a waiter of the scope); no token is spent.
--   * a key refused: claimed = false, refused_by = that key, retry_in =
--     its take's retry_in; the claim (a new slot, or the re-pinned expiry
--     of the holder's live one) and the keys taken before it are rolled
--     back (a subtransaction): nothing changes.
--   slot, fence, expires_at, expires_in and units are NULL when refused.
-- Locks: those of claim_slot and of pglease.take, held until the caller's
-- transaction ends when granted; a refusal keeps only the lock a refused
-- claim keeps (FOR KEY SHARE on the scope, which no claim waits for).
-- Clock: each part decides on its own reading of the server's clock.
-- Every argument is checked before anything is locked: raises 22004 for
-- NULL (p_keys, one of them, or one of p_costs); 22023 for a p_keys of 0
-- or more than 64 keys, the same key twice, a p_costs of another length,
-- and for what claim_slot and take refuse (scope, holder, key, capacity,
-- units, TTL, cost); 42501 for a scope or key under a prefix bound to a
-- role the caller is not a member of; PGL06 as claim_slot; PGL20 for a
-- key with no limit; PGL21 for a cost more than its key's burst; 53400 as
-- claim_slot and take; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.claim_and_take(
    p_scope text, p_holder text, p_capacity integer, p_ttl interval, p_units integer,
    p_keys text[], p_costs integer[] DEFAULT NULL,
    OUT claimed boolean, OUT slot integer, OUT fence bigint,
    OUT expires_at timestamptz, OUT expires_in interval, OUT units integer,
    OUT refused_by text, OUT retry_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key   text;
    v_cost  integer;
    v_ok    boolean;
    v_retry interval;
BEGIN
    PERFORM pglease._check_text('claim_and_take', 'p_scope', p_scope);
    PERFORM pglease._check_text('claim_and_take', 'p_holder', p_holder);
    PERFORM pglease._check_int('claim_and_take', 'p_capacity', p_capacity, 1, 1000000);
    PERFORM pglease._check_int('claim_and_take', 'p_units', p_units, 1, p_capacity);
    PERFORM pglease._check_ttl('claim_and_take', p_ttl);
    PERFORM pglease._check_owner('claim_and_take', 'p_scope', p_scope);
    PERFORM pglease._limit_keys('claim_and_take', 'p_keys', p_keys, 'p_costs', p_costs);

    BEGIN
        SELECT c.claimed, c.slot, c.fence, c.expires_at, c.expires_in, c.units, c.retry_in
        INTO claimed, slot, fence, expires_at, expires_in, units, retry_in
        FROM pglease.claim_slot(p_scope, p_holder, p_capacity, p_ttl, p_units, false) AS c;
        IF NOT claimed THEN
            -- claim_slot's refusal stands as it is (its lock and waiter
            -- registration): this block ends normally.
            refused_by := p_scope;
        ELSE
            FOR v_key, v_cost IN
                SELECT k.key, k.cost FROM pglease._limit_order(p_keys, p_costs) AS k
            LOOP
                SELECT t.allowed, t.retry_in INTO v_ok, v_retry
                FROM pglease._limit_take('claim_and_take', v_key, v_cost) AS t;
                IF NOT v_ok THEN
                    refused_by := v_key;
                    RAISE EXCEPTION USING ERRCODE = 'PGL02', MESSAGE = 'pglease: refused';
                END IF;
            END LOOP;
        END IF;
    EXCEPTION WHEN SQLSTATE 'PGL02' THEN
        -- A key refused: the claim and the keys taken go with the
        -- subtransaction.
        claimed := false;
        retry_in := v_retry;
    END;
    IF NOT claimed THEN
        slot := NULL;
        fence := NULL;
        expires_at := NULL;
        expires_in := NULL;
        units := NULL;
    END IF;
END
$$;
