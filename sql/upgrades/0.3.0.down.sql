-- pglease 0.3.0 -> 0.2.0: undoes sql/upgrades/0.3.0.up.sql. Runs before the
-- functions, views and privileges of 0.2.0 are applied again.
--
-- The function 0.3.0 added for metrics goes: 0.2.0 has no pglease.metrics.
DROP FUNCTION pglease.metrics(text, integer);

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
    DROP COLUMN release_for;
