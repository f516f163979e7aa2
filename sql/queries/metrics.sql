-- name: Metrics :one
-- Everything an exporter reads, in one call (pglease.metrics).
SELECT m.version::text AS version,
       m.lease_names::text[] AS lease_names, m.lease_held::boolean[] AS lease_held,
       m.lease_expiry_seconds::float8[] AS lease_expiry_seconds, m.lease_fences::bigint[] AS lease_fences,
       m.leases_dropped::bigint AS leases_dropped,
       m.scope_names::text[] AS scope_names, m.scope_in_use::integer[] AS scope_in_use,
       m.scope_capacities::integer[] AS scope_capacities, m.scopes_dropped::bigint AS scopes_dropped,
       m.leases_held::bigint AS leases_held, m.leases_expired::bigint AS leases_expired,
       m.leases_free::bigint AS leases_free,
       m.slots_held::bigint AS slots_held, m.slots_expired::bigint AS slots_expired,
       m.slots_free::bigint AS slots_free,
       m.lease_waiters::bigint AS lease_waiters, m.slot_waiters::bigint AS slot_waiters,
       m.tables::text[] AS tables, m.table_rows::bigint[] AS table_rows, m.table_bytes::bigint[] AS table_bytes,
       m.lease_oldest_free_seconds::float8 AS lease_oldest_free_seconds,
       m.scope_oldest_free_seconds::float8 AS scope_oldest_free_seconds,
       m.purged_rows::bigint AS purged_rows
FROM pglease.metrics(@names::text, @max_names::integer) AS m;
