-- Privileges, as on a partition: PUBLIC gets nothing; clients get EXECUTE
-- on the public functions (not force_release) and SELECT on the views
-- through role pglease_client, and the routing helpers the functions call
-- as the caller. The partition checks the same grants again for the role
-- PL/Proxy connects as. USAGE on the foreign server pglease is granted by
-- whoever creates it (docs/scaling.md).
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
            pglease.claim_slot(text, text, integer, interval, integer, boolean),
            pglease.claim_slots(text, text[], integer[], interval, integer[], boolean),
            pglease.renew_slot(text, integer, text, bigint, interval),
            pglease.release_slot(text, integer, text, bigint),
            pglease.renew_holder(text, interval),
            pglease.purge(interval),
            pglease.purge_due(interval, interval),
            pglease.metrics(text, integer),
            pglease.version(),
            pglease.partition_of(text),
            pglease._route_key(text),
            pglease._route(text),
            pglease._route_same(text, text, text[]),
            pglease._route_scopes(text[]),
            pglease._route_keys(text[]),
            pglease._all_renew_holder(text, interval),
            pglease._all_purge(interval),
            pglease._all_purge_due(interval, interval),
            pglease._all_metrics(text, integer),
            pglease._all_lease_status(),
            pglease._all_slot_status(),
            pglease._all_slot_scope_status()
            TO pglease_client;
        -- The cron functions (0.3.0).
        GRANT EXECUTE ON FUNCTION
            pglease.release_after(text, text, bigint, interval),
            pglease.run_begin(text, text, bigint, interval),
            pglease.run_end(text, text, bigint, integer),
            pglease.run_history(text, integer),
            pglease.run_summary(text, integer),
            pglease._all_run_summary(text, integer)
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
        -- Batched calls (0.3.0): split by partition, see sql/proxy/batch/.
        GRANT EXECUTE ON FUNCTION
            pglease.acquire_batch(text[], text, interval[], text[]),
            pglease.release_batch(text[], text, bigint[]),
            pglease._one_acquire_batch(text[], text, interval[], text[]),
            pglease._one_release_batch(text[], text, bigint[]),
            pglease._route_first(text[]),
            pglease._partition_count()
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
            pglease.request_release(text, text, interval),
            pglease._route_key(text),
            pglease._route(text),
            pglease._all_lease_status()
            TO pglease_operator;
    END IF;
END
$pglease$;

-- Shard groups (0.3.0, docs/groups.md): routed by group name, so a group
-- and its shards' leases ('{group}/shard') live on one partition.
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
            pglease._all_group_list()
            TO pglease_client;
    END IF;
END
$pglease$;

-- Rate limits (0.4.0, #51, docs/limits.md): keys routed by key, limits set
-- on every partition; claim_and_take routed by its scope (its keys must
-- share the scope's routing key to be the keys pglease.take reaches).
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.take(text, integer),
            pglease.peek(text),
            pglease.take_wait(text, integer, interval),
            pglease.limit_set(text, integer, interval, integer, boolean),
            pglease._all_limit_set(text, integer, interval, integer, boolean),
            pglease.limit_unset(text),
            pglease._all_limit_unset(text),
            pglease.limit_reset(text),
            pglease.claim_and_take(text, text, integer, interval, integer, text[], integer[]),
            pglease.reserve(text, integer, interval),
            pglease.reserve_all(text[], integer, interval),
            pglease.settle(text, bigint, integer)
            TO pglease_client;
    END IF;
END
$pglease$;

-- Limits' levels (0.4.0, #51): merged from every partition.
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION pglease.limit_status(integer), pglease._all_limit_status(integer)
            TO pglease_client;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        GRANT EXECUTE ON FUNCTION pglease.limit_status(integer), pglease._all_limit_status(integer)
            TO pglease_operator;
    END IF;
END
$pglease$;

-- Tenure history (0.4.0, #52): read by name on its partition, the ends
-- summed over all; turned on and off on every partition (each refuses
-- whom it refuses); history_delete the owner's alone.
DO $pglease$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_client') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.tenures(text, timestamptz),
            pglease.tenure_ends(),
            pglease._all_tenure_ends(),
            pglease.history_enable(text, interval),
            pglease.history_disable(text),
            pglease._all_history_enable(text, interval),
            pglease._all_history_disable(text)
            TO pglease_client;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'pglease_operator') THEN
        GRANT EXECUTE ON FUNCTION
            pglease.tenures(text, timestamptz),
            pglease.tenure_ends(),
            pglease._all_tenure_ends(),
            pglease.history_enable(text, interval),
            pglease.history_disable(text),
            pglease._all_history_enable(text, interval),
            pglease._all_history_disable(text)
            TO pglease_operator;
    END IF;
END
$pglease$;
