-- Privileges: PUBLIC gets nothing; clients get EXECUTE on the public
-- functions and SELECT on the status views through role pglease_client.
-- Tables are reachable only through the SECURITY DEFINER functions, so a
-- client cannot UPDATE or DELETE a row and forge a fence.
--
-- The role is created when missing and the migrating user may create roles
-- (CREATEROLE or superuser). Otherwise a NOTICE says so, and a superuser must
-- run: CREATE ROLE pglease_client NOLOGIN; and then apply the grants below
-- (or re-run this migration after down).

REVOKE ALL ON SCHEMA pglease FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA pglease FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA pglease FROM PUBLIC;

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
            pglease.version()
            TO pglease_client;
    END IF;
END
$pglease$;
