-- pglease.metrics(p_names, p_max_names): what a monitoring system needs of
-- a pglease database, in one call: the exporter (`pglease exporter`), the
-- queries file of prometheus-postgres-exporter, a status page in any
-- language. Read-only (STABLE: it writes nothing, and every statement of
-- it reads the snapshot of the calling query, so its figures agree with
-- each other); takes no lock a holder waits for. "now" is the server clock
-- read once when the call starts.
--
-- Returns one row. Per name, aligned by index within each group, sorted by
-- name in the order of the tables' primary keys (the database's collation:
-- byte order under C or C.UTF-8), never NULL (empty when there is
-- nothing):
--   * lease_names, lease_held, lease_expiry_seconds, lease_fences: the
--     leases whose name matches p_names, the first p_max_names of them:
--     held is true for a live tenure; expiry_seconds is expires_at - now,
--     positive while held (the time left), zero or negative once the
--     tenure ended (by expiry or release: how long ago); fence is the
--     current or last tenure's, which only grows;
--   * leases_dropped: the leases that matched p_names beyond the first
--     p_max_names (0 when none);
--   * scope_names, scope_in_use, scope_capacities: the slot scopes whose
--     name matches p_names, the first p_max_names of them: in_use is the
--     live holders now; capacity is the smallest capacity a live holder
--     claimed with (what admits the next claim), else the capacity of the
--     scope's latest claim, else 0 (slots claimed before 0.2.0 carry none);
--   * scopes_dropped: as leases_dropped, for scopes.
-- Totals, over every row whatever p_names and p_max_names say:
--   * leases_held, leases_expired, leases_free: the lease rows by state, as
--     pglease.lease_status says it; slots_held, slots_expired, slots_free:
--     the slot rows by state;
--   * lease_waiters, slot_waiters: refused acquires and claims registered
--     as waiting for a release, by kind, whose wait has not ended;
--   * tables, table_rows, table_bytes: every table of the schema that holds
--     rows (leases, slots, slot_scopes, waiters, slot_queue, observers,
--     candidates, runs, groups, group_shards, group_members, prefixes,
--     quotas, purge_turns, limits, limit_state, limit_reservations,
--     tenures, history_prefixes, in this order; the first four as before
--     0.3.0, the last five from 0.4.0),
--     their exact row counts and their sizes on disk with indexes and
--     TOAST (pg_total_relation_size);
--   * lease_oldest_free_seconds: how long the lease row free (released or
--     expired) for the longest has been free, 0 when none is: what
--     pglease.purge(p_free_for) deletes once it exceeds p_free_for;
--     scope_oldest_free_seconds: likewise for slot scopes, free when all
--     their slots are;
--   * purged_rows: the rows pglease.purge has deleted since the schema was
--     installed (0 before the first purge; counted as they are deleted, so
--     a purge that is rolled back still counts);
--   * version: pglease.version().
-- p_names is a POSIX regular expression matched against each lease name
-- and scope name with ~ (unanchored: '^orders/' for a prefix; '' matches
-- every name). p_max_names from 0 (totals only) to 1,000,000.
-- Raises 22004 for a NULL argument, 22023 for a p_names longer than 1,024
-- bytes or not a valid regular expression, or a p_max_names out of range;
-- nothing is read then.
CREATE OR REPLACE FUNCTION pglease.metrics(
    p_names text, p_max_names integer,
    OUT version text,
    OUT lease_names text[], OUT lease_held boolean[],
    OUT lease_expiry_seconds double precision[], OUT lease_fences bigint[],
    OUT leases_dropped bigint,
    OUT scope_names text[], OUT scope_in_use integer[], OUT scope_capacities integer[],
    OUT scopes_dropped bigint,
    OUT leases_held bigint, OUT leases_expired bigint, OUT leases_free bigint,
    OUT slots_held bigint, OUT slots_expired bigint, OUT slots_free bigint,
    OUT lease_waiters bigint, OUT slot_waiters bigint,
    OUT tables text[], OUT table_rows bigint[], OUT table_bytes bigint[],
    OUT lease_oldest_free_seconds double precision,
    OUT scope_oldest_free_seconds double precision,
    OUT purged_rows bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now     timestamptz := clock_timestamp();
    v_all     boolean;
    v_matched bigint;
    v_slots   bigint;
    v_scopes  bigint;
    v_waiters bigint;
BEGIN
    PERFORM pglease._check_names('metrics', p_names);
    PERFORM pglease._check_int('metrics', 'p_max_names', p_max_names, 0, 1000000);
    v_all := p_names = '';

    version := pglease.version();

    -- Leases: the totals in one pass, then the first p_max_names that match
    -- in the primary key's order (an index scan that stops there, where
    -- another order would sort every match).
    SELECT count(*) FILTER (WHERE l.holder IS NOT NULL AND l.expires_at > v_now),
           count(*) FILTER (WHERE l.holder IS NOT NULL AND l.expires_at <= v_now),
           count(*) FILTER (WHERE l.holder IS NULL),
           count(*) FILTER (WHERE v_all OR l.name ~ p_names),
           coalesce(extract(epoch FROM v_now - min(l.expires_at) FILTER (
               WHERE l.holder IS NULL OR l.expires_at <= v_now)), 0)::double precision
    INTO leases_held, leases_expired, leases_free, v_matched, lease_oldest_free_seconds
    FROM pglease.leases AS l;

    SELECT coalesce(array_agg(m.name ORDER BY m.name), '{}'),
           coalesce(array_agg(m.held ORDER BY m.name), '{}'),
           coalesce(array_agg(m.expiry ORDER BY m.name), '{}'),
           coalesce(array_agg(m.fence ORDER BY m.name), '{}')
    INTO lease_names, lease_held, lease_expiry_seconds, lease_fences
    FROM (
        SELECT l.name,
               l.holder IS NOT NULL AND l.expires_at > v_now AS held,
               extract(epoch FROM l.expires_at - v_now)::double precision AS expiry,
               l.fence
        FROM pglease.leases AS l
        WHERE v_all OR l.name ~ p_names
        ORDER BY l.name
        LIMIT p_max_names
    ) AS m;
    leases_dropped := v_matched - cardinality(lease_names);

    -- Slots: each scope's holders and capacity, then the totals and the
    -- first p_max_names scopes that match.
    WITH scope AS (
        SELECT s.scope,
               count(*) FILTER (WHERE s.holder IS NOT NULL AND s.expires_at > v_now) AS in_use,
               count(*) FILTER (WHERE s.holder IS NOT NULL AND s.expires_at <= v_now) AS expired,
               count(*) FILTER (WHERE s.holder IS NULL) AS free,
               count(*) AS slots,
               coalesce(min(s.capacity) FILTER (WHERE s.holder IS NOT NULL AND s.expires_at > v_now),
                        (array_agg(s.capacity ORDER BY s.acquired_at DESC)
                            FILTER (WHERE s.capacity IS NOT NULL))[1],
                        0) AS capacity,
               max(s.expires_at) AS last_end
        FROM pglease.slots AS s
        GROUP BY s.scope
    ), shown AS (
        SELECT sc.scope, sc.in_use, sc.capacity
        FROM scope AS sc
        WHERE v_all OR sc.scope ~ p_names
        ORDER BY sc.scope
        LIMIT p_max_names
    )
    SELECT coalesce((SELECT sum(sc.in_use) FROM scope AS sc), 0)::bigint,
           coalesce((SELECT sum(sc.expired) FROM scope AS sc), 0)::bigint,
           coalesce((SELECT sum(sc.free) FROM scope AS sc), 0)::bigint,
           coalesce((SELECT sum(sc.slots) FROM scope AS sc), 0)::bigint,
           (SELECT count(*) FROM scope AS sc WHERE v_all OR sc.scope ~ p_names),
           coalesce((SELECT extract(epoch FROM v_now - min(sc.last_end))
                     FROM scope AS sc WHERE sc.last_end <= v_now), 0)::double precision,
           coalesce((SELECT array_agg(sh.scope ORDER BY sh.scope) FROM shown AS sh), '{}'),
           coalesce((SELECT array_agg(sh.in_use::integer ORDER BY sh.scope) FROM shown AS sh), '{}'),
           coalesce((SELECT array_agg(sh.capacity ORDER BY sh.scope) FROM shown AS sh), '{}')
    INTO slots_held, slots_expired, slots_free, v_slots, v_matched, scope_oldest_free_seconds,
         scope_names, scope_in_use, scope_capacities;
    scopes_dropped := v_matched - cardinality(scope_names);

    SELECT count(*) FILTER (WHERE w.kind = 'lease' AND w.until > v_now),
           count(*) FILTER (WHERE w.kind = 'slot' AND w.until > v_now),
           count(*)
    INTO lease_waiters, slot_waiters, v_waiters
    FROM pglease.waiters AS w;
    SELECT count(*) INTO v_scopes FROM pglease.slot_scopes AS sc;

    tables := ARRAY['leases', 'slots', 'slot_scopes', 'waiters', 'slot_queue', 'observers',
                    'candidates', 'runs', 'groups', 'group_shards', 'group_members', 'prefixes',
                    'quotas', 'purge_turns', 'limits', 'limit_state', 'limit_reservations',
                    'tenures', 'history_prefixes'];
    table_rows := ARRAY[leases_held + leases_expired + leases_free, v_slots, v_scopes, v_waiters,
                        (SELECT count(*) FROM pglease.slot_queue),
                        (SELECT count(*) FROM pglease.observers),
                        (SELECT count(*) FROM pglease.candidates),
                        (SELECT count(*) FROM pglease.runs),
                        (SELECT count(*) FROM pglease.groups),
                        (SELECT count(*) FROM pglease.group_shards),
                        (SELECT count(*) FROM pglease.group_members),
                        (SELECT count(*) FROM pglease.prefixes),
                        (SELECT count(*) FROM pglease.quotas),
                        (SELECT count(*) FROM pglease.purge_turns),
                        (SELECT count(*) FROM pglease.limits),
                        (SELECT count(*) FROM pglease.limit_state),
                        (SELECT count(*) FROM pglease.limit_reservations),
                        (SELECT count(*) FROM pglease.tenures),
                        (SELECT count(*) FROM pglease.history_prefixes)];
    table_bytes := ARRAY(SELECT pg_total_relation_size(('pglease.' || t)::regclass)
                         FROM unnest(tables) WITH ORDINALITY AS u(t, i) ORDER BY u.i);

    SELECT f.last_value INTO purged_rows FROM pglease.purged_rows AS f;
END
$$;
