-- Tenure history (0.4.0, #52, docs/tenure-history.md): for names under a
-- prefix turned on with pglease.history_enable, every tenure of a lease or
-- a slot gets a row of pglease.tenures, written by triggers on
-- pglease.leases and pglease.slots in the very statement that grants or
-- ends it, so no function of the lease protocol has a history rule of its
-- own (pglease.force_release alone says that its end was forced). A
-- renewal changes neither fence nor holder: the triggers' WHEN conditions
-- keep it from calling anything, and it stays a HOT update.
--
-- Locks: a trigger writes only the rows of the tenure whose lease or slot
-- row its statement holds locked (the open row of the tenure that ends,
-- the new row of the one that starts). Whoever else would write those
-- rows waits for that row lock first, as it did without history; so a
-- history write never makes one holder's open transaction delay another's
-- renew, grant or takeover, and the exclusion constraint's check never
-- waits for an uncommitted row of another transaction (only a forged row
-- could make it). A purge closes the open rows of the lease rows it
-- deletes, which it holds locked too.

-- _history_on(p_name): whether the tenures of name p_name (a lease name
-- or a slot scope) are written: some prefix turned on starts it. PL/pgSQL,
-- whose plan a session keeps: the triggers ask on every grant and end,
-- and a SQL function (not inlinable: a subquery) is planned again in
-- every transaction.
CREATE OR REPLACE FUNCTION pglease._history_on(p_name text)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN EXISTS (SELECT FROM pglease.history_prefixes AS h
                   WHERE pg_catalog.starts_with(p_name, h.prefix));
END
$$;

-- _tenure_count(p_how): counts one tenure ended p_how (the exporter's
-- counter, pglease.tenure_ends).
CREATE OR REPLACE FUNCTION pglease._tenure_count(p_how text)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    CASE p_how
        WHEN 'released' THEN PERFORM pg_catalog.nextval('pglease.tenures_released'::regclass);
        WHEN 'handed_over' THEN PERFORM pg_catalog.nextval('pglease.tenures_handed_over'::regclass);
        WHEN 'forced' THEN PERFORM pg_catalog.nextval('pglease.tenures_forced'::regclass);
        WHEN 'expired' THEN PERFORM pg_catalog.nextval('pglease.tenures_expired'::regclass);
        WHEN 'taken_over' THEN PERFORM pg_catalog.nextval('pglease.tenures_taken_over'::regclass);
        ELSE PERFORM pg_catalog.nextval('pglease.tenures_purged'::regclass);
    END CASE;
END
$$;

-- _tenure_before(p_name, p_slot, p_fence): the tenure of name p_name and
-- slot p_slot with the next lower fence than p_fence, or no row. One
-- backward probe of the primary key, found by a row comparison that only
-- the primary key serves, however many tenures the name has kept
-- (equality on name and slot would let the planner take
-- tenures_no_overlap's index and sort every tenure of the name). A SQL
-- function called in FROM, inlined where called.
CREATE OR REPLACE FUNCTION pglease._tenure_before(p_name text, p_slot integer, p_fence bigint)
RETURNS TABLE (fence bigint, granted_at timestamptz, ended_at timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT b.fence, b.granted_at, b.ended_at
    FROM (SELECT e.name, e.slot, e.fence, e.granted_at, e.ended_at FROM pglease.tenures AS e
          WHERE (e.name, e.slot, e.fence) < (p_name, p_slot, p_fence)
          ORDER BY e.name DESC, e.slot DESC, e.fence DESC LIMIT 1) AS b
    WHERE (b.name, b.slot) = (p_name, p_slot);
$$;

-- _tenure_write(p_name, p_slot, p_old_*, p_new_*): the one rule of the
-- history, for the row of a lease (p_slot 0) or a slot that changed from
-- the tenure p_old_* to p_new_* (holder NULL: free).
--   * a fence raised in place by the insert that made the row (the same
--     holder, granted at the same time): the open row's fence follows;
--   * the old tenure ends when the holder goes (released, handed_over, or
--     expired when it had run out: ended_at the row's new end) or when a
--     new fence is granted (expired when the same holder of the same role
--     took it again, else taken_over: ended_at its expiry);
--   * a new fence with a holder starts a tenure: a row open from its grant.
-- The new row's time range starts at the grant, after the old one's end
-- (every grant waits for the end on the server's clock), so
-- tenures_no_overlap accepts it; a grant made while the old tenure was
-- live (a bug, or a forged UPDATE) fails its statement there. Times stay
-- in order when the server's clock was stepped back (or a row's times
-- were edited by hand), so that a clock step never makes a grant, end or
-- purge fail here: an end is never before its grant; a grant is never
-- before the last tenure's grant, nor before its end when that tenure
-- ended in an earlier statement.
CREATE OR REPLACE FUNCTION pglease._tenure_write(
    p_name text, p_slot integer,
    p_old_holder text, p_old_role text, p_old_fence bigint, p_old_acquired timestamptz,
    p_old_expires timestamptz, p_old_requested boolean,
    p_new_holder text, p_new_role text, p_new_fence bigint, p_new_acquired timestamptz,
    p_new_expires timestamptz, p_new_units integer)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_how   text;
    v_end   timestamptz;
    v_grant timestamptz;
BEGIN
    IF p_old_fence IS DISTINCT FROM p_new_fence AND p_old_acquired = p_new_acquired
       AND p_old_holder IS NOT DISTINCT FROM p_new_holder THEN
        UPDATE pglease.tenures AS t SET fence = p_new_fence
        WHERE t.name = p_name AND t.slot = p_slot AND t.fence = p_old_fence AND t.ended_at IS NULL;
        RETURN;
    END IF;
    IF p_old_holder IS NOT NULL THEN
        IF p_old_fence IS DISTINCT FROM p_new_fence THEN
            v_end := p_old_expires;
            v_how := CASE WHEN p_new_holder = p_old_holder AND p_new_role IS NOT DISTINCT FROM p_old_role
                          THEN 'expired' ELSE 'taken_over' END;
        ELSE
            v_end := p_new_expires;
            v_how := CASE WHEN p_old_expires <= p_new_expires THEN 'expired'
                          WHEN p_old_requested THEN 'handed_over'
                          ELSE 'released' END;
        END IF;
        UPDATE pglease.tenures AS t SET ended_at = greatest(v_end, t.granted_at), ended_how = v_how
        WHERE t.name = p_name AND t.slot = p_slot AND t.fence = p_old_fence AND t.ended_at IS NULL;
        IF FOUND THEN
            PERFORM pglease._tenure_count(v_how);
        END IF;
    END IF;
    IF p_new_holder IS NOT NULL AND p_old_fence IS DISTINCT FROM p_new_fence THEN
        -- Never before the last tenure's grant, nor before its end when it
        -- ended in an earlier call; an end written just above is not
        -- waited for, so that a grant before it stays an overlap.
        v_grant := greatest(p_new_acquired, CASE
            WHEN p_old_holder IS NOT NULL THEN p_old_acquired
            ELSE (SELECT b.ended_at FROM pglease._tenure_before(p_name, p_slot, p_new_fence) AS b) END);
        INSERT INTO pglease.tenures AS t (name, slot, fence, holder, holder_role, units, granted_at)
        VALUES (p_name, p_slot, p_new_fence, p_new_holder, p_new_role, p_new_units, v_grant);
    END IF;
END
$$;

-- _tenure_lease(): the trigger of pglease.leases' grants and ends (see
-- pglease._tenure_write), for names whose history is on.
CREATE OR REPLACE FUNCTION pglease._tenure_lease()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT pglease._history_on(NEW.name) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM pglease._tenure_write(NEW.name, 0, NULL, NULL, NULL, NULL, NULL, false,
                                      NEW.holder, NEW.holder_role, NEW.fence, NEW.acquired_at,
                                      NEW.expires_at, NULL);
    ELSE
        PERFORM pglease._tenure_write(NEW.name, 0, OLD.holder, OLD.holder_role, OLD.fence,
                                      OLD.acquired_at, OLD.expires_at,
                                      OLD.release_requested_at IS NOT NULL,
                                      NEW.holder, NEW.holder_role, NEW.fence, NEW.acquired_at,
                                      NEW.expires_at, NULL);
    END IF;
    RETURN NULL;
END
$$;

-- _tenure_slot(): the same for pglease.slots, per slot, with its units.
CREATE OR REPLACE FUNCTION pglease._tenure_slot()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF NOT pglease._history_on(NEW.scope) THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM pglease._tenure_write(NEW.scope, NEW.slot, NULL, NULL, NULL, NULL, NULL, false,
                                      NEW.holder, NEW.holder_role, NEW.fence, NEW.acquired_at,
                                      NEW.expires_at, NEW.units);
    ELSE
        PERFORM pglease._tenure_write(NEW.scope, NEW.slot, OLD.holder, OLD.holder_role, OLD.fence,
                                      OLD.acquired_at, OLD.expires_at, false,
                                      NEW.holder, NEW.holder_role, NEW.fence, NEW.acquired_at,
                                      NEW.expires_at, NEW.units);
    END IF;
    RETURN NULL;
END
$$;

-- _tenure_purged(): the statement trigger of deletes from pglease.leases
-- and pglease.slots (pglease.purge): the open rows of the deleted rows'
-- tenures (a lease's slot 0, a slot's its number) end 'purged' at their
-- expiry, counted in pglease.tenures_purged. One statement whatever the
-- number of rows deleted; nothing when no prefix is on.
CREATE OR REPLACE FUNCTION pglease._tenure_purged()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name text := CASE TG_TABLE_NAME WHEN 'leases' THEN 'name' ELSE 'scope' END;
    v_n    bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM pglease.history_prefixes AS h) THEN
        RETURN NULL;
    END IF;
    -- The row's name and slot read by column name, so that one statement
    -- serves both tables (a lease has no slot: 0).
    WITH closed AS (
        UPDATE pglease.tenures AS t SET ended_at = greatest(g.expires_at, t.granted_at), ended_how = 'purged'
        FROM (SELECT pg_catalog.to_jsonb(d) ->> v_name AS name,
                     coalesce((pg_catalog.to_jsonb(d) ->> 'slot')::integer, 0) AS slot,
                     d.fence, d.expires_at
              FROM gone AS d) AS g
        WHERE t.name = g.name AND t.slot = g.slot AND t.fence = g.fence AND t.ended_at IS NULL
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM closed;
    IF v_n > 0 THEN
        PERFORM pg_catalog.nextval('pglease.tenures_purged'::regclass)
        FROM pg_catalog.generate_series(1, v_n) AS i;
    END IF;
    RETURN NULL;
END
$$;

-- _tenure_check(): for every row written, by the functions or by hand
-- (the schema owner's forged row included), per name and slot:
--   * fences strictly increase in the order of the grants: the row with
--     the next lower fence was granted no later, the one with the next
--     higher fence no earlier; else 23514;
--   * no tenure beside an open one: the next lower row is ended, and an
--     open row has no next higher one (an open tenure runs on to any later
--     time); else 23P01, as tenures_no_overlap would say of a range.
-- The statement fails then. Two primary-key probes, however many tenures
-- are kept. A row whose fence and grant stay (an end being written) is
-- not looked at. Concurrent forged inserts of one name are not serialised
-- here (tenures_one_open still allows one open tenure); the functions'
-- own writes are, by the row lock of the lease or slot.
CREATE OR REPLACE FUNCTION pglease._tenure_check()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_name  text;
    v_slot  integer;
    v_fence bigint;
    v_at    timestamptz;
    v_open  boolean;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.name, NEW.slot, NEW.fence, NEW.granted_at)
           IS NOT DISTINCT FROM (OLD.name, OLD.slot, OLD.fence, OLD.granted_at) THEN
            RETURN NEW;
        END IF;
    END IF;
    -- The neighbours in primary-key order: one index probe each (see
    -- pglease._tenure_before).
    SELECT b.fence, b.granted_at, b.ended_at IS NULL INTO v_fence, v_at, v_open
    FROM pglease._tenure_before(NEW.name, NEW.slot, NEW.fence) AS b;
    IF FOUND THEN
        IF v_at > NEW.granted_at THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('pglease: tenure of %L (slot %s) with fence %s granted at %s, before a tenure with a lower fence (granted at %s)',
                                 NEW.name, NEW.slot, NEW.fence, NEW.granted_at, v_at),
                HINT = 'Fences strictly increase in the order of the grants (docs/tenure-history.md).';
        END IF;
        IF v_open THEN
            RAISE EXCEPTION USING ERRCODE = '23P01',
                MESSAGE = format('pglease: tenure of %L (slot %s) with fence %s overlaps the tenure with fence %s, which is still open',
                                 NEW.name, NEW.slot, NEW.fence, v_fence),
                HINT = 'A tenure starts after the one before it has ended (docs/tenure-history.md).';
        END IF;
    END IF;
    SELECT t.name, t.slot, t.fence, t.granted_at
    INTO v_name, v_slot, v_fence, v_at FROM pglease.tenures AS t
    WHERE (t.name, t.slot, t.fence) > (NEW.name, NEW.slot, NEW.fence)
    ORDER BY t.name, t.slot, t.fence LIMIT 1;
    IF (v_name, v_slot) = (NEW.name, NEW.slot) THEN
        IF v_at < NEW.granted_at THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('pglease: tenure of %L (slot %s) with fence %s granted at %s, after a tenure with a higher fence (granted at %s)',
                                 NEW.name, NEW.slot, NEW.fence, NEW.granted_at, v_at),
                HINT = 'Fences strictly increase in the order of the grants (docs/tenure-history.md).';
        END IF;
        IF NEW.ended_at IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23P01',
                MESSAGE = format('pglease: tenure of %L (slot %s) with fence %s is open, and overlaps the later tenure with fence %s',
                                 NEW.name, NEW.slot, NEW.fence, v_fence),
                HINT = 'A tenure starts after the one before it has ended (docs/tenure-history.md).';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- _tenure_forced(p_name, p_slot, p_fence): pglease.force_release's mark:
-- the tenure p_fence it ended while live was forced, not released.
CREATE OR REPLACE FUNCTION pglease._tenure_forced(p_name text, p_slot integer, p_fence bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    UPDATE pglease.tenures AS t SET ended_how = 'forced'
    WHERE t.name = p_name AND t.slot = p_slot AND t.fence = p_fence
      AND t.ended_how IN ('released', 'handed_over');
    IF FOUND THEN
        PERFORM pg_catalog.nextval('pglease.tenures_forced'::regclass);
    END IF;
END
$$;

-- _history_owner_only(p_func): raises 42501, naming p_func, unless the
-- caller is the schema owner or a superuser (pglease._schema_owner): the
-- check of the history functions granted to no role.
CREATE OR REPLACE FUNCTION pglease._history_owner_only(p_func text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF NOT pglease._schema_owner() THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('pglease.%s: role %I may not call it: only the schema owner or a superuser may',
                                        p_func, session_user);
    END IF;
END
$$;

-- _history_admin(p_func, p_prefix): raises 42501 unless the caller may turn
-- the history of p_prefix on or off (pglease._prefix_admin).
CREATE OR REPLACE FUNCTION pglease._history_admin(p_func text, p_prefix text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF pglease._prefix_admin(p_prefix) THEN
        RETURN;
    END IF;
    RAISE EXCEPTION USING ERRCODE = '42501',
        MESSAGE = format('pglease.%s: role %I may not turn the history of prefix %L on or off: only the schema owner, a superuser or a member of the role the prefix is bound to may',
                         p_func, session_user, p_prefix),
        HINT = 'A role bound to a prefix (pglease.prefix_bind) may for that prefix and longer ones; pglease_operator may not.';
END
$$;

-- pglease.history_enable(p_prefix, p_keep): from now on write the tenures
-- of every lease name and slot scope starting with p_prefix to
-- pglease.tenures, and keep each row p_keep after its tenure ended
-- (pglease.purge deletes it then). Tenures live now get rows from their
-- next grant. Turning on a prefix already on sets its p_keep. Returns the
-- keep it had before (NULL: it was off).
-- Who: the schema owner, superusers, and members of the role a bound
-- prefix covering p_prefix belongs to; 42501 for anyone else, a member of
-- pglease_operator included.
-- Raises 22004 for NULL arguments, 22023 for a prefix not 1 to 256 bytes
-- or a p_keep not more than 0 or more than 100 years, 55000 when the
-- exclusion constraint is missing (btree_gist not installed,
-- docs/tenure-history.md#btree_gist); nothing changes then.
CREATE OR REPLACE FUNCTION pglease.history_enable(p_prefix text, p_keep interval, OUT previous_keep interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_keep interval;
BEGIN
    PERFORM pglease._check_text('history_enable', 'p_prefix', p_prefix);
    v_keep := pglease._check_age('history_enable', 'p_keep', p_keep);
    IF v_keep = interval '0' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.history_enable: p_keep must be more than 0, got %s', p_keep),
            HINT = 'Pass how long to keep a tenure after its end, e.g. interval ''30 days''.';
    END IF;
    PERFORM pglease._history_admin('history_enable', p_prefix);
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_constraint AS c
                   WHERE c.conrelid = 'pglease.tenures'::regclass AND c.conname = 'tenures_no_overlap') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'pglease.history_enable: the tenure history needs constraint tenures_no_overlap, which needs extension btree_gist',
            HINT = 'Install btree_gist (Debian: postgresql-contrib) and add the constraint as docs/tenure-history.md says.';
    END IF;
    SELECT h.keep INTO previous_keep FROM pglease.history_prefixes AS h WHERE h.prefix = p_prefix;
    INSERT INTO pglease.history_prefixes AS h (prefix, keep, enabled_by, enabled_at)
    VALUES (p_prefix, v_keep, session_user, clock_timestamp())
    ON CONFLICT ON CONSTRAINT history_prefixes_pkey
    DO UPDATE SET keep = excluded.keep, enabled_by = excluded.enabled_by, enabled_at = excluded.enabled_at;
END
$$;

-- pglease.history_disable(p_prefix): stop writing the tenures of names
-- starting with p_prefix (unless another prefix turned on covers them).
-- Rows written stay, and are purged after the shortest keep of a prefix
-- still on that covers them, or deleted by pglease.history_delete; a
-- tenure open now keeps an open row. Returns the keep it had (NULL: it was
-- off; nothing changes). Who: as pglease.history_enable. Raises 22004 for
-- NULL, 22023 for a prefix not 1 to 256 bytes, 42501 as history_enable.
CREATE OR REPLACE FUNCTION pglease.history_disable(p_prefix text, OUT previous_keep interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('history_disable', 'p_prefix', p_prefix);
    PERFORM pglease._history_admin('history_disable', p_prefix);
    DELETE FROM pglease.history_prefixes AS h WHERE h.prefix = p_prefix
    RETURNING h.keep INTO previous_keep;
END
$$;

-- pglease.history_delete(p_prefix, p_before): delete the rows of
-- pglease.tenures and pglease.tenures_archive of names starting with
-- p_prefix whose tenures ended before p_before (NULL: every ended one).
-- Open tenures' rows stay.
-- Returns how many it deleted. The schema owner's call: granted to no
-- role, and 42501 for a caller that is neither the schema owner nor a
-- superuser. Raises 22004 for a NULL prefix, 22023 for one not 1 to 256
-- bytes; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.history_delete(p_prefix text, p_before timestamptz)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_n bigint;
BEGIN
    PERFORM pglease._check_text('history_delete', 'p_prefix', p_prefix);
    PERFORM pglease._history_owner_only('history_delete');
    WITH gone AS (
        DELETE FROM pglease.tenures AS t
        WHERE pg_catalog.starts_with(t.name, p_prefix) AND t.ended_at IS NOT NULL
          AND (p_before IS NULL OR t.ended_at < p_before)
        RETURNING 1
    ), gone_archived AS (
        DELETE FROM pglease.tenures_archive AS a
        WHERE pg_catalog.starts_with(a.name, p_prefix)
          AND (p_before IS NULL OR a.ended_at < p_before)
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone_archived) INTO v_n;
    RETURN v_n;
END
$$;

-- _history_purge(p_now, p_all, p_role): pglease.purge's part: the rows of
-- tenures that ended longer ago than the shortest keep of the prefixes on
-- that cover their names (rows no prefix on covers stay until
-- pglease.history_delete), of every role for a trusted caller (p_all),
-- else of the tenures p_role held, at most 10,000 per call, leave
-- pglease.tenures: deleted, or, when archiving is on
-- (pglease.history_archive), moved to pglease.tenures_archive in one
-- statement (DELETE ... RETURNING into INSERT), creating the month's
-- partition first when it is missing. Rows locked by anyone are skipped;
-- when another purge is moving rows (it holds the archive's SHARE UPDATE
-- EXCLUSIVE lock), nothing moves now: the rows wait for the next purge.
-- The locks it keeps to its end: the rows it moves or deletes (closed
-- tenures, which no grant, release or claim writes again: they write only
-- open rows) and that archive lock, which conflicts only with another
-- mover and pglease.history_drop_before, not with reads or inserts.
-- Returns how many rows left pglease.tenures.
CREATE OR REPLACE FUNCTION pglease._history_purge(p_now timestamptz, p_all boolean, p_role text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_n     bigint := 0::bigint;
    v_rows  tid[];
    v_month timestamp;
    v_part  text;
    v_archive boolean;
BEGIN
    IF NOT EXISTS (SELECT FROM pglease.history_prefixes AS h) THEN
        RETURN v_n;
    END IF;
    -- No row: archiving was never turned on.
    v_archive := coalesce((SELECT s.archive FROM pglease.history_settings AS s), false);
    IF v_archive THEN
        BEGIN
            LOCK TABLE pglease.tenures_archive IN SHARE UPDATE EXCLUSIVE MODE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            RETURN v_n;
        END;
    END IF;
    v_rows := ARRAY(
        SELECT d.ctid FROM pglease.tenures AS d
        WHERE d.ended_at IS NOT NULL
          AND d.ended_at < p_now - (SELECT min(h.keep) FROM pglease.history_prefixes AS h)
          AND (p_all OR d.holder_role = p_role)
          AND d.ended_at < p_now - (SELECT min(h.keep) FROM pglease.history_prefixes AS h
                                    WHERE pg_catalog.starts_with(d.name, h.prefix))
        LIMIT 10000
        FOR UPDATE SKIP LOCKED);
    IF NOT v_archive THEN
        WITH gone AS (
            DELETE FROM pglease.tenures AS t WHERE t.ctid = ANY (v_rows)
            RETURNING 1
        )
        SELECT count(*) INTO v_n FROM gone;
        RETURN v_n;
    END IF;
    -- The months (UTC) of the rows to move whose partition is missing.
    -- Their names and bounds come from the dates alone; a partition is a
    -- name of its own, so it is made by EXECUTE.
    FOR v_month IN
        SELECT DISTINCT pg_catalog.date_trunc('month', t.ended_at AT TIME ZONE 'UTC')
        FROM pglease.tenures AS t WHERE t.ctid = ANY (v_rows)
    LOOP
        v_part := 'tenures_archive_' || pg_catalog.to_char(v_month, 'YYYYMM');
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_class AS c
                       WHERE c.relnamespace = 'pglease'::regnamespace AND c.relname = v_part) THEN
            EXECUTE pg_catalog.format(
                'CREATE TABLE pglease.%I (LIKE pglease.tenures_archive INCLUDING DEFAULTS INCLUDING CONSTRAINTS,'
                ' PRIMARY KEY (name, slot, fence))', v_part);
            EXECUTE pg_catalog.format(
                'ALTER TABLE pglease.tenures_archive ATTACH PARTITION pglease.%I FOR VALUES FROM (%L) TO (%L)',
                v_part, pg_catalog.to_char(v_month, 'YYYY-MM-DD') || ' 00:00:00+00',
                pg_catalog.to_char(v_month + interval '1 month', 'YYYY-MM-DD') || ' 00:00:00+00');
        END IF;
    END LOOP;
    WITH gone AS (
        DELETE FROM pglease.tenures AS t WHERE t.ctid = ANY (v_rows)
        RETURNING t.name, t.slot, t.fence, t.holder, t.holder_role, t.units, t.granted_at,
                  t.ended_at, t.ended_how
    ), moved AS (
        INSERT INTO pglease.tenures_archive AS a
            (name, slot, fence, holder, holder_role, units, granted_at, ended_at, ended_how)
        SELECT g.name, g.slot, g.fence, g.holder, g.holder_role, g.units, g.granted_at,
               g.ended_at, g.ended_how
        FROM gone AS g
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM moved;
    RETURN v_n;
END
$$;

-- pglease.history_archive(p_on): from now on pglease.purge moves the rows
-- of tenures whose keep has passed to pglease.tenures_archive (p_on true),
-- partitioned by month, where they stay until pglease.history_drop_before
-- drops their month; or deletes them (false, the default). Rows already
-- archived stay either way. Returns the setting it had. Takes the one row
-- of pglease.history_settings (made by the first call), which only this
-- function writes: a call
-- left open delays another call of it, nothing else (purges read the row
-- without locking it). The schema owner's call: granted to no role, and
-- 42501 inside for anyone but the schema owner or a superuser. Raises
-- 22004 for NULL; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.history_archive(p_on boolean, OUT previous boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_on IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.history_archive: p_on must not be NULL',
            HINT = 'Pass true to move old tenures to pglease.tenures_archive, false to delete them.';
    END IF;
    PERFORM pglease._history_owner_only('history_archive');
    -- The row is made by the first call (none at install, so that a
    -- restored dump brings its own), then locked.
    INSERT INTO pglease.history_settings AS s (archive) VALUES (false)
    ON CONFLICT ON CONSTRAINT history_settings_pkey DO NOTHING;
    SELECT s.archive INTO previous FROM pglease.history_settings AS s FOR UPDATE;
    UPDATE pglease.history_settings AS s SET archive = p_on;
END
$$;

-- pglease.history_drop_before(p_before): drop every month of
-- pglease.tenures_archive that ends at or before p_before (a partition,
-- and its tenures, at once). Returns how many months it dropped (0: none
-- ended by then). Rows of pglease.tenures are not touched. Dropping a
-- month locks the archive (ACCESS EXCLUSIVE) to the end of the
-- transaction: reads of the history (pglease.tenures) and a purge moving
-- rows wait for it, and it waits for them; grants, renewals, releases and
-- claims never read the archive and do not wait. The schema owner's call:
-- granted to no role, and 42501 inside for anyone but the schema owner or
-- a superuser. Raises 22004 for NULL, 22023 for a p_before later than now
-- (the tenures of a month not over yet may still be moved); nothing
-- changes then.
CREATE OR REPLACE FUNCTION pglease.history_drop_before(p_before timestamptz)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_part text;
    v_n    integer := 0;
BEGIN
    IF p_before IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.history_drop_before: p_before must not be NULL',
            HINT = 'Pass the time before which archived tenures go, e.g. now() - interval ''1 year''.';
    END IF;
    IF p_before > pg_catalog.clock_timestamp() THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('pglease.history_drop_before: p_before must not be later than now, got %s', p_before),
            HINT = 'Only months already over can be dropped.';
    END IF;
    PERFORM pglease._history_owner_only('history_drop_before');
    FOR v_part IN
        SELECT c.relname::text FROM pg_catalog.pg_inherits AS i
        JOIN pg_catalog.pg_class AS c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'pglease.tenures_archive'::regclass
          AND c.relname ~ '^tenures_archive_[0-9]{6}$'
          AND (pg_catalog.to_date(pg_catalog.substr(c.relname, 17), 'YYYYMM')::timestamp
               + interval '1 month') AT TIME ZONE 'UTC' <= p_before
        ORDER BY c.relname
    LOOP
        EXECUTE pg_catalog.format('DROP TABLE pglease.%I', v_part);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END
$$;

-- pglease.tenures(p_name, p_since): the history of lease name or slot
-- scope p_name, from pglease.tenures and pglease.tenures_archive (one
-- statement, so one snapshot: a tenure being moved shows once): one row
-- per tenure (slot NULL for the lease's, the slot
-- number and units for a slot's) that was open at p_since or began after
-- it (NULL: all kept), oldest grant first. ended_at and ended_how NULL: open
-- (held, or run out and not yet taken over; expires_at says which, from
-- the lease or slot row as it stands). Empty for a name whose history is
-- off. Read-only, for every client (as pglease.lease_status). Raises 22004
-- for a NULL name, 22023 for one not 1 to 256 bytes.
CREATE OR REPLACE FUNCTION pglease.tenures(
    p_name text, p_since timestamptz,
    OUT slot integer, OUT fence bigint, OUT holder text, OUT holder_role text, OUT units integer,
    OUT granted_at timestamptz, OUT ended_at timestamptz, OUT ended_how text,
    OUT expires_at timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('tenures', 'p_name', p_name);
    RETURN QUERY
    SELECT nullif(t.slot, 0), t.fence, t.holder, t.holder_role, t.units, t.granted_at,
           t.ended_at, t.ended_how,
           CASE WHEN t.ended_at IS NULL THEN
               coalesce((SELECT l.expires_at FROM pglease.leases AS l
                         WHERE t.slot = 0 AND l.name = t.name AND l.fence = t.fence),
                        (SELECT s.expires_at FROM pglease.slots AS s
                         WHERE t.slot > 0 AND s.scope = t.name AND s.slot = t.slot AND s.fence = t.fence))
           END
    FROM pglease.tenures AS t
    WHERE t.name = p_name
      AND (p_since IS NULL OR t.ended_at IS NULL OR t.ended_at >= p_since)
    UNION ALL
    SELECT nullif(a.slot, 0), a.fence, a.holder, a.holder_role, a.units, a.granted_at,
           a.ended_at, a.ended_how, NULL::timestamptz
    FROM pglease.tenures_archive AS a
    WHERE a.name = p_name
      AND (p_since IS NULL OR a.ended_at >= p_since)
    ORDER BY 6, 1 NULLS FIRST, 2;
END
$$;

-- pglease.tenure_ends(): how many tenures ended, by how (the six values of
-- pglease.tenures.ended_how, always six rows), since the schema was made:
-- counters, which purges never lower (a transaction that rolled back
-- after an end keeps its count). Read-only, for every client.
CREATE OR REPLACE FUNCTION pglease.tenure_ends(OUT ended_how text, OUT tenures bigint)
RETURNS SETOF record
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT 'released', (SELECT s.last_value - (NOT s.is_called)::integer FROM pglease.tenures_released AS s)
    UNION ALL
    SELECT 'handed_over', (SELECT s.last_value - (NOT s.is_called)::integer FROM pglease.tenures_handed_over AS s)
    UNION ALL
    SELECT 'forced', (SELECT s.last_value - (NOT s.is_called)::integer FROM pglease.tenures_forced AS s)
    UNION ALL
    SELECT 'expired', (SELECT s.last_value - (NOT s.is_called)::integer FROM pglease.tenures_expired AS s)
    UNION ALL
    SELECT 'taken_over', (SELECT s.last_value - (NOT s.is_called)::integer FROM pglease.tenures_taken_over AS s)
    UNION ALL
    SELECT 'purged', (SELECT s.last_value - (NOT s.is_called)::integer FROM pglease.tenures_purged AS s);
$$;
