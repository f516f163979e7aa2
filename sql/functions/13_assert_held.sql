-- pglease.assert_held(p_name, p_fence): guard a fenced write.
--
-- Use inside the transaction that makes the protected write:
--     BEGIN;
--     SELECT pglease.assert_held('orders-dispatcher', 42);
--     UPDATE ...;   -- the protected write
--     COMMIT;
-- Returns normally when p_fence is the fence of a live tenure of lease p_name
-- taken by the caller's role (session_user), and then holds a FOR SHARE lock
-- on the lease row until the caller's transaction ends: a takeover (which
-- must update that row) cannot commit between this check and the caller's
-- commit, so the write is ordered before any later tenure. The clock is read
-- after the lock is granted. A caller of another role takes no lock.
-- Bound on how long the transaction can keep a takeover out: the tenure
-- cannot be renewed while the lock is held (renewals wait for it), and this
-- call lowers, for the rest of the transaction (set_config(..., true)),
-- statement_timeout and idle_in_transaction_session_timeout to the time
-- left in the tenure plus 100 ms (never raising a lower setting); on
-- PostgreSQL 17 and later also transaction_timeout, when the session has
-- none running yet. So a transaction that stalls after this call (idle, in
-- one long statement such as pg_sleep, a client paused or cut off) loses
-- its locks at most 100 ms after the tenure ends (plus the server's timer
-- latency); on 17 and later that holds whatever it runs. On 13 to 16 a
-- client that keeps sending new statements, each shorter than the time
-- left, can stay longer: the bound needs transaction_timeout there.
-- Raises SQLSTATE PGL01 when the lease is free, expired, unknown, has
-- another fence, or was taken by another role (the message says which);
-- 22004 for NULL arguments, 22023 for a bad name or a negative fence.
-- Outside a transaction block the lock is released at once, which makes the
-- check useless: always wrap it.
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
    v_ms         bigint;
    v_setting    text;
BEGIN
    -- Valid input takes this one test; the checks raise the precise error.
    IF (octet_length(p_name) BETWEEN 1 AND 256
        AND p_fence >= 0) IS NOT TRUE THEN
        PERFORM pglease._check_text('assert_held', 'p_name', p_name);
        PERFORM pglease._check_fence('assert_held', p_fence);
    END IF;

    -- Only a tenure of the caller's role is locked: another role's is
    -- refused before any lock is taken, so that seeing a fence is not
    -- enough to hold up its renewals or a takeover, nor to learn its fence.
    -- (A tenure from before 0.2.0 has no role and is anyone's.) The row
    -- read is the one locked: after a wait, the newest version, checked
    -- again.
    SELECT l.holder, l.fence, l.expires_at
    INTO v_holder, v_fence, v_expires_at
    FROM pglease.leases AS l
    WHERE l.name = p_name AND coalesce(l.holder_role = session_user, true)
    FOR SHARE;
    IF NOT FOUND THEN
        IF EXISTS (SELECT FROM pglease.leases AS l
                   WHERE l.name = p_name AND l.holder_role <> session_user) THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL01',
                MESSAGE = format('pglease: lease %L is not held with fence %s by role %I: another role took it',
                                 p_name, p_fence, session_user),
                HINT = 'Assert a lease from the database role that acquired it.';
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'PGL01',
            MESSAGE = format('pglease: lease %L is not held with fence %s: no such lease',
                             p_name, p_fence),
            HINT = 'Acquire the lease before writing under its fence.';
    END IF;
    v_now := clock_timestamp();

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

    -- The bound above: the time left plus 100 ms, as milliseconds. A
    -- setting of 0 (none, the usual case) is lowered without parsing it.
    v_ms := ceil(extract(epoch FROM v_expires_at - v_now) * 1000)::bigint + 100;
    v_setting := current_setting('statement_timeout');
    IF v_setting = '0' OR v_setting::interval > make_interval(secs => v_ms / 1000.0) THEN
        PERFORM set_config('statement_timeout', v_ms::text, true);
    END IF;
    v_setting := current_setting('idle_in_transaction_session_timeout');
    IF v_setting = '0' OR v_setting::interval > make_interval(secs => v_ms / 1000.0) THEN
        PERFORM set_config('idle_in_transaction_session_timeout', v_ms::text, true);
    END IF;
    -- transaction_timeout exists from PostgreSQL 17 on (NULL before).
    IF current_setting('transaction_timeout', true)::interval = interval '0' THEN
        PERFORM set_config('transaction_timeout', v_ms::text, true);
    END IF;
END
$$;
