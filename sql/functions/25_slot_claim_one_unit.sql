-- The four-argument forms of the slot claims (0.2.0), which claim one
-- unit. Apart so that each file holds one
-- form of a function, as the proxy generator reads them. The two that
-- clients call are PL/pgSQL, not SQL: PostgreSQL 15 plans a SQL function
-- that it cannot inline (SECURITY DEFINER, SET) again in every statement
-- that calls it; PL/pgSQL keeps its plans for the session.

-- pglease.claim_slot(p_scope, p_holder, p_capacity, p_ttl): the 0.2.0 form,
-- one unit: pglease.claim_slot(p_scope, p_holder, p_capacity, p_ttl, 1)
-- without its units column.
CREATE OR REPLACE FUNCTION pglease.claim_slot(
    p_scope text, p_holder text, p_capacity integer, p_ttl interval,
    OUT claimed boolean, OUT slot integer, OUT fence bigint,
    OUT expires_at timestamptz, OUT expires_in interval, OUT in_use integer,
    OUT retry_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT c.claimed, c.slot, c.fence, c.expires_at, c.expires_in, c.in_use, c.retry_in
    INTO claimed, slot, fence, expires_at, expires_in, in_use, retry_in
    FROM pglease.claim_slot(p_scope, p_holder, p_capacity, p_ttl, 1, false) AS c;
END
$$;

-- pglease.claim_slots(p_holder, p_scopes, p_capacities, p_ttl): the 0.2.0
-- form, one unit in each scope: pglease.claim_slots(p_holder, p_scopes,
-- p_capacities, p_ttl, units) with every unit count 1.
CREATE OR REPLACE FUNCTION pglease.claim_slots(
    p_holder text, p_scopes text[], p_capacities integer[], p_ttl interval,
    OUT claimed boolean, OUT slots integer[], OUT fences bigint[],
    OUT in_use integer[], OUT refused_scope text, OUT refused_in_use integer,
    OUT expires_at timestamptz, OUT expires_in interval, OUT retry_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT c.claimed, c.slots, c.fences, c.in_use, c.refused_scope, c.refused_in_use,
           c.expires_at, c.expires_in, c.retry_in
    INTO claimed, slots, fences, in_use, refused_scope, refused_in_use,
         expires_at, expires_in, retry_in
    FROM pglease.claim_slots(p_holder, p_scopes, p_capacities, p_ttl,
                             CASE WHEN p_capacities IS NOT NULL
                                  THEN array_fill(1, ARRAY[coalesce(cardinality(p_capacities), 0)]) END,
                             false) AS c;
END
$$;

-- _slot_claim_locked(p_scope, p_holder, p_capacity, p_now, p_ttl): the
-- 0.2.0 form of the claims' building block, one unit, never queued; kept
-- so that the catalog of 0.2.0's functions stays whole (internal: granted
-- to no client).
CREATE OR REPLACE FUNCTION pglease._slot_claim_locked(
    p_scope text, p_holder text, p_capacity integer,
    p_now timestamptz, p_ttl interval,
    OUT claimed boolean, OUT slot integer, OUT fence bigint, OUT in_use integer,
    OUT retry_in interval)
LANGUAGE sql VOLATILE
AS $$
    SELECT c.claimed, c.slot, c.fence, c.in_use, c.retry_in
    FROM pglease._slot_claim_locked(p_scope, p_holder, p_capacity, 1, p_now, p_ttl, NULL, true, NULL) AS c;
$$;
