-- Template of the lock-then-wait function of each tenure table, rendered
-- once per table into sql/functions/03_row_locks.sql by scripts/gen-rules.sh
-- (make generate). @NAME@ placeholders: FUNC, ARGS, PARAMS, WHAT, TABLE,
-- A (the table's alias), KEY (the row's key equality).
--8<-- body
-- @FUNC@(@ARGS@):
-- the row of @WHAT@ locked FOR NO KEY UPDATE when it is the live
-- tenure (p_holder, p_fence) of role p_role, or NULL, with no lock kept,
-- when it is not.
-- Returns the locked row version's ctid (it stays where it is until the
-- caller's transaction ends: update it by ctid). A row nobody else has
-- locked is locked at once; a row locked by a transaction in flight (the
-- holder's own fenced write or renewal, a takeover, a purge) is waited for,
-- in a subtransaction, and then judged live or not on the clock read after
-- the wait: a lock taken for a tenure that ended meanwhile goes with the
-- subtransaction, so it never delays a takeover or another holder's
-- renewals. A row that is not the caller's live tenure is not waited for.
CREATE OR REPLACE FUNCTION pglease.@FUNC@(
    @PARAMS@)
RETURNS tid
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_tid     tid;
    v_expires timestamptz;
BEGIN
    SELECT @A@.ctid INTO v_tid FROM @TABLE@ AS @A@
    WHERE @KEY@
      AND pglease._live_tenure(@A@.holder, @A@.holder_role, @A@.fence, @A@.expires_at,
                               p_holder, p_role, p_fence, clock_timestamp())
    FOR NO KEY UPDATE SKIP LOCKED;
    IF FOUND THEN
        RETURN v_tid;
    END IF;
    PERFORM 1 FROM @TABLE@ AS @A@
    WHERE @KEY@
      AND pglease._live_tenure(@A@.holder, @A@.holder_role, @A@.fence, @A@.expires_at,
                               p_holder, p_role, p_fence, clock_timestamp());
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    BEGIN
        SELECT @A@.ctid, @A@.expires_at INTO v_tid, v_expires FROM @TABLE@ AS @A@
        WHERE @KEY@
          AND pglease._live_tenure(@A@.holder, @A@.holder_role, @A@.fence, @A@.expires_at,
                                   p_holder, p_role, p_fence, '-infinity')
        FOR NO KEY UPDATE;
        IF NOT FOUND OR v_expires <= clock_timestamp() THEN
            RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: ended meanwhile';
        END IF;
        RETURN v_tid;
    EXCEPTION WHEN SQLSTATE 'PGL03' THEN
        RETURN NULL;
    END;
END
$$;
