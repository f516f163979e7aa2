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
