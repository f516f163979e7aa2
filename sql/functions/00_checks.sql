-- Argument checks shared by every pglease function. Internal: not granted to
-- clients; the SECURITY DEFINER entry points call them as the owner.
-- Like every internal function (no SECURITY DEFINER, no grant), they run
-- with their caller's search_path, which the entry points pin to
-- pg_catalog, pg_temp: a SET clause here would only cost each call a
-- settings save and restore (0.035 ms of a slot claim's 0.32).
--
-- Contract: each returns normally when the argument is acceptable and raises
-- otherwise, naming the function and the argument:
--   SQLSTATE 22004 (null_value_not_allowed) for NULL,
--   SQLSTATE 22023 (invalid_parameter_value) for a value out of range.

-- _check_text: p_value must be 1 to 256 bytes long.
CREATE OR REPLACE FUNCTION pglease._check_text(p_func text, p_arg text, p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, p_arg),
            HINT = format('Pass %s as text of 1 to 256 bytes.', p_arg);
    END IF;
    IF octet_length(p_value) NOT BETWEEN 1 AND 256 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must be 1 to 256 bytes long, got %s bytes',
                             p_func, p_arg, octet_length(p_value)),
            HINT = format('Shorten or fill in %s.', p_arg);
    END IF;
END
$$;

-- _check_ttl: p_ttl must be more than zero and at most 24 hours. Returns it
-- as a plain number of seconds, so that adding it to a timestamp never
-- depends on calendar days or months (DST-safe).
CREATE OR REPLACE FUNCTION pglease._check_ttl(p_func text, p_ttl interval)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_secs numeric;
BEGIN
    IF p_ttl IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: p_ttl must not be NULL', p_func),
            HINT = 'Pass a TTL between 1 microsecond and 24 hours, e.g. interval ''30 seconds''.';
    END IF;
    v_secs := extract(epoch FROM p_ttl);
    IF v_secs <= 0 OR v_secs > 86400 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: p_ttl must be more than 0 and at most 24 hours, got %s',
                             p_func, p_ttl),
            HINT = 'Pass a TTL between 1 microsecond and 24 hours, e.g. interval ''30 seconds''.';
    END IF;
    RETURN make_interval(secs => v_secs);
END
$$;

-- _check_fence: p_fence must be zero or more (fences start at 1).
CREATE OR REPLACE FUNCTION pglease._check_fence(p_func text, p_fence bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p_fence IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: p_fence must not be NULL', p_func),
            HINT = 'Pass the fence returned when the lease or slot was acquired.';
    END IF;
    IF p_fence < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: p_fence must be 0 or more, got %s', p_func, p_fence),
            HINT = 'Pass the fence returned when the lease or slot was acquired.';
    END IF;
END
$$;

-- _check_int: p_value must be between p_min and p_max (slot numbers, capacities).
CREATE OR REPLACE FUNCTION pglease._check_int(p_func text, p_arg text, p_value integer,
                                   p_min integer, p_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, p_arg),
            HINT = format('Pass %s as an integer from %s to %s.', p_arg, p_min, p_max);
    END IF;
    IF p_value NOT BETWEEN p_min AND p_max THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must be from %s to %s, got %s',
                             p_func, p_arg, p_min, p_max, p_value),
            HINT = format('Pass %s as an integer from %s to %s.', p_arg, p_min, p_max);
    END IF;
END
$$;

-- Release notifications. A refused acquire or claim registers as a waiter;
-- a release NOTIFYs on channel 'pglease' only when a waiter is registered.
-- Registration and release agree through row locks on pglease's own rows,
-- which only the pglease functions take (no advisory lock: its keys would
-- be guessable, and any role could take it and stall the calls):
--   * a lease: the refused acquire locks the lease row FOR KEY SHARE before
--     it reads the state that refuses it, until its commit (with the
--     registration); a release first tries the row FOR UPDATE SKIP LOCKED,
--     which conflicts with it. A renewal or takeover takes FOR NO KEY
--     UPDATE, which does not: a refused acquire never delays them.
--   * a slot scope: the claim holds the scope row FOR UPDATE until its
--     commit; a release tries it FOR UPDATE SKIP LOCKED.
-- Either the release holds its lock first (the refused call waits for the
-- release to commit, then sees it and is not refused), or the refused call
-- holds it first (the release cannot rule a waiter out and notifies), or
-- the registration committed before the release looked (and is seen). No
-- wake-up is lost.

-- _wait_register(p_kind, p_name, p_until): records a waiter for a release
-- of p_name until p_until. Writes only when no registration lasts that
-- long yet, so waiters of a busy lease rarely contend.
CREATE OR REPLACE FUNCTION pglease._wait_register(p_kind text, p_name text, p_until timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM 1 FROM pglease.waiters AS w
    WHERE w.kind = p_kind AND w.name = p_name AND w.until >= p_until;
    IF NOT FOUND THEN
        INSERT INTO pglease.waiters AS w (kind, name, until)
        VALUES (p_kind, p_name, p_until)
        ON CONFLICT ON CONSTRAINT waiters_pkey
        DO UPDATE SET until = greatest(w.until, excluded.until);
    END IF;
END
$$;

-- _wake(p_kind, p_name, p_sure): after a release, NOTIFYs channel 'pglease'
-- when a waiter may be registered. p_sure is true when the release holds
-- the lock that refused calls take (see above): then it notifies only when
-- a registration is visible; otherwise always. Payload (JSON), only what a
-- waiter needs to try again: {"kind": "lease"|"slot", "event": "released",
-- "name": <lease name or slot scope>}; no holder, no fence. Delivered when
-- the caller's transaction commits. Anyone may NOTIFY on any channel: a
-- forged notification costs a waiter one retry, nothing more.
CREATE OR REPLACE FUNCTION pglease._wake(p_kind text, p_name text, p_sure boolean)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_sure THEN
        PERFORM 1 FROM pglease.waiters AS w
        WHERE w.kind = p_kind AND w.name = p_name AND w.until > clock_timestamp();
        IF NOT FOUND THEN
            RETURN; -- nobody waits
        END IF;
    END IF;
    PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
        'kind', p_kind, 'event', 'released', 'name', p_name)::text);
END
$$;

-- _check_names: p_names, a filter of names (pglease.metrics,
-- pglease.run_summary), must be a POSIX regular expression of at most
-- 1024 bytes.
CREATE OR REPLACE FUNCTION pglease._check_names(p_func text, p_names text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p_names IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: p_names must not be NULL', p_func),
            HINT = 'Pass a regular expression the names must match, or '''' for every name.';
    END IF;
    IF octet_length(p_names) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: p_names must be at most 1024 bytes long, got %s bytes',
                             p_func, octet_length(p_names)),
            HINT = 'Pass a shorter regular expression, e.g. a common prefix: ''^orders/''.';
    END IF;
    BEGIN
        PERFORM '' ~ p_names;
    EXCEPTION WHEN invalid_regular_expression THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: p_names is not a valid regular expression: %s', p_func, SQLERRM),
            HINT = 'Pass a POSIX regular expression, as for the ~ operator, e.g. ''^orders/''.';
    END;
END
$$;
