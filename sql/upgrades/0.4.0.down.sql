-- pglease 0.4.0 -> 0.3.0: undoes sql/upgrades/0.4.0.up.sql. Runs before the
-- functions, views and privileges of 0.3.0 are applied again.

-- _takeable and group_sync are written out again by 0.3.0's functions.
DROP FUNCTION pglease._free(text, timestamptz, text, text, interval, text, text, timestamptz);

-- The owner check reads a name's owner once: _check_owner and _may_take
-- are written out again by 0.3.0's functions.
DROP FUNCTION pglease._owner_allows(text, text);
DROP FUNCTION pglease._owner_refuse(text, text, text, text, text);

-- The limits' levels (sql/functions/83_limit_views.sql) go.
DROP FUNCTION pglease.limit_status(integer);

-- Rate limits go: their functions, the key states
-- and the limits (every bucket is full again after an upgrade back), and
-- the quota kind 'limits' with its caps.
DROP FUNCTION pglease.take(text, integer);
DROP FUNCTION pglease.peek(text);
DROP FUNCTION pglease.take_wait(text, integer, interval);
DROP FUNCTION pglease.limit_set(text, integer, interval, integer, boolean);
DROP FUNCTION pglease.limit_unset(text);
DROP FUNCTION pglease.limit_reset(text);
DROP FUNCTION pglease.claim_and_take(text, text, integer, interval, integer, text[], integer[]);
DROP FUNCTION pglease._limit_take(text, text, integer);
DROP FUNCTION pglease._limit_key(text, text, text, text, integer);
DROP FUNCTION pglease._limit_find(text);
DROP FUNCTION pglease._limit_match(text, text);
DROP FUNCTION pglease._limit_expire(text, text, timestamptz, timestamptz, bigint);
DROP FUNCTION pglease._limit_refund(timestamptz, bigint, bigint, timestamptz);
DROP FUNCTION pglease._limit_admin(text, text, text);
DROP FUNCTION pglease._limit_key_role(text);
DROP FUNCTION pglease._limit_role(text);
DROP FUNCTION pglease._limit_purge(timestamptz, boolean, text);
DROP FUNCTION pglease._limit_us(timestamptz);
DROP FUNCTION pglease.reserve(text, integer, interval);
DROP FUNCTION pglease.settle(text, bigint, integer);
DROP FUNCTION pglease.reserve_all(text[], integer, interval);
DROP FUNCTION pglease._limit_reserve(text, text, text[], integer, interval);
DROP FUNCTION pglease._limit_keys(text, text, text[], text, integer[]);
DROP FUNCTION pglease._limit_order(text[], integer[]);
DROP TABLE pglease.limit_reservations;
DROP TABLE pglease.limit_state;
DROP TABLE pglease.limits;
DELETE FROM pglease.quotas AS q WHERE q.kind = 'limits';
ALTER TABLE pglease.quotas
    DROP CONSTRAINT quotas_kind_check,
    ADD CONSTRAINT quotas_kind_check
        CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs'));

-- Tenure history goes: its triggers, functions, tables and counters, and
-- btree_gist when this migration created it and nothing else uses it.
DROP TRIGGER tenure_granted ON pglease.leases;
DROP TRIGGER tenure_changed ON pglease.leases;
DROP TRIGGER tenure_purged ON pglease.leases;
DROP TRIGGER tenure_granted ON pglease.slots;
DROP TRIGGER tenure_changed ON pglease.slots;
DROP TRIGGER tenure_purged ON pglease.slots;
DROP FUNCTION pglease.history_enable(text, interval);
DROP FUNCTION pglease.history_disable(text);
DROP FUNCTION pglease.history_delete(text, timestamptz);
DROP FUNCTION pglease.history_archive(boolean);
DROP FUNCTION pglease.history_drop_before(timestamptz);
DROP FUNCTION pglease.tenures(text, timestamptz);
DROP FUNCTION pglease.tenure_ends();
DROP FUNCTION pglease._history_on(text);
DROP FUNCTION pglease._history_purge(timestamptz, boolean, text);
DROP FUNCTION pglease._tenure_forced(text, integer, bigint);
DROP FUNCTION pglease._tenure_count(text);
DROP FUNCTION pglease._tenure_write(text, integer, text, text, bigint, timestamptz, timestamptz, boolean,
                                    text, text, bigint, timestamptz, timestamptz, integer);
DROP FUNCTION pglease._history_admin(text, text);
DROP FUNCTION pglease._history_owner_only(text);
DROP FUNCTION pglease._prefix_admin(text);
DROP FUNCTION pglease._schema_owner();
DROP TABLE pglease.tenures;
DROP TABLE pglease.tenures_archive;
DROP TABLE pglease.history_settings;
DROP TABLE pglease.history_prefixes;
DROP FUNCTION pglease._tenure_lease();
DROP FUNCTION pglease._tenure_slot();
DROP FUNCTION pglease._tenure_purged();
DROP FUNCTION pglease._tenure_check();
DROP FUNCTION pglease._tenure_before(text, integer, bigint);
DROP SEQUENCE pglease.tenures_released;
DROP SEQUENCE pglease.tenures_handed_over;
DROP SEQUENCE pglease.tenures_forced;
DROP SEQUENCE pglease.tenures_expired;
DROP SEQUENCE pglease.tenures_taken_over;
DROP SEQUENCE pglease.tenures_purged;
DO $pglease$
BEGIN
    IF EXISTS (SELECT FROM pg_catalog.pg_extension AS e
               WHERE e.extname = 'btree_gist'
                 AND pg_catalog.obj_description(e.oid, 'pg_extension')
                     = 'pglease: created by the pglease migration') THEN
        BEGIN
            DROP EXTENSION btree_gist;
        EXCEPTION WHEN dependent_objects_still_exist OR insufficient_privilege THEN
            RAISE NOTICE 'pglease: kept extension btree_gist: %', SQLERRM;
        END;
    END IF;
END
$pglease$;
