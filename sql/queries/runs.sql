-- name: LeaseReleaseAfter :one
-- A release that leaves the tenure held until grant + hold (pglease.release_after).
SELECT r.released::boolean AS released, r.held_until
FROM pglease.release_after(@name, @holder, @fence, @hold_at_least) AS r;

-- name: RunBegin :one
SELECT b.run::boolean AS run, b.window_start::timestamptz AS window_start,
       b.done_fence, b.done_holder, b.done_at
FROM pglease.run_begin(@name, @holder, @fence, @run_window) AS b;

-- name: RunEnd :one
SELECT e.recorded::boolean AS recorded, e.outcome
FROM pglease.run_end(@name, @holder, @fence, @exit_status::integer) AS e;

-- name: RunHistory :many
SELECT h.fence::bigint AS fence, h.window_start::timestamptz AS window_start, h.holder::text AS holder,
       h.started_at::timestamptz AS started_at,
       (h.ended_at IS NOT NULL)::boolean AS ended, coalesce(h.ended_at, h.started_at)::timestamptz AS ended_at,
       coalesce(h.exit_status, -1)::integer AS exit_status, h.outcome::text AS outcome
FROM pglease.run_history(@name, @max_rows::integer) AS h;

-- name: RunSummary :one
SELECT s.job_names::text[] AS job_names, s.last_started::float8[] AS last_started,
       s.last_ended::float8[] AS last_ended, s.last_holders::text[] AS last_holders,
       s.last_outcomes::text[] AS last_outcomes, s.last_exit_statuses::integer[] AS last_exit_statuses,
       s.last_success::float8[] AS last_success, s.last_windows::float8[] AS last_windows,
       s.jobs_dropped::bigint AS jobs_dropped
FROM pglease.run_summary(@names::text, @max_names::integer) AS s;
