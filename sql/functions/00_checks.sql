-- Argument checks shared by every pglease function. Internal: not granted to
-- clients; the SECURITY DEFINER entry points call them as the owner.
-- Like every internal function (no SECURITY DEFINER, no grant), they run
-- with their caller's search_path, which the entry points pin to
-- pg_catalog, pg_temp: a SET clause here would only cost each call a
-- settings save and restore.
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
--   * a slot scope: a claim holds the scope row FOR NO KEY UPDATE while it
--     decides, and a refused claim keeps it FOR KEY SHARE until its commit
--     (with the registration); a release tries it FOR UPDATE SKIP LOCKED,
--     which conflicts with both.
-- Either the release holds its lock first (the refused call waits for the
-- release to commit, then sees it and is not refused), or the refused call
-- holds it first (the release cannot rule a waiter out and notifies), or
-- the registration committed before the release looked (and is seen). No
-- wake-up is lost.

-- _wait_register(p_kind, p_name, p_until): records a waiter of the caller's
-- role (session_user) for a release of p_name until p_until. Writes only
-- when no registration of that role lasts that long yet, so waiters of a
-- busy lease rarely contend; a registration in flight of another role is
-- another row, which this never waits for.
CREATE OR REPLACE FUNCTION pglease._wait_register(p_kind text, p_name text, p_until timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM 1 FROM pglease.waiters AS w
    WHERE w.kind = p_kind AND w.name = p_name AND w.caller_role = session_user
      AND w.until >= p_until;
    IF NOT FOUND THEN
        INSERT INTO pglease.waiters AS w (kind, name, until, caller_role)
        VALUES (p_kind, p_name, p_until, session_user)
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

-- _trusted(): whether the caller (session_user) acts for every role: the
-- schema's owner, a superuser, or a member of pglease_operator. A trusted
-- caller's purge deletes what any role left; anyone else's deletes only
-- what its own role left (see pglease.purge).
CREATE OR REPLACE FUNCTION pglease._trusted()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.pg_has_role(session_user, n.nspowner, 'MEMBER')
        OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                   WHERE r.rolname = 'pglease_operator'
                     AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'))
    FROM pg_catalog.pg_namespace AS n
    WHERE n.nspname = 'pglease'
$$;

-- _reserved(p_expires, p_to, p_to_role, p_for, p_holder, p_role, p_now):
-- whether a lease whose tenure ends (ended) at p_expires, released on
-- request for holder p_to of role p_to_role for p_for after that end, is
-- reserved at p_now for someone other than holder p_holder of role p_role.
-- The one rule of reservations: pglease.acquire, pglease.acquire_batch and
-- pglease.purge apply it. A request of a holder without a role (none
-- recorded) is reserved for no role: nobody but its end takes it.
-- Declared VOLATILE only so that the planner inlines it where p_now is
-- clock_timestamp() (an IMMUTABLE one would not be, and every call would
-- then run the SQL function executor).
CREATE OR REPLACE FUNCTION pglease._reserved(
    p_expires timestamptz, p_to text, p_to_role text, p_for interval,
    p_holder text, p_role text, p_now timestamptz)
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT p_to IS NOT NULL
       AND (p_to IS DISTINCT FROM p_holder OR p_to_role IS DISTINCT FROM p_role)
       AND p_expires + p_for > p_now
$$;

-- _raise_floors(p_lease, p_slot, p_purged): raises the lease and slot fence
-- floors to at least p_lease and p_slot, and adds p_purged to the count of
-- purged rows (pglease.lease_fence_floor and the others: sequences, read
-- by everyone as they stand). One raise at a time, under the lock of
-- pglease.purge_lock, which the subtransaction below releases at once:
-- sequences do not roll back, so the raise stays, and no caller ever
-- waits for another's purge to end. Call it before the deletes commit.
CREATE OR REPLACE FUNCTION pglease._raise_floors(p_lease bigint, p_slot bigint, p_purged bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    LOCK TABLE pglease.purge_lock IN EXCLUSIVE MODE;
    PERFORM pg_catalog.setval('pglease.lease_fence_floor', p_lease, true)
    FROM pglease.lease_fence_floor AS f WHERE f.last_value < p_lease;
    PERFORM pg_catalog.setval('pglease.slot_fence_floor', p_slot, true)
    FROM pglease.slot_fence_floor AS f WHERE f.last_value < p_slot;
    PERFORM pg_catalog.setval('pglease.purged_rows', f.last_value + p_purged, true)
    FROM pglease.purged_rows AS f WHERE p_purged > 0;
    RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: floors raised';
EXCEPTION WHEN SQLSTATE 'PGL03' THEN
    NULL; -- the lock goes with the subtransaction; the sequences keep their values
END
$$;

-- _check_age(p_func, p_arg, p_value): p_value, an age (how long ago, how
-- often), must be 0 or more and at most 100 years. Returns it as plain
-- seconds. 22004 for NULL, 22023 out of range.
CREATE OR REPLACE FUNCTION pglease._check_age(p_func text, p_arg text, p_value interval)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_secs numeric;
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, p_arg),
            HINT = format('Pass %s as an interval from 0 to 100 years, e.g. interval ''1 day''.', p_arg);
    END IF;
    v_secs := extract(epoch FROM p_value);
    IF v_secs < 0 OR v_secs > 3162240000 THEN  -- 100 years of 366 days
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must be from 0 to 100 years, got %s', p_func, p_arg, p_value),
            HINT = format('Pass %s as an interval from 0 to 100 years, e.g. interval ''1 day''.', p_arg);
    END IF;
    RETURN make_interval(secs => v_secs);
END
$$;

-- pglease._check_span(p_func, p_arg, p_value, p_max): p_value must be
-- more than 0 and at most p_max. Returns it as plain seconds (no calendar
-- days or months). 22004 for NULL, 22023 out of range. Internal.
CREATE OR REPLACE FUNCTION pglease._check_span(p_func text, p_arg text, p_value interval, p_max interval)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
DECLARE
    v_secs numeric;
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, p_arg),
            HINT = format('Pass %s as an interval more than 0 and at most %s.', p_arg, p_max);
    END IF;
    v_secs := extract(epoch FROM p_value);
    IF v_secs <= 0 OR v_secs > extract(epoch FROM p_max) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must be more than 0 and at most %s, got %s',
                             p_func, p_arg, p_max, p_value),
            HINT = format('Pass %s as an interval more than 0 and at most %s.', p_arg, p_max);
    END IF;
    RETURN make_interval(secs => v_secs);
END
$$;

-- _check_flag(p_func, p_arg, p_value): a boolean argument must not be NULL
-- (22004).
CREATE OR REPLACE FUNCTION pglease._check_flag(p_func text, p_arg text, p_value boolean)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p_value IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, p_arg),
            HINT = format('Pass %s as true or false.', p_arg);
    END IF;
END
$$;

-- _tenure_ok(p_name, p_holder, p_fence): whether the arguments that name a
-- lease tenure are all valid (1 to 256 bytes; a fence >= 0), the one test
-- valid input takes before pglease._check_tenure names what is wrong. An
-- SQL function, inlined where it is called.
CREATE OR REPLACE FUNCTION pglease._tenure_ok(p_name text, p_holder text, p_fence bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (octet_length(p_name) BETWEEN 1 AND 256
            AND octet_length(p_holder) BETWEEN 1 AND 256
            AND p_fence >= 0) IS TRUE
$$;

-- _check_tenure(p_func, p_name, p_holder, p_fence): the checks of the
-- arguments that name a lease tenure (pglease._check_text, _check_fence),
-- in that order.
CREATE OR REPLACE FUNCTION pglease._check_tenure(p_func text, p_name text, p_holder text, p_fence bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    PERFORM pglease._check_text(p_func, 'p_name', p_name);
    PERFORM pglease._check_text(p_func, 'p_holder', p_holder);
    PERFORM pglease._check_fence(p_func, p_fence);
END
$$;

-- _slot_ok(p_scope, p_slot, p_holder, p_fence): as pglease._tenure_ok, for
-- the arguments that name a slot tenure (a slot number 1 to 1000000).
CREATE OR REPLACE FUNCTION pglease._slot_ok(p_scope text, p_slot integer, p_holder text, p_fence bigint)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (octet_length(p_scope) BETWEEN 1 AND 256
            AND p_slot BETWEEN 1 AND 1000000
            AND octet_length(p_holder) BETWEEN 1 AND 256
            AND p_fence >= 0) IS TRUE
$$;

-- _check_slot(p_func, p_scope, p_slot, p_holder, p_fence): the checks of
-- the arguments that name a slot tenure, in that order.
CREATE OR REPLACE FUNCTION pglease._check_slot(p_func text, p_scope text, p_slot integer,
                                               p_holder text, p_fence bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    PERFORM pglease._check_text(p_func, 'p_scope', p_scope);
    PERFORM pglease._check_int(p_func, 'p_slot', p_slot, 1, 1000000);
    PERFORM pglease._check_text(p_func, 'p_holder', p_holder);
    PERFORM pglease._check_fence(p_func, p_fence);
END
$$;

-- _ttl(p_ttl): p_ttl as plain seconds (as pglease._check_ttl returns it)
-- when it is more than 0 and at most 24 hours, else NULL: callers write
-- coalesce(pglease._ttl(p_ttl), pglease._check_ttl(func, p_ttl)), which
-- raises only for a bad TTL. An SQL function, inlined where it is called
-- (date_part's float is the same number of microseconds as extract's
-- numeric, and cheaper).
CREATE OR REPLACE FUNCTION pglease._ttl(p_ttl interval)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN date_part('epoch', p_ttl) > 0 AND date_part('epoch', p_ttl) <= 86400
                THEN make_interval(secs => date_part('epoch', p_ttl)) END
$$;
