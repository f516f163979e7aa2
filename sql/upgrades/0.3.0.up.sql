-- pglease 0.2.0 -> 0.3.0: table changes. Runs after the catalog check and
-- before the functions, views and privileges of 0.3.0 are applied.
--
-- Functions: a refused acquire's expires_in and a refused claim's
-- retry_in are taken on the clock read that decided; renew_holder's
-- expires_at documented as the lower bound it is; one added
-- (pglease.metrics, read-only). Its lease, slot and waiter tables,
-- columns, indexes and constraints are 0.2.0's.
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
