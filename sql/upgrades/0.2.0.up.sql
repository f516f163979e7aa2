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

-- Tenures bound to the role that took them, one capacity per scope (see
-- sql/schema/10_schema.sql). Tenures granted by 0.1.0 keep NULL: the first
-- renewal binds them to its role; a NULL capacity constrains no claim.
ALTER TABLE pglease.leases ADD COLUMN holder_role text;
ALTER TABLE pglease.slots ADD COLUMN holder_role text;
ALTER TABLE pglease.slots ADD COLUMN capacity integer CHECK (capacity BETWEEN 1 AND 1000000);

-- No VACUUM truncation of the tables renewals write (see
-- sql/schema/10_schema.sql).
ALTER TABLE pglease.leases SET (vacuum_truncate = false);
ALTER TABLE pglease.slots SET (vacuum_truncate = false);

-- The advisory wait lock is gone (its keys were guessable, so any role
-- could take it and stall pglease calls); registration and release now
-- agree through row locks of pglease's own rows (see pglease._wake).
DROP FUNCTION pglease._wait_lock(text, text);
DROP FUNCTION pglease._wake(text, text, integer, bigint, text);
