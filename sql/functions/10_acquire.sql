-- pglease.acquire(p_name, p_holder, p_ttl): take a lease, or learn who has it.
--
-- Time is the server clock read once when the call starts (clock_timestamp(),
-- not the caller's transaction start).
-- Returns one row:
--   * lease free, released or expired: acquired = true, a new tenure with
--     fence = previous fence + 1 (for a new or purged name: one more than
--     the fence floor, see pglease.purge), expires_at = now + p_ttl.
--   * lease live and held by p_holder: acquired = true, same fence (a retry
--     after a lost reply is the same tenure), expires_at re-pinned to now + p_ttl.
--   * lease live and held by another holder: acquired = false, and holder,
--     fence, expires_at, expires_in describe that holder's tenure.
-- expires_in is expires_at - now. A refused caller is registered as a
-- waiter until that expiry, so that a release of the lease NOTIFYs channel
-- 'pglease' (see pglease._wake).
-- Raises 22004 for a NULL argument, 22023 for a name or holder not 1 to 256
-- bytes or a TTL not in (0, 24 hours]; nothing is changed then.
-- A refused call takes no row lock, so it never delays the holder's renewals.
-- It takes the lease's advisory wait lock shared (waiting for a release in
-- flight to commit), so its registration and a release cannot miss each
-- other.
CREATE OR REPLACE FUNCTION pglease.acquire(
    p_name text, p_holder text, p_ttl interval,
    OUT acquired boolean, OUT fence bigint, OUT holder text,
    OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := clock_timestamp();
    v_ttl interval;
    v_floor bigint;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND octet_length(p_holder) BETWEEN 1 AND 256) IS NOT TRUE THEN
        PERFORM pglease._check_text('acquire', 'p_name', p_name);
        PERFORM pglease._check_text('acquire', 'p_holder', p_holder);
    END IF;
    v_ttl := make_interval(secs => extract(epoch FROM p_ttl));
    IF (v_ttl > interval '0' AND v_ttl <= interval '24 hours') IS NOT TRUE THEN
        v_ttl := pglease._check_ttl('acquire', p_ttl);
    END IF;

    -- Each pass either decides or sees a row change under it; a concurrent
    -- change can only happen a bounded number of times in a row.
    FOR attempt IN 1..10 LOOP
        -- Take over a free or expired lease, or re-pin our own. The WHERE is
        -- rechecked against the newest row version after any lock wait.
        UPDATE pglease.leases AS l
        SET holder      = p_holder,
            fence       = CASE WHEN l.holder = p_holder AND l.expires_at > v_now
                               THEN l.fence ELSE l.fence + 1 END,
            acquired_at = CASE WHEN l.holder = p_holder AND l.expires_at > v_now
                               THEN l.acquired_at ELSE v_now END,
            expires_at  = v_now + v_ttl
        WHERE l.name = p_name
          AND (l.holder IS NULL OR l.expires_at <= v_now OR l.holder = p_holder)
        RETURNING l.fence INTO fence;
        IF FOUND THEN
            acquired := true;
            holder := p_holder;
            expires_at := v_now + v_ttl;
            expires_in := v_ttl;
            RETURN;
        END IF;

        -- Held by someone else, or no row yet: look without locking the row.
        SELECT l.holder, l.fence, l.expires_at
        INTO holder, fence, expires_at
        FROM pglease.leases AS l
        WHERE l.name = p_name;
        IF NOT FOUND THEN
            -- A new row starts above the fence floor (see pglease.purge).
            INSERT INTO pglease.leases AS l (name, holder, fence, acquired_at, expires_at)
            VALUES (p_name, p_holder,
                    coalesce((SELECT f.lease_fence FROM pglease.fence_floor AS f), 0) + 1,
                    v_now, v_now + v_ttl)
            ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
            RETURNING l.fence INTO fence;
            IF FOUND THEN
                -- The insert may have waited for a purge of this very name
                -- to commit, after it read the floor: read it again, now
                -- that the purge is visible, and stay above it.
                SELECT f.lease_fence INTO v_floor FROM pglease.fence_floor AS f;
                IF v_floor >= fence THEN
                    fence := v_floor + 1;
                    UPDATE pglease.leases AS l SET fence = v_floor + 1 WHERE l.name = p_name;
                END IF;
                acquired := true;
                holder := p_holder;
                expires_at := v_now + v_ttl;
                expires_in := v_ttl;
                RETURN;
            END IF;
            CONTINUE; -- another session created the row first
        END IF;
        IF holder <> p_holder AND expires_at > v_now THEN
            -- Before refusing, take the wait lock and look again (see
            -- pglease._wake), then register as a waiter.
            PERFORM pglease._wait_lock('lease', p_name);
            SELECT l.holder, l.fence, l.expires_at
            INTO holder, fence, expires_at
            FROM pglease.leases AS l
            WHERE l.name = p_name;
            IF holder <> p_holder AND expires_at > v_now THEN
                acquired := false;
                expires_in := expires_at - v_now;
                PERFORM pglease._wait_register('lease', p_name, expires_at);
                RETURN;
            END IF;
        END IF;
        -- Released or expired since the UPDATE looked: try again.
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '40001',
        MESSAGE = format('pglease.acquire: lease %L changed on every attempt; retry the call', p_name);
END
$$;
