-- Privileges: PUBLIC gets nothing; clients get EXECUTE on the public
-- functions and SELECT on the status views through role pglease_client.
-- Tables are reachable only through the SECURITY DEFINER functions, so a
-- client cannot UPDATE or DELETE a row and forge a fence.
--
-- This is the whole ACL of every pglease object (docs/security.md), set
-- exactly whatever was there before: default privileges (ALTER DEFAULT
-- PRIVILEGES ... GRANT ALL ON TABLES TO app_rw) and earlier grants, also
-- column grants and grants to pglease_client, are revoked first; only the
-- owner keeps its privileges.
--
-- The role is created when missing and the migrating user may create roles
-- (CREATEROLE or superuser). Otherwise a NOTICE says so, and a superuser must
-- run: CREATE ROLE pglease_client NOLOGIN; and then apply the grants below
-- (or re-run this migration after down).

REVOKE ALL ON SCHEMA pglease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pglease FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pglease FROM PUBLIC;

DO $pglease$
DECLARE
    v_grant record;
BEGIN
    FOR v_grant IN
        SELECT DISTINCT g.kind, g.object, g.grantee
        FROM (
            SELECT 'SCHEMA' AS kind, 'pglease' AS object, a.grantee
            FROM pg_catalog.pg_namespace AS n, pg_catalog.aclexplode(n.nspacl) AS a
            WHERE n.nspname = 'pglease' AND a.grantee <> n.nspowner
            UNION ALL
            SELECT 'TABLE', c.oid::regclass::text, a.grantee
            FROM pg_catalog.pg_class AS c, pg_catalog.aclexplode(c.relacl) AS a
            WHERE c.relnamespace = 'pglease'::regnamespace AND a.grantee <> c.relowner
            UNION ALL
            SELECT 'TABLE', c.oid::regclass::text, a.grantee
            FROM pg_catalog.pg_class AS c
            JOIN pg_catalog.pg_attribute AS att ON att.attrelid = c.oid AND att.attacl IS NOT NULL,
                 pg_catalog.aclexplode(att.attacl) AS a
            WHERE c.relnamespace = 'pglease'::regnamespace AND a.grantee <> c.relowner
            UNION ALL
            SELECT 'FUNCTION', p.oid::regprocedure::text, a.grantee
            FROM pg_catalog.pg_proc AS p, pg_catalog.aclexplode(p.proacl) AS a
            WHERE p.pronamespace = 'pglease'::regnamespace AND a.grantee <> p.proowner
        ) AS g
        ORDER BY 1, 2, 3
    LOOP
        -- REVOKE on a table also revokes its column privileges.
        EXECUTE pg_catalog.format('REVOKE ALL ON %s %s FROM %s CASCADE',
            v_grant.kind, v_grant.object,
            CASE WHEN v_grant.grantee = 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(v_grant.grantee)) END);
    END LOOP;
END
$pglease$;

DO $pglease$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        BEGIN
            CREATE ROLE pglease_client NOLOGIN;
            COMMENT ON ROLE pglease_client IS 'pglease: created by the pglease migration';
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'pglease: cannot create role pglease_client (%); ask a superuser to CREATE ROLE pglease_client NOLOGIN and re-apply the grants', SQLERRM;
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created concurrently by another migration: fine
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT USAGE ON SCHEMA pglease TO pglease_client;
        GRANT SELECT ON pglease.lease_status, pglease.slot_status, pglease.slot_scope_status
            TO pglease_client;
        GRANT EXECUTE ON FUNCTION
            pglease.acquire(text, text, interval),
            pglease.renew(text, text, bigint, interval),
            pglease.release(text, text, bigint),
            pglease.assert_held(text, bigint),
            pglease.claim_slot(text, text, integer, interval),
            pglease.claim_slots(text, text[], integer[], interval),
            pglease.renew_slot(text, integer, text, bigint, interval),
            pglease.release_slot(text, integer, text, bigint),
            pglease.renew_holder(text, interval),
            pglease.purge(interval),
            pglease.purge_due(interval, interval),
            pglease.metrics(text, integer),
            pglease.version()
            TO pglease_client;
        -- The cron functions (0.3.0).
        GRANT EXECUTE ON FUNCTION
            pglease.release_after(text, text, bigint, interval),
            pglease.run_begin(text, text, bigint, interval),
            pglease.run_end(text, text, bigint, integer),
            pglease.run_history(text, integer),
            pglease.run_summary(text, integer)
            TO pglease_client;
        -- Weighted slot claims (0.3.0).
        GRANT EXECUTE ON FUNCTION
            pglease.claim_slot(text, text, integer, interval, integer, boolean),
            pglease.claim_slots(text, text[], integer[], interval, integer[], boolean)
            TO pglease_client;
    END IF;
END
$pglease$;

-- Leadership (0.3.0, docs/leadership.md): clients publish a value, renew
-- with the release check and observe; only role pglease_operator may ask a
-- holder to release (a stranger who could would keep a service leaderless,
-- docs/security.md). Created like pglease_client when missing; grant it to
-- the operators' roles (GRANT pglease_operator TO ...).
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.acquire(text, text, interval, text),
            pglease.set_value(text, text, bigint, text),
            pglease.renew_lease(text, text, bigint, interval),
            pglease.observe(text, interval)
            TO pglease_client;
        -- Batched calls (0.3.0, docs/sql.md#batched-calls).
        GRANT EXECUTE ON FUNCTION
            pglease.acquire_batch(text[], text, interval[], text[]),
            pglease.release_batch(text[], text, bigint[])
            TO pglease_client;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        BEGIN
            CREATE ROLE pglease_operator NOLOGIN;
            COMMENT ON ROLE pglease_operator IS 'pglease: created by the pglease migration';
        EXCEPTION
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'pglease: cannot create role pglease_operator (%); ask a superuser to CREATE ROLE pglease_operator NOLOGIN and re-apply the grants', SQLERRM;
            WHEN duplicate_object OR unique_violation THEN
                NULL; -- created concurrently by another migration: fine
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        GRANT USAGE ON SCHEMA pglease TO pglease_operator;
        GRANT SELECT ON pglease.lease_status TO pglease_operator;
        GRANT EXECUTE ON FUNCTION
            pglease.request_release(text, text, interval)
            TO pglease_operator;
    END IF;
END
$pglease$;

-- Shard groups (0.3.0, docs/groups.md): any client may create a group; a
-- group's sync, release and leave are refused (42501) to every role but
-- the one that created it, inside the functions.
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.group_create(text, integer, text[]),
            pglease.group_sync(text, text, interval, integer),
            pglease.group_release(text, text, text, bigint),
            pglease.group_leave(text, text),
            pglease.group_status(text),
            pglease.group_list(),
            pglease.group_delete(text)
            TO pglease_client;
        -- Who owns a name (0.3.0), which lease_status shows too, and the
        -- quotas' use.
        GRANT EXECUTE ON FUNCTION pglease.owner_of(text), pglease.quota_usage() TO pglease_client;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        GRANT EXECUTE ON FUNCTION pglease.owner_of(text) TO pglease_operator;
    END IF;
END
$pglease$;

-- Rate limits (0.4.0, #51, docs/limits.md): every client may take, peek and
-- wait on the keys it may use, and call limit_set, limit_unset and
-- limit_reset, which refuse (42501) all but the schema owner and the role
-- owning a target's bound prefix, inside the functions.
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.take(text, integer),
            pglease.peek(text),
            pglease.take_wait(text, integer, interval),
            pglease.limit_set(text, integer, interval, integer, boolean),
            pglease.limit_unset(text),
            pglease.limit_reset(text),
            pglease.claim_and_take(text, text, integer, interval, integer, text[], integer[]),
            pglease.reserve(text, integer, interval),
            pglease.reserve_all(text[], integer, interval),
            pglease.settle(text, bigint, integer)
            TO pglease_client;
    END IF;
END
$pglease$;

-- Limits' levels (0.4.0, #51, docs/limits.md#levels): clients see what peek
-- would show them, operators every limit (inside pglease.limit_status).
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION pglease.limit_status(integer) TO pglease_client;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        GRANT EXECUTE ON FUNCTION pglease.limit_status(integer) TO pglease_operator;
    END IF;
END
$pglease$;

-- Tenure history (0.4.0, #52, docs/tenure-history.md): every client reads
-- it as it reads the status views; history_enable and history_disable
-- refuse (42501) all but the schema owner, superusers and the role owning
-- a prefix's bound prefix, inside the functions (pglease_operator is not
-- enough); history_delete is the schema owner's alone. No role may write
-- pglease.tenures.
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.tenures(text, timestamptz),
            pglease.tenure_ends(),
            pglease.history_enable(text, interval),
            pglease.history_disable(text)
            TO pglease_client;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.tenures(text, timestamptz),
            pglease.tenure_ends(),
            pglease.history_enable(text, interval),
            pglease.history_disable(text)
            TO pglease_operator;
    END IF;
END
$pglease$;
