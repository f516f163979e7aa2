-- pglease.version(): the version of the pglease schema installed, such as
-- '0.3.0' (schema 0.1.0 has no such function). Clients check it to refuse a
-- schema older than they need, with a hint to migrate.
CREATE OR REPLACE FUNCTION pglease.version()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT '0.4.0'::text;
$$;
