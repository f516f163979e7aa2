-- pglease 0.1.0 -> 0.2.0: table changes. Runs after the catalog check and
-- before the functions, views and privileges of 0.2.0 are applied.

-- pglease.purge and its fence floor (see sql/schema/10_schema.sql).
CREATE TABLE pglease.fence_floor (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    lease_fence bigint      NOT NULL DEFAULT 0 CHECK (lease_fence >= 0),
    slot_fence  bigint      NOT NULL DEFAULT 0 CHECK (slot_fence >= 0),
    purged      bigint      NOT NULL DEFAULT 0 CHECK (purged >= 0),
    last_purge  timestamptz
);
COMMENT ON TABLE pglease.fence_floor IS
    'pglease: fences of purged rows never come back; change only through the pglease functions';

-- The scope counter first (see below): claims lock a scope row before its
-- slot rows, and so does this upgrade, so that it cannot deadlock with one.
ALTER TABLE pglease.slot_scopes ADD COLUMN counted integer NOT NULL DEFAULT 0 CHECK (counted >= 0);

-- Tenures bound to the role that took them, one capacity per scope (see
-- sql/schema/10_schema.sql). Tenures granted by 0.1.0 keep NULL: the first
-- renewal binds them to its role; a NULL capacity constrains no claim.
ALTER TABLE pglease.leases ADD COLUMN holder_role text;
ALTER TABLE pglease.slots ADD COLUMN holder_role text;
ALTER TABLE pglease.slots ADD COLUMN capacity integer CHECK (capacity BETWEEN 1 AND 1000000);

-- Slot claims count live holders in O(1) (see sql/schema/10_schema.sql).
-- The ALTER TABLE holds every slot row under its lock until the upgrade
-- commits: no tenure is claimed, renewed or released meanwhile. A row whose
-- tenure may still be live (it ends after this transaction began) is
-- counted; one that ended before cannot come back (a renewal extends only
-- a live tenure). Counting one that ended since is harmless: the next claim
-- in its scope un-counts it. Every scope with slot rows gets its counter.
ALTER TABLE pglease.slots ADD COLUMN counted boolean NOT NULL DEFAULT false;
UPDATE pglease.slots AS s SET counted = true WHERE s.expires_at > now();
INSERT INTO pglease.slot_scopes AS sc (scope)
SELECT DISTINCT s.scope FROM pglease.slots AS s
ON CONFLICT ON CONSTRAINT slot_scopes_pkey DO NOTHING;
UPDATE pglease.slot_scopes AS sc SET counted = c.n
FROM (SELECT s.scope, count(*)::integer AS n FROM pglease.slots AS s
      WHERE s.counted GROUP BY s.scope) AS c
WHERE sc.scope = c.scope;
CREATE INDEX slots_counted_expires_idx ON pglease.slots (scope, expires_at) WHERE counted;
CREATE INDEX slots_counted_capacity_idx ON pglease.slots (scope, capacity) WHERE counted;

-- No VACUUM truncation of the tables renewals write (see
-- sql/schema/10_schema.sql).
ALTER TABLE pglease.leases SET (vacuum_truncate = false);
ALTER TABLE pglease.slots SET (vacuum_truncate = false);

-- The advisory wait lock is gone (its keys were guessable, so any role
-- could take it and stall pglease calls); registration and release now
-- agree through row locks of pglease's own rows (see pglease._wake).
DROP FUNCTION pglease._wait_lock(text, text);
DROP FUNCTION pglease._wake(text, text, integer, bigint, text);
