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
-- latency); on 17 and later that holds whatever it runs. A session that
-- turns those timeouts off again (or, on 13 to 16, keeps sending new
-- statements, each shorter than the time left) is ended by the next
-- takeover 200 ms after the tenure's end, or by pglease.force_release,
-- when the schema owner may signal backends (see
-- pglease._lock_for_takeover).
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

    -- Known as this lease's fenced transaction (see
    -- pglease._lock_for_takeover), without ever waiting for the key.
    PERFORM pg_catalog.pg_try_advisory_xact_lock_shared(pglease._fenced_key(p_name, p_fence));

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

-- _lock_for_takeover(p_name, p_fence, p_end): locks lease p_name's row FOR
-- NO KEY UPDATE for a takeover of its tenure p_fence, which ended at p_end,
-- or for pglease.force_release (p_end: now). A fenced transaction of that tenure
-- (pglease.assert_held, run_begin, run_end: FOR SHARE until it ends) may
-- hold the row; it bounds itself by the timeouts assert_held sets, which
-- its own session can turn off again. So this waits for the lock at most
-- until p_end + 200 ms (those timeouts, when on, end the transaction
-- first, at 100 ms); then it terminates the backends whose fenced
-- transactions of that tenure are still open (pg_terminate_backend: the
-- schema owner must be a superuser or a member of pg_signal_backend, and
-- superusers' backends are never ended), and waits on for whatever else
-- holds the row (a takeover in flight) as long as that lasts. Without the
-- privilege it raises a WARNING naming the backends and waits on.
-- Fenced transactions are found by the advisory lock they take
-- (pglease._fenced_key of the name and fence; a later tenure's have
-- another): a backend that takes that key itself may be ended too, and so
-- may, once in about four billion, a fenced transaction whose name and
-- fence hash alike. The caller's lock_timeout is restored.
CREATE OR REPLACE FUNCTION pglease._lock_for_takeover(p_name text, p_fence bigint, p_end timestamptz)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_timeout text := current_setting('lock_timeout');
    v_ms      bigint;
    v_pid     integer;
BEGIN
    v_ms := ceil(extract(epoch FROM p_end + interval '200 milliseconds' - clock_timestamp()) * 1000)::bigint;
    PERFORM set_config('lock_timeout', greatest(v_ms, 1)::text, true);
    BEGIN
        PERFORM 1 FROM pglease.leases AS l WHERE l.name = p_name FOR NO KEY UPDATE;
        PERFORM set_config('lock_timeout', v_timeout, true);
        RETURN;
    EXCEPTION WHEN lock_not_available THEN
        NULL;
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    FOR v_pid IN
        SELECT k.pid FROM pg_catalog.pg_locks AS k
        WHERE k.locktype = 'advisory' AND k.granted AND k.pid <> pg_backend_pid()
          AND (k.classid, k.objid, k.objsubid) =
              ((pglease._fenced_key(p_name, p_fence) >> 32)::oid,
               (pglease._fenced_key(p_name, p_fence) & 4294967295)::oid, 1::smallint)
    LOOP
        BEGIN
            PERFORM pg_catalog.pg_terminate_backend(v_pid);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING USING
                MESSAGE = format('pglease: lease %L: the fenced transaction of backend %s is still open 200 ms after its tenure (fence %s) ended, and the schema owner may not end it',
                                 p_name, v_pid, p_fence),
                HINT = 'GRANT pg_signal_backend TO the role that owns schema pglease, or end the backend by hand.';
        END;
    END LOOP;
    PERFORM 1 FROM pglease.leases AS l WHERE l.name = p_name FOR NO KEY UPDATE;
END
$$;

-- _fenced_key(p_name, p_fence): the advisory lock key a fenced transaction
-- of tenure p_fence of lease p_name holds shared (see
-- pglease._lock_for_takeover): a constant in the high 32 bits, a hash of
-- the tenure in the low ones. A scalar SQL function, inlined where called.
CREATE OR REPLACE FUNCTION pglease._fenced_key(p_name text, p_fence bigint)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (1885825388::bigint << 32) | (pg_catalog.hashtext(p_fence::text || '/' || p_name)::bigint & 4294967295)
$$;
