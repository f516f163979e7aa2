-- Removes everything the pglease migration made: the schema with its tables,
-- views and functions, and the role pglease_client when the migration created
-- it and nothing else still uses it (another database with pglease, or your
-- own grants to it, keep it; a NOTICE says so).
DROP SCHEMA IF EXISTS pglease CASCADE;

DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles AS r
               WHERE r.rolname = 'pglease_client'
                 AND pg_catalog.shobj_description(r.oid, 'pg_authid')
                     = 'pglease: created by the pglease migration') THEN
        BEGIN
            DROP ROLE pglease_client;
        EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN
            RAISE NOTICE 'pglease: kept role pglease_client: %', SQLERRM;
        END;
    END IF;
END
$pglease$;
