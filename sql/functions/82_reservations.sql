-- Reservations of rate-limit tokens (0.4.0, #51, docs/limits.md): spend a
-- budget before the cost is known, settle with the cost once it is. A key's
-- limit is its budget: reserve(key, amount, ttl) takes amount tokens as
-- pglease.take does (so reservations and takes of a bucket never spend
-- more than its limit together, however many race) and holds them until
-- the reservation expires (ttl after the reserve, on the server's clock);
-- settle(key, reservation, actual) before then spends actual of them and
-- gives the rest back. A reservation never settled gives its whole amount
-- back at its expiry, like a lease's end: the first call that locks the
-- bucket's row after it (a take, reserve, settle or purge) deletes it and
-- refunds it, as a settle at 0 would, before deciding; peek and
-- limit_status count it back. A settle at or after the expiry is refused.
-- reserve_all does the same over several keys at once (a user within a
-- tenant within a pool), all or nothing: one reservation holds the amount
-- at every key, and one settle gives the rest back to each of them.

-- _limit_reserve(p_func, p_keys_arg, p_keys, p_amount, p_ttl): the one
-- reserve of pglease.reserve and pglease.reserve_all (p_func and
-- p_keys_arg name the caller and its argument in errors). Checks every
-- argument first (_check_ttl, _check_int, _limit_keys); then takes
-- p_amount tokens of each key in _limit_order's order, in a
-- subtransaction: every key allowed, it records one reservation (one row
-- per key, one id) expiring at the first key's decided_at + p_ttl, and
-- each key's bucket is due no later than that;
-- a key refused, the keys taken before it roll back and nothing is
-- written. Returns reserved, reservation, expires_at; refused_by = the
-- refusing key (NULL when reserved); remaining, retry_in, reset_in and
-- burst of the refusing key, else of the key with the fewest tokens left
-- (the first in lock order on ties); decided_at = the first key's clock
-- reading. Locks as pglease.take, per key.
CREATE OR REPLACE FUNCTION pglease._limit_reserve(p_func text, p_keys_arg text, p_keys text[],
    p_amount integer, p_ttl interval,
    OUT reserved boolean, OUT reservation bigint, OUT expires_at timestamptz,
    OUT refused_by text, OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ttl interval;
    v_key text;
    v_t   record;
BEGIN
    v_ttl := pglease._check_ttl(p_func, p_ttl);
    PERFORM pglease._check_int(p_func, 'p_amount', p_amount, 1, 2147483647);
    PERFORM pglease._limit_keys(p_func, p_keys_arg, p_keys, 'p_amount',
                                array_fill(p_amount, ARRAY[coalesce(cardinality(p_keys), 0)]));
    reserved := true;
    BEGIN
        FOR v_key IN SELECT k.key FROM pglease._limit_order(p_keys, NULL) AS k LOOP
            SELECT t.allowed, t.remaining, t.retry_in, t.reset_in, t.burst, t.decided_at INTO v_t
            FROM pglease._limit_take(p_func, v_key, p_amount) AS t;
            decided_at := coalesce(decided_at, v_t.decided_at);
            IF NOT v_t.allowed OR remaining IS NULL OR v_t.remaining < remaining THEN
                remaining := v_t.remaining;
                retry_in := v_t.retry_in;
                reset_in := v_t.reset_in;
                burst := v_t.burst;
            END IF;
            IF NOT v_t.allowed THEN
                refused_by := v_key;
                RAISE EXCEPTION USING ERRCODE = 'PGL02', MESSAGE = 'pglease: refused';
            END IF;
        END LOOP;
        expires_at := decided_at + v_ttl;
        INSERT INTO pglease.limit_reservations AS r (key, key_role, amount, reserved_at, expires_at)
        SELECT k.key, pglease._limit_key_role(k.key), p_amount, decided_at, expires_at
        FROM unnest(p_keys) AS k(key)
        LIMIT 1
        RETURNING r.id INTO reservation;
        INSERT INTO pglease.limit_reservations AS r (id, key, key_role, amount, reserved_at, expires_at)
        SELECT reservation, k.key, pglease._limit_key_role(k.key), p_amount, decided_at, expires_at
        FROM unnest(p_keys) WITH ORDINALITY AS k(key, i)
        WHERE k.i > 1;
        UPDATE pglease.limit_state AS s SET due = least(s.due, _limit_reserve.expires_at)
        FROM unnest(p_keys) AS k(key)
        WHERE s.key = k.key AND s.key_role = pglease._limit_key_role(k.key);
    EXCEPTION WHEN SQLSTATE 'PGL02' THEN
        -- A key refused: the keys taken before it go with the
        -- subtransaction.
        reserved := false;
        expires_at := NULL;
        reservation := NULL;
    END;
END
$$;

-- pglease.reserve(p_key, p_amount, p_ttl): take p_amount tokens of key
-- p_key as pglease.take(p_key, p_amount) decides, and when allowed hold
-- them as a reservation that pglease.settle can settle before its
-- expires_at; unsettled then, the whole amount goes back to the bucket at
-- expires_at, on the server's clock (work paid for by it must stop
-- before then, as under a lease). One row: reserved and the columns of pglease.take (remaining, retry_in,
-- reset_in, burst, decided_at); reservation = the reservation's number and
-- expires_at = decided_at + p_ttl when reserved, both NULL when refused
-- (nothing spent, nothing written). The reservation belongs to the key's
-- bucket: members of the role owning the key's bound prefix, or the role
-- that reserved a shared key, settle it. Locks as pglease.take: the key's
-- row until the caller's transaction ends when reserved (the reservation
-- commits or rolls back with the caller's work).
-- Raises as pglease.take (22004, 22023, 42501, PGL20, PGL21 for an amount
-- more than the burst, 53400), and 22023 for a TTL not in (0, 24 hours];
-- nothing changes then.
CREATE OR REPLACE FUNCTION pglease.reserve(p_key text, p_amount integer, p_ttl interval,
    OUT reserved boolean, OUT reservation bigint, OUT expires_at timestamptz,
    OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT r.reserved, r.reservation, r.expires_at, r.remaining, r.retry_in, r.reset_in,
           r.burst, r.decided_at
    INTO reserved, reservation, expires_at, remaining, retry_in, reset_in, burst, decided_at
    FROM pglease._limit_reserve('reserve', 'p_key', ARRAY[p_key], p_amount, p_ttl) AS r;
END
$$;

-- pglease.reserve_all(p_keys, p_amount, p_ttl): reserve p_amount tokens of
-- every key of p_keys at once, all or nothing: a user within a tenant
-- within a pool ('pool/t1/u1', 'pool/t1', 'pool'). The keys are taken as
-- pglease.take decides, narrowest first (the longest key first, ties in
-- byte order: one order for every caller, so that two such calls never
-- deadlock on each other's keys). One row:
--   * every key allowed: reserved = true; reservation = one number that
--     pglease.settle, given any of the keys, settles at every key at once
--     before expires_at = decided_at + p_ttl (unsettled, the amount goes
--     back to every key then, as for pglease.reserve); refused_by and
--     retry_in NULL;
--     remaining, reset_in and burst of the key with the fewest tokens
--     left (the first in lock order on ties).
--   * a key refused: reserved = false; refused_by = that key, with its
--     remaining, retry_in, reset_in and burst; reservation and expires_at
--     NULL; the keys taken before it are rolled back (a subtransaction):
--     nothing is spent or written.
--   decided_at = the clock reading of the first key's decision (each key
--   decides on its own reading, after its row lock).
-- Locks: each key's row as pglease.take, held until the caller's
-- transaction ends when reserved; a refusal keeps no lock. Other keys are
-- never locked. Every argument is checked before anything is locked:
-- raises 22004 for NULL (p_keys, one of them, p_amount, p_ttl); 22023 for
-- a p_keys of 0 or more than 64 keys or of more than one dimension, the
-- same key twice, a key not 1 to 256 bytes, an amount less than 1, a TTL
-- not in (0, 24 hours]; 42501 for a key under a prefix bound to a role the
-- caller is not a member of; PGL20 for a key with no limit; PGL21 for an
-- amount more than a key's burst; 53400 when a new key row would take the
-- caller's role over its 'limits' quota; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.reserve_all(p_keys text[], p_amount integer, p_ttl interval,
    OUT reserved boolean, OUT reservation bigint, OUT expires_at timestamptz,
    OUT refused_by text, OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT r.reserved, r.reservation, r.expires_at, r.refused_by, r.remaining, r.retry_in,
           r.reset_in, r.burst, r.decided_at
    INTO reserved, reservation, expires_at, refused_by, remaining, retry_in, reset_in, burst, decided_at
    FROM pglease._limit_reserve('reserve_all', 'p_keys', p_keys, p_amount, p_ttl) AS r;
END
$$;

-- pglease.settle(p_key, p_reservation, p_actual): settle reservation
-- p_reservation, of key p_key (for a reservation of pglease.reserve_all,
-- any one of its keys), at p_actual tokens used: the other amount -
-- p_actual tokens go back to the bucket of each of its keys (which never
-- holds more than its burst), and the reservation is gone. One row:
--   * settled = true, refunded = amount - p_actual (given back to each
--     key), when the reservation is the caller's buckets' and decided_at
--     is before its expires_at;
--   * settled = false, refunded = 0, the reservation unchanged: no such
--     reservation of the caller's bucket of p_key (another role's,
--     settled already, or never made), or it expired: at decided_at or
--     later it is refused, as a renew after a lease's expiry is, and its
--     whole amount went back to every key at expires_at instead;
--   remaining = whole tokens in p_key's bucket after the call; decided_at
--   = the clock reading it decided on (after the keys' row locks).
-- Like any call that locks a bucket's row, it first gives back the
-- reservations of the locked buckets expired by decided_at (this one
-- included, when it has expired). A refund counts at each key's limit as
-- it stands (a limit changed since the reserve refunds at the new rate).
-- Locks the rows of the reservation's keys in pglease.reserve_all's
-- order, then the reservation's rows, until the caller's transaction
-- ends, as reserve does; only rows of the caller's buckets. Under
-- REPEATABLE READ or SERIALIZABLE a settle whose snapshot predates a
-- committed change of those rows (a take, a settle, an expiry given back)
-- raises 40001, changing nothing: retry.
-- Raises 22004 for NULL; 22023 for a key not 1 to 256 bytes, a
-- reservation less than 1, an actual less than 0 or more than the
-- reservation's amount; 42501 for a key under a prefix bound to a role the
-- caller is not a member of (p_key, or another key of the reservation);
-- PGL20 when one of the keys has no limit; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.settle(p_key text, p_reservation bigint, p_actual integer,
    OUT settled boolean, OUT refunded integer, OUT remaining integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_keys    text[];
    v_roles   text[];
    v_emit    bigint[];
    v_burst   integer[];
    v_tat     timestamptz[];
    v_due     timestamptz[];
    v_amount  integer;
    v_expires timestamptz;
    v_rows    bigint;
    v_now_us  bigint;
    v_tat_us  bigint;
    v_lim     record;
    v_row     record;
BEGIN
    PERFORM pglease._check_text('settle', 'p_key', p_key);
    IF p_reservation IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.settle: p_reservation must not be NULL',
            HINT = 'Pass the reservation pglease.reserve returned.';
    END IF;
    IF p_reservation < 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.settle: p_reservation must be 1 or more, got %s', p_reservation),
            HINT = 'Pass the reservation pglease.reserve returned.';
    END IF;
    PERFORM pglease._check_int('settle', 'p_actual', p_actual, 0, 2147483647);
    PERFORM pglease._limit_key('settle', 'p_key', p_key, NULL, NULL);

    -- The reservation's keys, when p_key's bucket is one of them (its keys
    -- never change: rows are only deleted).
    IF EXISTS (SELECT FROM pglease.limit_reservations AS r
               WHERE r.id = p_reservation AND r.key = p_key
                 AND r.key_role = pglease._limit_key_role(p_key)) THEN
        v_keys := ARRAY(SELECT k.key FROM pglease._limit_order(ARRAY(
                            SELECT r.key FROM pglease.limit_reservations AS r
                            WHERE r.id = p_reservation), NULL) AS k);
    ELSE
        v_keys := ARRAY[p_key];
    END IF;
    FOR i IN 1 .. cardinality(v_keys) LOOP
        SELECT k.key_role, k.emission_us, k.burst INTO v_lim
        FROM pglease._limit_key('settle', 'p_key', v_keys[i], NULL, NULL) AS k;
        v_emit[i] := v_lim.emission_us;
        v_burst[i] := v_lim.burst;
        v_roles[i] := v_lim.key_role;
        SELECT s.tat, s.due INTO v_row FROM pglease.limit_state AS s
        WHERE s.key = v_keys[i] AND s.key_role = v_roles[i]
        FOR NO KEY UPDATE;
        v_tat[i] := v_row.tat;
        v_due[i] := v_row.due;
    END LOOP;
    decided_at := clock_timestamp();
    v_now_us := pglease._limit_us(decided_at);
    FOR i IN 1 .. cardinality(v_keys) LOOP
        IF v_due[i] <= decided_at THEN
            v_tat[i] := (SELECT e.tat
                         FROM pglease._limit_expire(v_keys[i], v_roles[i], v_tat[i], decided_at, v_emit[i]) AS e);
        END IF;
    END LOOP;

    -- Only rows of the caller's buckets are locked: another role's
    -- reservation number locks nothing of that role.
    PERFORM FROM pglease.limit_reservations AS r
    WHERE r.id = p_reservation AND r.key = ANY (v_keys)
      AND r.key_role = pglease._limit_key_role(r.key)
    FOR UPDATE;
    SELECT min(r.amount), min(r.expires_at), count(*) INTO v_amount, v_expires, v_rows
    FROM pglease.limit_reservations AS r
    WHERE r.id = p_reservation AND r.key = ANY (v_keys)
      AND r.key_role = pglease._limit_key_role(r.key);
    settled := v_rows = cardinality(v_keys) AND v_expires > decided_at;
    refunded := 0;
    IF settled THEN
        IF p_actual > v_amount THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('pglease.settle: p_actual %s is more than the %s tokens reservation %s holds',
                                 p_actual, v_amount, p_reservation),
                HINT = 'Settle at most the amount reserved; take the rest with pglease.take.';
        END IF;
        DELETE FROM pglease.limit_reservations AS r WHERE r.id = p_reservation;
        refunded := v_amount - p_actual;
    END IF;
    FOR i IN 1 .. cardinality(v_keys) LOOP
        IF refunded > 0 AND v_tat[i] IS NOT NULL THEN
            v_tat[i] := pglease._limit_refund(v_tat[i], refunded, v_emit[i], decided_at);
            UPDATE pglease.limit_state AS s SET tat = v_tat[i]
            WHERE s.key = v_keys[i] AND s.key_role = v_roles[i];
        END IF;
        IF v_keys[i] = p_key THEN
            v_tat_us := greatest(coalesce(pglease._limit_us(v_tat[i]), v_now_us), v_now_us);
            remaining := greatest((v_emit[i] * v_burst[i] - (v_tat_us - v_now_us)) / v_emit[i], 0)::integer;
        END IF;
    END LOOP;
END
$$;
