-- A change proposed for pglease's SQL, applied by the benchmark to a
-- scratch database of its own to measure it against the migrated functions.
--
-- Argument checks off the hot path (shown on renew; the same applies to
-- every entry point). Each PERFORM of a _check_* helper runs a PL/pgSQL
-- function with its own SET search_path, i.e. a GUC save and restore per
-- call; measured by hand, the four of renew add up to about half the
-- UPDATE's own server time. One inline test decides; the helpers run only
-- when it fails, to raise exactly the errors they raise today. Same
-- contract, same TTL normalisation as _check_ttl.
CREATE OR REPLACE FUNCTION pglease.renew(
    p_name text, p_holder text, p_fence bigint, p_ttl interval,
    OUT renewed boolean, OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now  timestamptz := clock_timestamp();
    v_secs numeric := extract(epoch FROM p_ttl);
    v_ttl  interval;
BEGIN
    IF (octet_length(p_name) NOT BETWEEN 1 AND 256
        OR octet_length(p_holder) NOT BETWEEN 1 AND 256
        OR p_fence < 0 OR v_secs <= 0 OR v_secs > 86400) IS NOT FALSE THEN
        PERFORM pglease._check_text('renew', 'p_name', p_name);
        PERFORM pglease._check_text('renew', 'p_holder', p_holder);
        PERFORM pglease._check_fence('renew', p_fence);
        PERFORM pglease._check_ttl('renew', p_ttl);
    END IF;
    v_ttl := make_interval(secs => v_secs);

    UPDATE pglease.leases AS l
    SET expires_at = v_now + v_ttl
    WHERE l.name = p_name
      AND l.holder = p_holder
      AND l.fence = p_fence
      AND l.expires_at > v_now;
    renewed := FOUND;
    IF renewed THEN
        expires_at := v_now + v_ttl;
        expires_in := v_ttl;
    END IF;
END
$$;
