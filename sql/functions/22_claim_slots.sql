-- pglease.claim_slots(p_holder, p_scopes, p_capacities, p_ttl, p_units,
-- p_wait): one slot of p_units[i] units in each scope p_scopes[i], all or
-- nothing; p_wait as for pglease.claim_slot (the refused scope's queue).
-- The four-argument form (0.2.0) claims one unit in each scope, p_wait
-- false.
--
-- p_scopes[i] is claimed with capacity p_capacities[i] and p_units[i]
-- units, each exactly as by pglease.claim_slot (the same role binding and
-- one capacity per scope), all on the clock read once every scope lock is
-- granted. Returns one row:
--   * every scope admitted the holder: claimed = true, slots[i], fences[i]
--     and in_use[i] (units in use) per scope in the order given,
--     refused_scope NULL,
--     expires_at = now + p_ttl for all of them.
--   * some scope was full: claimed = false, refused_scope names the first
--     full scope in the order given, refused_in_use its units in use and
--     retry_in its earliest live slot's end minus now (> 0);
--     slots, fences and in_use are empty arrays, expires_at and expires_in
--     NULL; nothing is held or changed in any scope (claims already made in
--     this call are rolled back, and the scope locks with them); the holder
--     is registered as a waiter of the refused scope (see pglease._wake).
-- Scope locks are taken in one global order (byte order of the scope), so
-- concurrent multi-scope claims cannot deadlock each other. As with
-- pglease.claim_slot, a granted call keeps them until the caller's
-- transaction ends; a refused one keeps none that a claim waits for.
-- Raises 22004 for NULL arrays, elements or arguments; 22023 for arrays of
-- different lengths, empty or longer than 64, duplicate scopes, or an element
-- out of claim_slot's ranges; 42501 for a scope under a prefix another
-- role owns, as claim_slot; PGL06 as claim_slot, for the first scope in
-- the order given where it applies; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.claim_slots(
    p_holder text, p_scopes text[], p_capacities integer[], p_ttl interval, p_units integer[],
    p_wait boolean DEFAULT false,
    OUT claimed boolean, OUT slots integer[], OUT fences bigint[],
    OUT in_use integer[], OUT refused_scope text, OUT refused_in_use integer,
    OUT expires_at timestamptz, OUT expires_in interval, OUT retry_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off -- as pglease.claim_slot
SET plan_cache_mode = force_generic_plan -- as pglease.claim_slot
AS $$
DECLARE
    v_now   timestamptz;
    v_ttl   interval;
    v_n     integer;
    v_scope text;
    v_claim record;
    v_role  text := session_user::text;
    v_mine  boolean;
BEGIN
    PERFORM pglease._check_text('claim_slots', 'p_holder', p_holder);
    IF p_scopes IS NULL OR p_capacities IS NULL OR p_units IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.claim_slots: %s must not be NULL',
                             CASE WHEN p_scopes IS NULL THEN 'p_scopes'
                                  WHEN p_capacities IS NULL THEN 'p_capacities' ELSE 'p_units' END),
            HINT = 'Pass one scope, one capacity and one unit count per slot to claim.';
    END IF;
    v_n := coalesce(cardinality(p_scopes), 0);
    IF v_n NOT BETWEEN 1 AND 64 OR v_n <> coalesce(cardinality(p_capacities), 0)
       OR v_n <> coalesce(cardinality(p_units), 0)
       OR array_ndims(p_scopes) <> 1 OR array_ndims(p_capacities) <> 1
       OR array_ndims(p_units) <> 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.claim_slots: p_scopes, p_capacities and p_units must be one-dimensional arrays of the same length, 1 to 64, got %s, %s and %s',
                             coalesce(cardinality(p_scopes), 0), coalesce(cardinality(p_capacities), 0),
                             coalesce(cardinality(p_units), 0)),
            HINT = 'Pass one capacity and one unit count per scope.';
    END IF;
    FOR i IN 1..v_n LOOP
        PERFORM pglease._check_text('claim_slots', format('p_scopes[%s]', i), p_scopes[array_lower(p_scopes, 1) + i - 1]);
        PERFORM pglease._check_int('claim_slots', format('p_capacities[%s]', i),
                                   p_capacities[array_lower(p_capacities, 1) + i - 1], 1, 1000000);
        PERFORM pglease._check_int('claim_slots', format('p_units[%s]', i),
                                   p_units[array_lower(p_units, 1) + i - 1], 1,
                                   p_capacities[array_lower(p_capacities, 1) + i - 1]);
    END LOOP;
    IF (SELECT count(DISTINCT s) FROM unnest(p_scopes) AS s) <> v_n THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'pglease.claim_slots: p_scopes must not repeat a scope',
            HINT = 'Name each scope once.';
    END IF;
    v_ttl := pglease._check_ttl('claim_slots', p_ttl);
    PERFORM pglease._check_flag('claim_slots', 'p_wait', p_wait);
    FOR i IN 1..v_n LOOP
        PERFORM pglease._check_owner('claim_slots', format('p_scopes[%s]', i),
                                     p_scopes[array_lower(p_scopes, 1) + i - 1]);
    END LOOP;

    in_use := array_fill(NULL::integer, ARRAY[v_n]);
    slots := array_fill(NULL::integer, ARRAY[v_n]);
    fences := array_fill(NULL::bigint, ARRAY[v_n]);
    -- A subtransaction: a refusal rolls back its locks with its changes
    -- (see claim_slot).
    BEGIN
        FOR v_scope IN SELECT s FROM unnest(p_scopes) AS s ORDER BY s COLLATE "C" LOOP
            PERFORM pglease._scope_lock(v_scope);
        END LOOP;
        -- Wait for renewals in flight of the holder's own slots (see claim_slot).
        PERFORM 1 FROM pglease.slots AS s
        WHERE s.scope = ANY (p_scopes) AND s.holder = p_holder
          AND coalesce(s.holder_role = v_role, true)
        FOR NO KEY UPDATE;
        v_mine := FOUND;
        -- The clock is read once every scope is ours (see claim_slot).
        v_now := clock_timestamp();
        FOR i IN 1..v_n LOOP
            v_scope := p_scopes[array_lower(p_scopes, 1) + i - 1];
            SELECT * INTO v_claim
            FROM pglease._slot_claim_locked(v_scope, p_holder,
                     p_capacities[array_lower(p_capacities, 1) + i - 1],
                     p_units[array_lower(p_units, 1) + i - 1], v_now, v_ttl, NULL, v_mine, NULL);
            in_use[i] := v_claim.in_use;
            IF NOT v_claim.claimed THEN
                refused_scope := v_scope;
                refused_in_use := v_claim.in_use;
                retry_in := v_claim.retry_in;
                RAISE EXCEPTION USING ERRCODE = 'PGL02', MESSAGE = 'pglease: scope full';
            END IF;
            slots[i] := v_claim.slot;
            fences[i] := v_claim.fence;
        END LOOP;
    EXCEPTION WHEN SQLSTATE 'PGL02' THEN
        claimed := false;
        slots := '{}';
        fences := '{}';
        in_use := '{}';
        -- As claim_slot: only a FOR KEY SHARE lock of the refused scope's
        -- row stays, until the caller's transaction ends.
        PERFORM 1 FROM pglease.slot_scopes AS sc WHERE sc.scope = refused_scope FOR KEY SHARE;
        retry_in := pglease._slot_retry_in(refused_scope, v_now, retry_in);
        PERFORM pglease._wait_register('slot', refused_scope, v_now + retry_in);
        IF p_wait THEN
            PERFORM pglease._slot_queue(refused_scope, p_holder,
                                        p_units[array_lower(p_units, 1) + array_position(p_scopes, refused_scope) - array_lower(p_scopes, 1)],
                                        v_now, retry_in);
        END IF;
        RETURN;
    END;
    claimed := true;
    expires_at := v_now + v_ttl;
    expires_in := v_ttl;
END
$$;
