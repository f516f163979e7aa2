-- pglease 0.3.0 -> 0.2.0: undoes sql/upgrades/0.3.0.up.sql. Runs before the
-- functions, views and privileges of 0.2.0 are applied again.
--
-- 0.3.0 added leadership's columns to pglease.leases and units, check_at
-- and domain types to pglease.slots (see sql/upgrades/0.3.0.up.sql); all
-- are undone below, and every lease, slot, fence and counter stays
-- exactly as it is. The functions 0.3.0 added go: 0.2.0 has no
-- pglease.metrics. The cron functions and the run ledger go too, and with
-- it the record of past runs (a job's next run after an upgrade back to
-- 0.3.0 finds its window open).
-- BEGIN #51 limits (moves to 0.4.0)
-- Rate limits go first (they came last): their functions, the key states
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
DROP FUNCTION pglease._limit_of(text, text);
DROP FUNCTION pglease._limit_admin(text, text, text);
DROP FUNCTION pglease._limit_key_role(text);
DROP FUNCTION pglease._limit_purge(timestamptz, boolean, text);
DROP FUNCTION pglease._limit_us(timestamptz);
DROP FUNCTION pglease.reserve(text, integer, interval);
DROP FUNCTION pglease.settle(text, bigint, integer);
DROP TABLE pglease.limit_reservations;
DROP TABLE pglease.limit_state;
DROP TABLE pglease.limits;
DELETE FROM pglease.quotas AS q WHERE q.kind = 'limits';
ALTER TABLE pglease.quotas
    DROP CONSTRAINT quotas_kind_check,
    ADD CONSTRAINT quotas_kind_check
        CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs'));
-- END #51 limits

DROP FUNCTION pglease.metrics(text, integer);
DROP FUNCTION pglease.release_after(text, text, bigint, interval);
DROP FUNCTION pglease.run_begin(text, text, bigint, interval);
DROP FUNCTION pglease.run_end(text, text, bigint, integer);
DROP FUNCTION pglease.run_history(text, integer);
DROP FUNCTION pglease.run_summary(text, integer);
DROP FUNCTION pglease._run_tenure(text, text, text, bigint);
DROP FUNCTION pglease._run_outcome(text, bigint, text);
DROP FUNCTION pglease._check_span(text, text, interval, interval);
DROP FUNCTION pglease._check_names(text, text);
DROP FUNCTION pglease._check_tenure(text, text, text, bigint);
DROP TABLE pglease.runs;

-- The batched calls go (clients fall back to single calls).
DROP FUNCTION pglease.acquire_batch(text[], text, interval[], text[]);
DROP FUNCTION pglease.release_batch(text[], text, bigint[]);
DROP FUNCTION pglease._batch_check(text, text[], text, text, integer, boolean);

-- Leadership goes: its functions, the two tables and the four columns (the
-- holders' values and pending release requests are lost; every tenure,
-- fence and expiry stays). The view is dropped first, since it reads the
-- columns; 0.2.0's is created again after this. Role pglease_operator
-- stays, as pglease_client does: roles are cluster-wide.
DROP VIEW pglease.lease_status;
DROP FUNCTION pglease.acquire(text, text, interval, text);
DROP FUNCTION pglease.set_value(text, text, bigint, text);
DROP FUNCTION pglease.renew_lease(text, text, bigint, interval);
DROP FUNCTION pglease.observe(text, interval);
DROP FUNCTION pglease.request_release(text, text, interval);
DROP FUNCTION pglease._observed_wake(text);
DROP FUNCTION pglease._check_value(text, text);
DROP TABLE pglease.observers;
DROP TABLE pglease.candidates;
ALTER TABLE pglease.leases
    DROP COLUMN value,
    DROP COLUMN release_requested_at,
    DROP COLUMN release_to,
    DROP COLUMN release_for,
    DROP COLUMN release_to_role;

-- Weighted slot claims go: the five-argument claims, units and check_at,
-- and the indexes on expires_at come back. A tenure of more than one unit
-- stays live and counts as one slot, as 0.2.0 counts (the scope admits
-- more units than its capacity until it ends); every fence and expiry
-- stays, and the scopes' counters count the counted slots again. The views
-- are dropped first, since they read units; 0.2.0's are created again
-- after this.
DROP VIEW pglease.slot_status;
DROP VIEW pglease.slot_scope_status;
DROP FUNCTION pglease.claim_slot(text, text, integer, interval, integer, boolean);
DROP FUNCTION pglease.claim_slots(text, text[], integer[], interval, integer[], boolean);
DROP FUNCTION pglease._slot_claim_locked(text, text, integer, integer, timestamptz, interval, integer, boolean, boolean);
DROP FUNCTION pglease._slot_queue(text, text, integer, timestamptz, interval);
DROP FUNCTION pglease._slot_wake(text, boolean);
DROP FUNCTION pglease._slot_retry_in(text, timestamptz, interval);
DROP TABLE pglease.slot_queue;
DROP INDEX pglease.slots_counted_check_idx;
DROP INDEX pglease.slots_free_idx;
ALTER TABLE pglease.slots
    DROP COLUMN units,
    DROP COLUMN check_at,
    ALTER COLUMN slot TYPE integer,
    ALTER COLUMN fence TYPE bigint,
    ALTER COLUMN capacity TYPE integer,
    ADD CONSTRAINT slots_slot_check CHECK (slot > 0),
    ADD CONSTRAINT slots_fence_check CHECK (fence > 0),
    ADD CONSTRAINT slots_capacity_check CHECK (capacity BETWEEN 1 AND 1000000);
DROP DOMAIN pglease.slot_number;
DROP DOMAIN pglease.fence_number;
DROP DOMAIN pglease.unit_count;
CREATE INDEX slots_scope_expires_idx ON pglease.slots (scope, expires_at);
CREATE INDEX slots_counted_expires_idx ON pglease.slots (scope, expires_at) WHERE counted;
UPDATE pglease.slot_scopes AS sc
SET counted = (SELECT count(*) FROM pglease.slots AS s WHERE s.scope = sc.scope AND s.counted);

-- Shard groups go: their functions and tables (the groups, their shard
-- names and members). The shards' leases ('{group}/shard' rows of
-- pglease.leases) stay, with their fences, as any lease does.
DROP FUNCTION pglease.group_create(text, integer, text[]);
DROP FUNCTION pglease.group_sync(text, text, interval, integer);
DROP FUNCTION pglease.group_release(text, text, text, bigint);
DROP FUNCTION pglease.group_leave(text, text);
DROP FUNCTION pglease.group_status(text);
DROP FUNCTION pglease.group_list();
DROP FUNCTION pglease._group_of(text, text, boolean);
DROP FUNCTION pglease._check_group(text, text);
DROP FUNCTION pglease._group_lease(text, text);
DROP FUNCTION pglease._group_max_shards();
DROP TABLE pglease.group_members;
DROP TABLE pglease.group_shards;
DROP TABLE pglease.groups;

-- Waiter registrations go back to one per name (they only save retries).
DELETE FROM pglease.waiters;
ALTER TABLE pglease.waiters
    DROP CONSTRAINT waiters_pkey,
    DROP COLUMN caller_role,
    ADD CONSTRAINT waiters_pkey PRIMARY KEY (kind, name);

-- The fence floors go back to the row of pglease.fence_floor, at the
-- sequences' values: every fence stays as it is.
CREATE TABLE pglease.fence_floor (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    lease_fence bigint      NOT NULL DEFAULT 0 CHECK (lease_fence >= 0),
    slot_fence  bigint      NOT NULL DEFAULT 0 CHECK (slot_fence >= 0),
    purged      bigint      NOT NULL DEFAULT 0 CHECK (purged >= 0),
    last_purge  timestamptz
);
COMMENT ON TABLE pglease.fence_floor IS
    'pglease: fences of purged rows never come back; change only through the pglease functions';
INSERT INTO pglease.fence_floor (id, lease_fence, slot_fence, purged, last_purge)
SELECT true, lf.last_value, sf.last_value, pr.last_value,
       (SELECT max(t.last_purge) FROM pglease.purge_turns AS t)
FROM pglease.lease_fence_floor AS lf, pglease.slot_fence_floor AS sf,
     pglease.purged_rows AS pr
WHERE lf.last_value + sf.last_value + pr.last_value > 0
   OR EXISTS (SELECT FROM pglease.purge_turns);
DROP SEQUENCE pglease.lease_fence_floor;
DROP SEQUENCE pglease.slot_fence_floor;
DROP SEQUENCE pglease.purged_rows;
DROP TABLE pglease.purge_turns;
DROP TABLE pglease.purge_lock;

-- The helpers 0.3.0 added for the rules above.
DROP FUNCTION pglease._trusted();
DROP FUNCTION pglease._reserved(timestamptz, text, text, interval, text, text, timestamptz);
DROP FUNCTION pglease._raise_floors(bigint, bigint, bigint);
DROP FUNCTION pglease._check_age(text, text, interval);
DROP FUNCTION pglease._check_flag(text, text, boolean);
DROP FUNCTION pglease._lock_for_takeover(text, bigint, timestamptz);
DROP FUNCTION pglease._fenced_key(text, bigint);

-- Names a role owns go: every name is shared again.
DROP FUNCTION pglease.prefix_bind(text, text);
DROP FUNCTION pglease.prefix_unbind(text);
DROP FUNCTION pglease.owner_of(text);
DROP FUNCTION pglease.group_delete(text);
DROP FUNCTION pglease._check_owner(text, text, text);
DROP FUNCTION pglease._may_take(text);
DROP FUNCTION pglease._owner(text);
DROP TABLE pglease.prefixes;

-- Quotas go, with the created_by columns and their indexes.
DROP FUNCTION pglease.quota_set(text, text, integer);
DROP FUNCTION pglease.quota_usage();
DROP FUNCTION pglease._check_quota(text, text);
DROP FUNCTION pglease._quota_used(text, text, bigint);
DROP FUNCTION pglease._quota_kinds();
DROP TABLE pglease.quotas;
ALTER TABLE pglease.leases DROP COLUMN created_by;
ALTER TABLE pglease.slots DROP COLUMN created_by;
ALTER TABLE pglease.slot_scopes DROP COLUMN created_by;
