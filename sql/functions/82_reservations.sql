-- Reservations of rate-limit tokens (0.4.0, #51, docs/limits.md): spend a
-- budget before the cost is known, settle with the cost once it is. A key's
-- limit is its budget: reserve(key, amount, ttl) takes amount tokens as
-- pglease.take does (so reservations and takes of a bucket never spend
-- more than its limit together, however many race), and settle(key,
-- reservation, actual) gives amount - actual of them back, until the
-- reservation expires (ttl after the reserve, on the server's clock);
-- after that they stay spent, so a reserver that dies never lets the
-- bucket overshoot.

-- pglease.reserve(p_key, p_amount, p_ttl): take p_amount tokens of key
-- p_key as pglease.take(p_key, p_amount) decides, and when allowed record
-- them as a reservation that pglease.settle can settle until now + p_ttl.
-- One row: reserved and the columns of pglease.take (remaining, retry_in,
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
DECLARE
    v_ttl interval;
BEGIN
    v_ttl := pglease._check_ttl('reserve', p_ttl);
    SELECT t.allowed, t.remaining, t.retry_in, t.reset_in, t.burst, t.decided_at
    INTO reserved, remaining, retry_in, reset_in, burst, decided_at
    FROM pglease._limit_take('reserve', p_key, p_amount) AS t;
    IF reserved THEN
        expires_at := decided_at + v_ttl;
        INSERT INTO pglease.limit_reservations AS r (key, key_role, amount, reserved_at, expires_at)
        VALUES (p_key, pglease._limit_key_role(p_key), p_amount, decided_at, expires_at)
        RETURNING r.id INTO reservation;
    END IF;
END
$$;

-- pglease.settle(p_key, p_reservation, p_actual): settle reservation
-- p_reservation of key p_key at p_actual tokens used: the other amount -
-- p_actual tokens go back to the bucket (which never holds more than its
-- burst), and the reservation is gone. One row:
--   * settled = true, refunded = amount - p_actual, when the reservation
--     is the caller's bucket's and has not expired on the server's clock;
--   * settled = false, refunded = 0, nothing changed: no such reservation
--     of the caller's bucket (another role's, settled already, purged, or
--     never made), or it expired (its amount stays spent);
--   remaining = whole tokens in the bucket after the call; decided_at =
--   the clock reading it decided on (after the key's row lock).
-- A refund counts at the key's limit as it stands (a limit changed since
-- the reserve refunds at the new rate). Locks the key's row, then the
-- reservation's, until the caller's transaction ends, as reserve does.
-- Raises 22004 for NULL; 22023 for a key not 1 to 256 bytes, a
-- reservation less than 1, an actual less than 0 or more than the
-- reservation's amount; 42501 for a key under a prefix bound to a role the
-- caller is not a member of; PGL20 when the key has no limit; nothing
-- changes then.
CREATE OR REPLACE FUNCTION pglease.settle(p_key text, p_reservation bigint, p_actual integer,
    OUT settled boolean, OUT refunded integer, OUT remaining integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role    text;
    v_emit    bigint;
    v_burst   integer;
    v_tat     timestamptz;
    v_amount  integer;
    v_expires timestamptz;
    v_now_us  bigint;
    v_tat_us  bigint;
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
    PERFORM pglease._check_owner('settle', 'p_key', p_key);
    SELECT l.emission_us, l.burst INTO v_emit, v_burst FROM pglease._limit_of('settle', p_key) AS l;
    v_role := pglease._limit_key_role(p_key);

    SELECT s.tat INTO v_tat FROM pglease.limit_state AS s
    WHERE s.key = p_key AND s.key_role = v_role
    FOR NO KEY UPDATE;
    decided_at := clock_timestamp();
    v_now_us := pglease._limit_us(decided_at);
    v_tat_us := greatest(coalesce(pglease._limit_us(v_tat), v_now_us), v_now_us);
    SELECT r.amount, r.expires_at INTO v_amount, v_expires FROM pglease.limit_reservations AS r
    WHERE r.id = p_reservation AND r.key = p_key AND r.key_role = v_role
    FOR UPDATE;
    settled := FOUND AND v_expires > decided_at;
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
        IF refunded > 0 AND v_tat IS NOT NULL THEN
            v_tat_us := greatest(v_tat_us - refunded * v_emit, v_now_us);
            UPDATE pglease.limit_state AS s
            SET tat = decided_at + (v_tat_us - v_now_us) * interval '1 microsecond'
            WHERE s.key = p_key AND s.key_role = v_role;
        END IF;
    END IF;
    remaining := greatest((v_emit * v_burst - (v_tat_us - v_now_us)) / v_emit, 0)::integer;
END
$$;
