-- pglease proxy: the schema a proxy database gets instead of the tables. It
-- exposes the same functions and views as one pglease database (a
-- partition), and runs each call on the partition that owns its name or
-- scope through PL/Proxy, over the cluster defined by the foreign server
-- pglease (docs/scaling.md):
--
--   CREATE SERVER pglease FOREIGN DATA WRAPPER plproxy
--       OPTIONS (p0 'host=db0 dbname=leases', p1 'host=db1 dbname=leases');
--   CREATE USER MAPPING FOR PUBLIC SERVER pglease;
--   GRANT USAGE ON FOREIGN SERVER pglease TO pglease_client;
--
-- The partition count is a power of two (PL/Proxy's rule). Proxy functions
-- are SECURITY INVOKER: PL/Proxy connects to the partition as the calling
-- role (current_user; a user mapping may add its password), so each
-- partition binds a tenure to the role that called the proxy.

CREATE EXTENSION IF NOT EXISTS plproxy;

CREATE SCHEMA pglease;
COMMENT ON SCHEMA pglease IS
    'pglease proxy: the pglease functions, run on the partition that owns each name by PL/Proxy';

-- pglease._route_key(p_key): what a name or scope is routed by: the text
-- between the first { and the next } when there is such a tag and it is not
-- empty ('{tenant-42}/gpu' -> 'tenant-42'), else the whole key. Scopes
-- claimed together by claim_slots must share it. NULL gives NULL.
CREATE OR REPLACE FUNCTION pglease._route_key(p_key text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(substring(p_key FROM '\{([^}]+)\}'), p_key);
$$;

-- pglease._route(p_key): the hash PL/Proxy maps to a partition
-- (hash & (partitions - 1)). A NULL key goes to partition 0, whose function
-- then raises the contract's 22004.
CREATE OR REPLACE FUNCTION pglease._route(p_key text)
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(pg_catalog.hashtext(pglease._route_key(p_key)), 0);
$$;

-- pglease._route_first(p_names): the hash of the first name of p_names
-- (a batched call's elements on one partition, see sql/proxy/batch/). A
-- NULL or empty array, or a NULL first name, goes to partition 0.
CREATE OR REPLACE FUNCTION pglease._route_first(p_names text[])
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pglease._route(p_names[pg_catalog.array_lower(p_names, 1)]);
$$;

-- pglease._partition_count(): how many partitions the foreign server
-- pglease lists (0 when it is missing or lists none).
CREATE OR REPLACE FUNCTION pglease._partition_count()
RETURNS integer
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT count(*)::integer
    FROM pg_catalog.pg_foreign_server AS s, pg_catalog.unnest(s.srvoptions) AS o
    WHERE s.srvname = 'pglease' AND o ~ '^p[0-9]+=';
$$;

-- pglease._route_same(p_func, p_what, p_names): the hash of the routing
-- key every name of p_names shares. Raises 22023, naming pglease.p_func
-- and its p_what, when two names have different routing keys: a call over
-- several names is all or nothing only within one partition. A NULL or
-- empty array, or one with a NULL name, goes to partition 0, which raises
-- the contract's error.
CREATE OR REPLACE FUNCTION pglease._route_same(p_func text, p_what text, p_names text[])
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_key   text;
    v_first text;
    v_name  text;
BEGIN
    IF p_names IS NULL OR cardinality(p_names) = 0 OR array_position(p_names, NULL) IS NOT NULL THEN
        RETURN 0;
    END IF;
    v_first := p_names[array_lower(p_names, 1)];
    FOREACH v_name IN ARRAY p_names LOOP
        v_key := pglease._route_key(v_name);
        IF v_key <> pglease._route_key(v_first) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('pglease.%s: %s %L and %L are routed by different keys (%L, %L) and may live on different partitions',
                    p_func, p_what, v_first, v_name, pglease._route_key(v_first), v_key),
                HINT = format('Through the pglease proxy, %s taken together must share one routing tag: name them {group}/name, e.g. {tenant-42}/cpu and {tenant-42}/gpu.', p_what);
        END IF;
    END LOOP;
    RETURN pglease._route(v_first);
END
$$;

-- pglease._route_scopes(p_scopes): pglease._route_same for claim_slots.
CREATE OR REPLACE FUNCTION pglease._route_scopes(p_scopes text[])
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pglease._route_same('claim_slots', 'scopes', p_scopes);
$$;

-- pglease._route_keys(p_keys): pglease._route_same for reserve_all: the
-- keys of one reservation must live on one partition (a reservation over
-- partitions would be all or nothing on none of them), else 22023.
CREATE OR REPLACE FUNCTION pglease._route_keys(p_keys text[])
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT pglease._route_same('reserve_all', 'keys', p_keys);
$$;

-- pglease.partition_of(p_key): the partition that owns the lease name or
-- slot scope p_key: its number (from 0) and its connection string as the
-- foreign server pglease lists it (option pN; without the user, which the
-- caller adds). Clients use it to LISTEN for releases, and for
-- assert_held inside a transaction, both of which only work on the
-- partition itself. Raises 55000 when the foreign server pglease is missing
-- or lists no partitions, and 22004 for a NULL key.
CREATE OR REPLACE FUNCTION pglease.partition_of(p_key text, OUT partition integer, OUT conninfo text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_options text[];
    v_count   integer;
BEGIN
    IF p_key IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.partition_of: p_key must not be NULL',
            HINT = 'Pass the lease name or slot scope.';
    END IF;
    SELECT s.srvoptions INTO v_options FROM pg_catalog.pg_foreign_server AS s WHERE s.srvname = 'pglease';
    SELECT count(*)::integer INTO v_count FROM unnest(v_options) AS o WHERE o ~ '^p[0-9]+=';
    IF coalesce(v_count, 0) = 0 THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'pglease.partition_of: this proxy has no partitions: foreign server pglease is missing or lists none',
            HINT = 'CREATE SERVER pglease FOREIGN DATA WRAPPER plproxy OPTIONS (p0 ''...'', p1 ''...'') (see docs/scaling.md).';
    END IF;
    partition := pglease._route(p_key) & (v_count - 1);
    SELECT substr(o, strpos(o, '=') + 1) INTO conninfo
    FROM unnest(v_options) AS o WHERE o LIKE 'p' || partition || '=%';
END
$$;
