-- Argument checks shared by every pglease function. Internal: not granted to
-- clients; the SECURITY DEFINER entry points call them as the owner.
--
-- Contract: each returns normally when the argument is acceptable and raises
-- otherwise, naming the function and the argument:
--   SQLSTATE 22004 (null_value_not_allowed) for NULL,
--   SQLSTATE 22023 (invalid_parameter_value) for a value out of range.

-- _check_text: p_value must be 1 to 256 bytes long.
CREATE FUNCTION pglease._check_text(p_func text, p_arg text, p_value text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
CREATE FUNCTION pglease._check_ttl(p_func text, p_ttl interval)
RETURNS interval
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
CREATE FUNCTION pglease._check_fence(p_func text, p_fence bigint)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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
CREATE FUNCTION pglease._check_int(p_func text, p_arg text, p_value integer,
                                   p_min integer, p_max integer)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
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

-- _notify: tells listeners on channel 'pglease' that a holder changed.
-- Payload (JSON): {"kind": "lease"|"slot", "event": "acquired"|"released",
-- "name": <lease name or slot scope>, "slot": <slot or null>, "fence": n,
-- "holder": <holder>}. Delivered when the caller's transaction commits.
CREATE FUNCTION pglease._notify(p_kind text, p_event text, p_name text,
                                p_slot integer, p_fence bigint, p_holder text)
RETURNS void
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
        'kind', p_kind, 'event', p_event, 'name', p_name,
        'slot', p_slot, 'fence', p_fence, 'holder', p_holder)::text);
$$;
