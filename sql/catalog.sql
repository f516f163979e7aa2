-- The catalog of schema pglease, one row per object with a digest of what
-- defines its behaviour: (object, digest). An upgrade compares it with the
-- catalog its source version shipped (sql/releases/VERSION.catalog) and
-- refuses to run on a schema changed by hand.
--
-- Only what PostgreSQL 13 to 18 print alike: function bodies as written
-- (prosrc), column types, index and constraint definitions, domains (their
-- base type and checks; 0.3.0 has the first); view columns
-- rather than view text, which the server reformats. A column's place is
-- its position among the live columns of its table, not its attnum: a
-- column dropped and added again (a downgrade, then an upgrade) leaves a
-- gap in the attnums that a fresh install does not have, and is no change
-- by hand (without a dropped column the two are equal, so the catalogs of
-- 0.1.0 and 0.2.0 read the same either way). Privileges are not
-- compared: every upgrade sets them anew (sql/schema/90_privileges.sql).
-- Generated into the upgrade scripts: one statement, no trailing semicolon.
SELECT 'function ' || p.proname || '(' || pg_catalog.pg_get_function_identity_arguments(p.oid) || ')' AS object,
       pg_catalog.md5(pg_catalog.concat_ws('|', pg_catalog.pg_get_function_result(p.oid),
           p.prosecdef, p.provolatile, p.proisstrict,
           pg_catalog.array_to_string(p.proconfig, ','), l.lanname, p.prosrc)) AS digest
FROM pg_catalog.pg_proc AS p
JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
WHERE p.pronamespace = 'pglease'::regnamespace
UNION ALL
SELECT 'relation ' || c.relname,
       pg_catalog.md5(pg_catalog.concat_ws('|', c.relkind, c.relpersistence,
           pg_catalog.array_to_string(c.reloptions, ',')))
FROM pg_catalog.pg_class AS c
WHERE c.relnamespace = 'pglease'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p', 'S')
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname,
       pg_catalog.md5(pg_catalog.concat_ws('|', pg_catalog.row_number() OVER (PARTITION BY a.attrelid ORDER BY a.attnum),
           pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull,
           pg_catalog.pg_get_expr(d.adbin, d.adrelid)))
FROM pg_catalog.pg_class AS c
JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_catalog.pg_attrdef AS d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.relnamespace = 'pglease'::regnamespace AND c.relkind IN ('r', 'v', 'm', 'p')
UNION ALL
SELECT 'index ' || i.relname, pg_catalog.md5(pg_catalog.pg_get_indexdef(i.oid))
FROM pg_catalog.pg_class AS i
WHERE i.relnamespace = 'pglease'::regnamespace AND i.relkind = 'i'
UNION ALL
SELECT 'constraint ' || r.relname || '.' || con.conname,
       pg_catalog.md5(pg_catalog.pg_get_constraintdef(con.oid))
FROM pg_catalog.pg_constraint AS con
JOIN pg_catalog.pg_class AS r ON r.oid = con.conrelid
WHERE r.relnamespace = 'pglease'::regnamespace AND con.contype IN ('p', 'u', 'c', 'f', 'x')
UNION ALL
SELECT 'trigger ' || r.relname || '.' || tg.tgname, pg_catalog.md5(pg_catalog.pg_get_triggerdef(tg.oid))
FROM pg_catalog.pg_trigger AS tg
JOIN pg_catalog.pg_class AS r ON r.oid = tg.tgrelid
WHERE r.relnamespace = 'pglease'::regnamespace AND NOT tg.tgisinternal
UNION ALL
SELECT 'domain ' || t.typname,
       pg_catalog.md5(pg_catalog.concat_ws('|', pg_catalog.format_type(t.typbasetype, t.typtypmod), t.typnotnull,
           (SELECT pg_catalog.string_agg(pg_catalog.pg_get_constraintdef(con.oid), ',' ORDER BY con.conname)
            FROM pg_catalog.pg_constraint AS con WHERE con.contypid = t.oid)))
FROM pg_catalog.pg_type AS t
WHERE t.typnamespace = 'pglease'::regnamespace AND t.typtype = 'd'
