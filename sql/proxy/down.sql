-- Removes the proxy schema. The plproxy extension, the foreign server
-- pglease and its user mappings stay: they are the operator's.
DROP SCHEMA IF EXISTS pglease CASCADE;
