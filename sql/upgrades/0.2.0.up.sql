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
