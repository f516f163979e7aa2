-- pglease.assert_held(p_name, p_fence): guard a fenced write.
--
-- Use inside the transaction that makes the protected write:
--     BEGIN;
--     SELECT pglease.assert_held('orders-dispatcher', 42);
--     UPDATE ...;   -- the protected write
--     COMMIT;
-- Returns normally when p_fence is the fence of a live tenure of lease p_name,
-- and then holds a FOR SHARE lock on the lease row until the caller's
-- transaction ends: a takeover (which must update that row) cannot commit
-- between this check and the caller's commit, so the write is ordered before
-- any later tenure. The clock is read after the lock is granted.
-- Raises SQLSTATE PGL01 when the lease is free, expired, unknown, or has
-- another fence (the message says which); 22004 for NULL arguments, 22023
-- for a bad name or a negative fence. Outside a transaction block the lock is
-- released at once, which makes the check useless: always wrap it.
CREATE OR REPLACE FUNCTION pglease.assert_held(p_name text, p_fence bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_holder     text;
    v_fence      bigint;
    v_expires_at timestamptz;
    v_now        timestamptz;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('assert_held', 'p_name', p_name);
        PERFORM pglease._check_fence('assert_held', p_fence);
    END IF;

    SELECT l.holder, l.fence, l.expires_at
    INTO v_holder, v_fence, v_expires_at
    FROM pglease.leases AS l
    WHERE l.name = p_name
    FOR SHARE;
    v_now := clock_timestamp();

    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL01',
            MESSAGE = format('pglease: lease %L is not held with fence %s: no such lease',
                             p_name, p_fence),
            HINT = 'Acquire the lease before writing under its fence.';
    END IF;
    IF v_fence <> p_fence THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL01',
            MESSAGE = format('pglease: lease %L is not held with fence %s: current fence is %s',
                             p_name, p_fence, v_fence),
            HINT = 'Your tenure is over; stop writing and acquire the lease again.';
    END IF;
    IF v_holder IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL01',
            MESSAGE = format('pglease: lease %L is not held with fence %s: it was released',
                             p_name, p_fence),
            HINT = 'Your tenure is over; stop writing and acquire the lease again.';
    END IF;
    IF v_expires_at <= v_now THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL01',
            MESSAGE = format('pglease: lease %L is not held with fence %s: it expired %s ago',
                             p_name, p_fence, v_now - v_expires_at),
            HINT = 'Your tenure is over; stop writing and acquire the lease again.';
    END IF;
END
$$;
