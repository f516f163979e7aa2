-- pglease 0.3.0 -> 0.4.0: table changes. Runs after the catalog check and
-- before the functions, views and privileges of 0.4.0 are applied.

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
