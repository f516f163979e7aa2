-- pglease 0.2.0 -> 0.3.0: table changes. Runs after the catalog check and
-- before the functions, views and privileges of 0.3.0 are applied.
--
-- 0.3.0 changes functions (a refused acquire's expires_in and a refused
-- claim's retry_in are taken on the clock read that decided; renew_holder's
-- expires_at documented as the lower bound it is) and adds one
-- (pglease.metrics, read-only); those need no table change.
--
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
    ADD COLUMN release_for          interval;

CREATE UNLOGGED TABLE pglease.observers (
    name  text        PRIMARY KEY,
    until timestamptz NOT NULL
);
COMMENT ON TABLE pglease.observers IS
    'pglease: observed leases, whose changes are notified';

CREATE UNLOGGED TABLE pglease.candidates (
    name   text        NOT NULL,
    holder text        NOT NULL,
    until  timestamptz NOT NULL,
    PRIMARY KEY (name, holder)
);
COMMENT ON TABLE pglease.candidates IS
    'pglease: refused holders of a lease, which a release request may prefer';
