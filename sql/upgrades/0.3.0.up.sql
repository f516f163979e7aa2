-- pglease 0.2.0 -> 0.3.0: table changes. Runs after the catalog check and
-- before the functions, views and privileges of 0.3.0 are applied.
--
-- Functions: a refused acquire's expires_in and a refused claim's
-- retry_in are taken on the clock read that decided; renew_holder's
-- expires_at documented as the lower bound it is; one added
-- (pglease.metrics, read-only). Its slot and waiter tables are 0.2.0's;
-- pglease.leases gains leadership's columns (below).
--
-- The cron functions (docs/cron.md) add one table, the run ledger
-- pglease.runs, with its indexes (created here as in
-- sql/schema/10_schema.sql), and the functions release_after, run_begin,
-- run_end, run_history and run_summary; pglease.purge also deletes old
-- ledger rows.
CREATE TABLE pglease.runs (
    name         text        NOT NULL,
    fence        bigint      NOT NULL CHECK (fence > 0),
    window_start timestamptz NOT NULL,
    run_window   interval    NOT NULL,
    holder       text        NOT NULL,
    holder_role  text        NOT NULL,
    started_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    exit_status  integer,
    outcome      text        NOT NULL DEFAULT 'running'
                 CHECK (outcome IN ('running', 'succeeded', 'failed', 'lost')),
    PRIMARY KEY (name, fence)
);
COMMENT ON TABLE pglease.runs IS
    'pglease run ledger: one row per run of a job; change only through the pglease functions';

CREATE UNIQUE INDEX runs_one_success_idx ON pglease.runs (name, window_start)
    WHERE outcome = 'succeeded';
CREATE INDEX runs_started_idx ON pglease.runs (name, started_at);

-- Leadership (docs/leadership.md, sql/functions/60_leader.sql): four
-- nullable columns on pglease.leases (the holder's value and a release
-- request; NULL for every existing row: no value, no request, so every
-- lease, fence and tenure stays as it is), and two new UNLOGGED tables,
-- pglease.observers and pglease.candidates, both empty. Adding nullable
-- columns without a default rewrites nothing.
ALTER TABLE pglease.leases
    ADD COLUMN value                text CHECK (octet_length(value) <= 1024),
    ADD COLUMN release_requested_at timestamptz,
    ADD COLUMN release_to           text,
    ADD COLUMN release_for          interval,
    ADD COLUMN release_to_role      text;

CREATE UNLOGGED TABLE pglease.observers (
    name        text        NOT NULL,
    until       timestamptz NOT NULL,
    caller_role text        NOT NULL,
    PRIMARY KEY (name, caller_role)
);
COMMENT ON TABLE pglease.observers IS
    'pglease: observed leases, whose changes are notified';

CREATE UNLOGGED TABLE pglease.candidates (
    name        text        NOT NULL,
    holder      text        NOT NULL,
    until       timestamptz NOT NULL,
    holder_role text        NOT NULL,
    PRIMARY KEY (name, holder, holder_role)
);
COMMENT ON TABLE pglease.candidates IS
    'pglease: refused holders of a lease, which a release request may prefer';

-- Slots (docs/sql.md#claim_slot, sql/schema/10_schema.sql): weighted claims
-- and HOT renewals. Two columns on pglease.slots: units (every existing
-- tenure holds 1, as it did) and check_at, '-infinity' for every existing
-- row, which keeps every tenure, fence and counter as it is: the first
-- claim in a scope looks at each of its counted rows once (un-counts those
-- that ended, and sets check_at to the others' ends), and the scopes'
-- counters, which counted slots, now count units, one per slot. Both
-- columns have a constant default (the table is rewritten anyway, by the
-- domains below). The two indexes on expires_at go (a renewal then
-- touches no index column and is HOT); check_at's and the free slots'
-- come. The table is locked for the statement's length, which the
-- renewals and claims of the old functions wait for; they then run the
-- new ones.
-- The ranges of slot numbers, fences and capacities become domains (see
-- sql/schema/10_schema.sql: a CHECK constraint costs every write of the
-- table): the same values are refused. Changing a column to a domain with
-- a check rewrites the table, under the statement's lock; the slot views,
-- which depend on the columns, go first and come back with head's views.
CREATE DOMAIN pglease.slot_number AS integer CHECK (VALUE > 0);
CREATE DOMAIN pglease.fence_number AS bigint CHECK (VALUE > 0);
CREATE DOMAIN pglease.unit_count AS integer CHECK (VALUE BETWEEN 1 AND 1000000);
DROP VIEW pglease.slot_status;
DROP VIEW pglease.slot_scope_status;
ALTER TABLE pglease.slots
    DROP CONSTRAINT slots_slot_check,
    DROP CONSTRAINT slots_fence_check,
    DROP CONSTRAINT slots_capacity_check,
    ALTER COLUMN slot TYPE pglease.slot_number,
    ALTER COLUMN fence TYPE pglease.fence_number,
    ALTER COLUMN capacity TYPE pglease.unit_count,
    ADD COLUMN units pglease.unit_count NOT NULL DEFAULT 1,
    ADD COLUMN check_at timestamptz NOT NULL DEFAULT '-infinity';
DROP INDEX pglease.slots_scope_expires_idx;
DROP INDEX pglease.slots_counted_expires_idx;
CREATE INDEX slots_counted_check_idx ON pglease.slots (scope, check_at) WHERE counted;
CREATE INDEX slots_free_idx ON pglease.slots (scope, slot) WHERE NOT counted;

-- The queue of refused slot claims (no starvation), created empty as in
-- sql/schema/10_schema.sql: every claim that waits registers again at its
-- next refusal.
CREATE UNLOGGED TABLE pglease.slot_queue (
    scope       text        NOT NULL,
    holder      text        NOT NULL,
    holder_role text        NOT NULL,
    units       integer     NOT NULL CHECK (units BETWEEN 1 AND 1000000),
    since       timestamptz NOT NULL,
    until       timestamptz NOT NULL,
    PRIMARY KEY (scope, holder, holder_role)
);
COMMENT ON TABLE pglease.slot_queue IS
    'pglease: refused slot claims in the order they were first refused; the oldest keeps room for its units';
CREATE INDEX slot_queue_since_idx ON pglease.slot_queue (scope, since);

-- Shard groups (docs/groups.md, sql/functions/70_groups.sql): three new
-- tables, empty; created here as in sql/schema/10_schema.sql. No existing
-- row changes.
CREATE TABLE pglease.groups (
    name       text        PRIMARY KEY,
    group_role text        NOT NULL,
    shards     integer     NOT NULL CHECK (shards BETWEEN 1 AND 100000),
    created_at timestamptz NOT NULL
);
COMMENT ON TABLE pglease.groups IS
    'pglease shard groups; change only through the pglease functions';

-- The shards of a group, named, in order (ord from 1). They never change.
CREATE TABLE pglease.group_shards (
    group_name text    NOT NULL REFERENCES pglease.groups (name) ON DELETE CASCADE,
    shard      text    NOT NULL CHECK (octet_length(shard) BETWEEN 1 AND 128),
    ord        integer NOT NULL,
    PRIMARY KEY (group_name, shard)
);
COMMENT ON TABLE pglease.group_shards IS
    'pglease: the shards of each group; change only through the pglease functions';
CREATE UNIQUE INDEX group_shards_ord_idx ON pglease.group_shards (group_name, ord);

-- The members of a group: live until expires_at (each pglease.group_sync
-- moves it to now + TTL); a lapsed row is deleted by the next sync.
-- max_shards NULL: no maximum.
CREATE TABLE pglease.group_members (
    group_name text        NOT NULL REFERENCES pglease.groups (name) ON DELETE CASCADE,
    member     text        NOT NULL,
    max_shards integer     CHECK (max_shards BETWEEN 1 AND 100000),
    joined_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (group_name, member)
);
COMMENT ON TABLE pglease.group_members IS
    'pglease: the members of each group; change only through the pglease functions';

-- Waiter registrations become one per waiting role, so that a registration
-- never waits for another role's in flight. The table is UNLOGGED and its
-- rows only save waiters a retry: they are dropped, and each waiter
-- registers again at its next refusal.
DELETE FROM pglease.waiters;
ALTER TABLE pglease.waiters
    ADD COLUMN caller_role text NOT NULL,
    DROP CONSTRAINT waiters_pkey,
    ADD CONSTRAINT waiters_pkey PRIMARY KEY (kind, name, caller_role);

-- The fence floors move from the row of pglease.fence_floor to sequences,
-- which callers read as they stand whatever their snapshot (a fence no
-- longer goes backwards under REPEATABLE READ); each starts at the floor
-- the row held, so every fence stays as it is.
CREATE SEQUENCE pglease.lease_fence_floor AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE pglease.slot_fence_floor AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE pglease.purged_rows AS bigint MINVALUE 0 START 0;
SELECT pg_catalog.setval('pglease.lease_fence_floor', f.lease_fence, true),
       pg_catalog.setval('pglease.slot_fence_floor', f.slot_fence, true),
       pg_catalog.setval('pglease.purged_rows', f.purged, true)
FROM pglease.fence_floor AS f;
-- purge_due's turns become one per role (each role purges what it left);
-- every role's first purge_due after the upgrade purges.
CREATE TABLE pglease.purge_turns (
    role_name  text        PRIMARY KEY,
    last_purge timestamptz NOT NULL
);
COMMENT ON TABLE pglease.purge_turns IS
    'pglease: when each role last purged through pglease.purge_due; change only through the pglease functions';
DROP TABLE pglease.fence_floor;
CREATE TABLE pglease.purge_lock ();
COMMENT ON TABLE pglease.purge_lock IS
    'pglease: locked by purges while they raise the fence floors; holds no rows';

-- Names a role owns: a new table, empty (every name stays shared until the
-- owner binds a prefix).
CREATE TABLE pglease.prefixes (
    prefix     text        PRIMARY KEY CHECK (octet_length(prefix) BETWEEN 1 AND 256),
    owner_role text        NOT NULL,
    bound_at   timestamptz NOT NULL
);
COMMENT ON TABLE pglease.prefixes IS
    'pglease: name prefixes bound to the role that owns them; change only through pglease.prefix_bind and prefix_unbind';

-- Quotas (0.3.0, sql/functions/06_quotas.sql): the schema owner's caps per
-- role and kind of row. created_by on leases, slots and slot_scopes is the
-- role that created the row while that role was capped (NULL otherwise:
-- the partial indexes then cost uncapped roles nothing, also on the
-- updates of a takeover or release that are not HOT); it never changes.
CREATE TABLE pglease.quotas (
    role_name text    NOT NULL,
    kind      text    NOT NULL CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs')),
    max_rows  integer NOT NULL CHECK (max_rows >= 0),
    PRIMARY KEY (role_name, kind)
);
COMMENT ON TABLE pglease.quotas IS
    'pglease: caps on the rows each role may have, by kind; change only through pglease.quota_set';
ALTER TABLE pglease.leases ADD COLUMN created_by text;
ALTER TABLE pglease.slots ADD COLUMN created_by text;
ALTER TABLE pglease.slot_scopes ADD COLUMN created_by text;
CREATE INDEX leases_created_by_idx ON pglease.leases (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX slots_created_by_idx ON pglease.slots (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX slot_scopes_created_by_idx ON pglease.slot_scopes (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX runs_holder_role_idx ON pglease.runs (holder_role);

-- BEGIN #51 limits (moves to 0.4.0)
-- Rate limits (sql/functions/80_limits.sql, docs/limits.md): two new
-- tables, empty, created as in sql/schema/10_schema.sql, and the quota
-- kind 'limits'.
CREATE TABLE pglease.limits (
    target      text        PRIMARY KEY CHECK (octet_length(target) BETWEEN 1 AND 256),
    exact       boolean     NOT NULL,
    rate        integer     NOT NULL CHECK (rate >= 1),
    per         interval    NOT NULL,
    burst       integer     NOT NULL CHECK (burst >= 1),
    emission_us bigint      NOT NULL CHECK (emission_us >= 1),
    set_by      text        NOT NULL,
    set_at      timestamptz NOT NULL,
    created_by  text
);
COMMENT ON TABLE pglease.limits IS
    'pglease: rate limits by key or prefix; change only through pglease.limit_set and limit_unset';
CREATE INDEX limits_created_by_idx ON pglease.limits (created_by) WHERE created_by IS NOT NULL;
CREATE TABLE pglease.limit_state (
    key        text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    key_role   text        NOT NULL,
    tat        timestamptz NOT NULL,
    created_by text,
    PRIMARY KEY (key, key_role)
) WITH (fillfactor = 70);
COMMENT ON TABLE pglease.limit_state IS
    'pglease: the state of each rate-limited key; change only through the pglease functions';
CREATE INDEX limit_state_created_by_idx ON pglease.limit_state (created_by) WHERE created_by IS NOT NULL;
ALTER TABLE pglease.quotas
    DROP CONSTRAINT quotas_kind_check,
    ADD CONSTRAINT quotas_kind_check
        CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs', 'limits'));
CREATE TABLE pglease.limit_reservations (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    key_role    text        NOT NULL,
    amount      integer     NOT NULL CHECK (amount >= 1),
    reserved_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE pglease.limit_reservations IS
    'pglease: reservations of rate-limit tokens awaiting settlement; change only through the pglease functions';
CREATE INDEX limit_reservations_expires_idx ON pglease.limit_reservations (expires_at);
-- END #51 limits
