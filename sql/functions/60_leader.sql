-- Leadership (0.3.0): a holder's value, observation, release on request.
-- docs/leadership.md explains the whole; each function states its contract.
--
-- The value is bounded to pglease._max_value bytes (1024): what a follower
-- needs to reach the leader (an address, a small JSON document), not a
-- store. A release request is an operator's tool: pglease.request_release
-- is granted to role pglease_operator, not to pglease_client.

-- _check_value(p_func, p_value): a holder's value is NULL (none) or at most
-- 1024 bytes; raises 22023 otherwise, naming the function.
CREATE OR REPLACE FUNCTION pglease._check_value(p_func text, p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF octet_length(p_value) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: p_value must be at most 1024 bytes long, got %s bytes',
                             p_func, octet_length(p_value)),
            HINT = 'Publish a short value (an address, a small JSON document), not a payload.';
    END IF;
END
$$;

-- _observed_wake(p_name): after a change of lease p_name (a new tenure, a
-- value, a release), NOTIFYs channel 'pglease' when
-- someone observes it (pglease.observe registered it and the registration
-- has not lapsed). Payload (JSON): {"kind": "lease", "event": "changed",
-- "name": <lease name>}; no holder, value or fence (anyone may LISTEN): an
-- observer reads the state anew. Delivered when the caller's transaction
-- commits. Leases nobody observes send nothing, so that their changes do
-- not commit under the NOTIFY queue's cluster-wide lock.
CREATE OR REPLACE FUNCTION pglease._observed_wake(p_name text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM 1 FROM pglease.observers AS o
    WHERE o.name = p_name AND o.until > clock_timestamp();
    IF FOUND THEN
        PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
            'kind', 'lease', 'event', 'changed', 'name', p_name)::text);
    END IF;
END
$$;

-- pglease.acquire(p_name, p_holder, p_ttl, p_value): pglease.acquire(p_name,
-- p_holder, p_ttl), publishing p_value as the holder's value.
--
-- Returns what the three-argument acquire returns, and value:
--   * granted: the tenure's value is now p_value (NULL: none), also when
--     the grant re-pins the caller's own live tenure; value = p_value.
--     Observers are notified when the value changed.
--   * refused: value is the current holder's value (NULL when it has none,
--     or when the lease is reserved for a preferred holder, see
--     pglease.request_release), and the caller is recorded as a candidate
--     for the lease (the pair of p_holder and the caller's role) until
--     the refusing expiry plus p_ttl, so that a release request may name
--     it as the preferred next holder.
-- Raises what the three-argument acquire raises, and 22023 for a value over
-- 1024 bytes; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.acquire(
    p_name text, p_holder text, p_ttl interval, p_value text,
    OUT acquired boolean, OUT fence bigint, OUT holder text,
    OUT expires_at timestamptz, OUT expires_in interval, OUT value text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_holder text;
    v_fence  bigint;
BEGIN
    IF octet_length(p_value) > 1024 THEN
        PERFORM pglease._check_value('acquire', p_value);
    END IF;
    SELECT a.acquired, a.fence, a.holder, a.expires_at, a.expires_in
    INTO acquired, fence, holder, expires_at, expires_in
    FROM pglease.acquire(p_name, p_holder, p_ttl) AS a;
    IF acquired THEN
        -- The grant holds the row lock: the value goes with this tenure.
        UPDATE pglease.leases AS l SET value = p_value
        WHERE l.name = p_name AND l.value IS DISTINCT FROM p_value;
        IF FOUND THEN
            PERFORM pglease._observed_wake(p_name);
        END IF;
        value := p_value;
        RETURN;
    END IF;
    v_holder := holder;
    v_fence := fence;
    SELECT l.value INTO value FROM pglease.leases AS l
    WHERE l.name = p_name AND l.holder = v_holder AND l.fence = v_fence;
    -- A candidate a release request may prefer. Written only when no
    -- registration of the caller lasts that long yet (the holder renewed
    -- since the last refusal), so that a caller polling a busy lease reads
    -- instead of writing. Only the caller's own row: lapsed rows are
    -- pglease.purge's (a refusal that deleted others' rows would lock rows
    -- that their holders' refusals then wait for, and two transactions
    -- refused on two leases in opposite order could deadlock).
    PERFORM 1 FROM pglease.candidates AS c
    WHERE c.name = p_name AND c.holder = p_holder AND c.holder_role = session_user
      AND c.until >= expires_at + p_ttl;
    IF NOT FOUND THEN
        INSERT INTO pglease.candidates AS c (name, holder, until, holder_role)
        VALUES (p_name, p_holder, expires_at + p_ttl, session_user)
        ON CONFLICT ON CONSTRAINT candidates_pkey
        DO UPDATE SET until = greatest(c.until, excluded.until);
    END IF;
END
$$;

-- pglease.set_value(p_name, p_holder, p_fence, p_value): change the value
-- of a live tenure.
--
-- Compare-and-swap on (holder, role, fence) of a live lease, as
-- pglease.renew: when p_holder holds the lease with fence p_fence, took it
-- as the caller's role (session_user), and it has not expired, its value
-- becomes p_value (NULL: none), observers are notified, and value_set =
-- true. Otherwise value_set = false and nothing changes. The expiry does not move.
-- Raises 22004 for a NULL name, holder or fence, 22023 for a bad name,
-- holder, a negative fence or a value over 1024 bytes; nothing is changed
-- then.
CREATE OR REPLACE FUNCTION pglease.set_value(
    p_name text, p_holder text, p_fence bigint, p_value text,
    OUT value_set boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role text := session_user::text;
BEGIN
    PERFORM pglease._check_tenure('set_value', p_name, p_holder, p_fence);
    PERFORM pglease._check_value('set_value', p_value);
    UPDATE pglease.leases AS l SET value = p_value
    WHERE l.name = p_name
      AND pglease._live_tenure(l.holder, l.holder_role, l.fence, l.expires_at,
                               p_holder, v_role, p_fence, clock_timestamp());
    value_set := FOUND;
    IF value_set THEN
        PERFORM pglease._observed_wake(p_name);
    END IF;
END
$$;

-- pglease.observe(p_name, p_for): the state of lease p_name now, and
-- NOTIFYs of its changes for p_for.
--
-- Registers the lease as observed until now + p_for (keeping a later
-- registration), so that every change of it (a new tenure, a value, a
-- release, a release request) NOTIFYs channel 'pglease' with event
-- 'changed' (see pglease._observed_wake): LISTEN pglease first, call this
-- again before p_for has passed, and read the state anew at each
-- notification and at expires_at (an expiry sends nothing). Returns one
-- row, as pglease.lease_status shows the lease: state 'held', 'expired' or
-- 'free' ('free' with fence 0 for an unknown name), the holder, fence and
-- value (NULL unless held), expires_at, expires_in, and whether a release
-- of the tenure was requested (release_requested_at, NULL unless held).
-- The row is read after the registration, and after waiting for a change
-- in flight, without keeping a lock: a change that commits before this
-- call's transaction does is seen, and one that commits after it is
-- notified. (A change committing in between, while the caller's
-- transaction is still open, may be neither: call observe in a
-- transaction of its own.)
-- Raises 22004 for a NULL name or p_for, 22023 for a bad name or a
-- p_for not in (0, 24 hours]; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.observe(
    p_name text, p_for interval,
    OUT state text, OUT holder text, OUT fence bigint, OUT value text,
    OUT expires_at timestamptz, OUT expires_in interval,
    OUT release_requested_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_for interval;
    v_now timestamptz;
BEGIN
    PERFORM pglease._check_text('observe', 'p_name', p_name);
    v_for := pglease._check_span('observe', 'p_for', p_for, interval '24 hours');
    v_now := clock_timestamp();
    PERFORM 1 FROM pglease.observers AS o
    WHERE o.name = p_name AND o.caller_role = session_user AND o.until >= v_now + v_for;
    IF NOT FOUND THEN
        INSERT INTO pglease.observers AS o (name, until, caller_role)
        VALUES (p_name, v_now + v_for, session_user)
        ON CONFLICT ON CONSTRAINT observers_pkey
        DO UPDATE SET until = greatest(o.until, excluded.until);
    END IF;
    -- Wait for a change in flight (every change locks the row for update):
    -- FOR SHARE in a subtransaction that is rolled back at once, so that
    -- the lock is gone when this call returns and nobody ever waits for
    -- the caller's transaction. Then read the row as committed.
    BEGIN
        PERFORM 1 FROM pglease.leases AS l WHERE l.name = p_name FOR SHARE;
        RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: waited';
    EXCEPTION WHEN SQLSTATE 'PGL03' THEN
        NULL;
    END;
    SELECT l.holder, l.fence, l.value, l.expires_at, l.release_requested_at
    INTO holder, fence, value, expires_at, release_requested_at
    FROM pglease.leases AS l
    WHERE l.name = p_name;
    v_now := clock_timestamp();
    IF NOT FOUND THEN
        state := 'free';
        fence := 0;
        expires_in := interval '0';
        RETURN;
    END IF;
    IF holder IS NOT NULL AND expires_at > v_now THEN
        state := 'held';
        expires_in := expires_at - v_now;
        RETURN;
    END IF;
    state := CASE WHEN holder IS NULL THEN 'free' ELSE 'expired' END;
    value := NULL;
    release_requested_at := NULL;
    expires_in := interval '0';
END
$$;

-- pglease.request_release(p_name, p_to, p_for): ask the holder of lease
-- p_name to hand over. An operator's call: granted to pglease_operator.
--
-- Marks the live tenure of p_name as asked to release
-- (release_requested_at) and NOTIFYs channel 'pglease' with event
-- 'changed' (the payload of pglease._observed_wake), whether or not the
-- lease is observed: its holder learns it at its next renewal
-- (pglease.renew_lease), or at once when it LISTENs and reads
-- pglease.lease_status at a notification of its lease (registering
-- nothing, so that the lease's other changes keep sending nothing).
-- pglease only asks: the holder releases when its work has
-- stopped, and a holder that never does keeps the lease until it stops
-- renewing (pglease.force_release cuts it off). With p_to, the next grant
-- after this tenure ends is reserved for holder p_to for p_for after the
-- end (see pglease.acquire); after that anyone may acquire. p_to must be a
-- candidate: a holder that asked for the lease and was refused recently
-- (pglease.acquire with p_value); the reservation is for p_to of the role
-- it asked as, and another role's acquire under the same string is
-- refused. Returns requested = true with the
-- tenure's holder and fence; requested = false when a release of this
-- tenure was already requested (nothing changes: the first request and its
-- preferred holder stand, and no notification is sent).
-- Raises PGL04 when the lease is not held (free, expired or unknown name),
-- PGL05 when p_to is not a candidate (or is the holder itself, string and
-- role, or is a candidate under more than one role), 22004 for a
-- NULL name or p_for, 22023 for a bad name or p_to, or a p_for not in
-- (0, 1 hour]; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.request_release(
    p_name text, p_to text DEFAULT NULL, p_for interval DEFAULT interval '10 seconds',
    OUT requested boolean, OUT holder text, OUT fence bigint)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_for     interval;
    v_expires timestamptz;
    v_asked   timestamptz;
    v_to_role text;
    v_roles   bigint;
    v_hrole   text;
BEGIN
    PERFORM pglease._check_text('request_release', 'p_name', p_name);
    IF p_to IS NOT NULL THEN
        PERFORM pglease._check_text('request_release', 'p_to', p_to);
    END IF;
    v_for := pglease._check_span('request_release', 'p_for', p_for, interval '1 hour');
    SELECT l.holder, l.fence, l.expires_at, l.release_requested_at, l.holder_role
    INTO holder, fence, v_expires, v_asked, v_hrole
    FROM pglease.leases AS l
    WHERE l.name = p_name
    FOR NO KEY UPDATE;
    IF NOT FOUND OR holder IS NULL OR v_expires <= clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL04',
            MESSAGE = format('pglease.request_release: lease %L is not held', p_name),
            HINT = 'A release can be requested only of a live tenure.';
    END IF;
    IF p_to IS NOT NULL THEN
        -- The candidate's role: the reservation is for the pair.
        SELECT min(c.holder_role), count(DISTINCT c.holder_role) INTO v_to_role, v_roles
        FROM pglease.candidates AS c
        WHERE c.name = p_name AND c.holder = p_to AND c.until > clock_timestamp();
        IF v_roles > 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL05',
                MESSAGE = format('pglease.request_release: %L is a candidate for lease %L under %s roles',
                                 p_to, p_name, v_roles),
                HINT = 'Request the release without a preferred holder, or give the holders names unique across roles.';
        END IF;
        IF v_roles = 0 OR (p_to = holder AND v_to_role IS NOT DISTINCT FROM v_hrole) THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL05',
                MESSAGE = format('pglease.request_release: %L is not a candidate for lease %L', p_to, p_name),
                HINT = 'Name a holder that is waiting for the lease (refused by pglease.acquire with a value), or none.';
        END IF;
    END IF;
    IF v_asked IS NOT NULL THEN
        requested := false; -- asked already: the first request stands
        RETURN;
    END IF;
    UPDATE pglease.leases AS l
    SET release_requested_at = clock_timestamp(), release_to = p_to, release_to_role = v_to_role,
        release_for = CASE WHEN p_to IS NULL THEN NULL ELSE v_for END
    WHERE l.name = p_name;
    requested := true;
    -- Unconditional, unlike pglease._observed_wake: the holder listens
    -- without registering. Requests are an operator's, and rare.
    PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
        'kind', 'lease', 'event', 'changed', 'name', p_name)::text);
END
$$;
