-- pglease 0.4.0 -> 0.3.0: undoes sql/upgrades/0.4.0.up.sql. Runs before the
-- functions, views and privileges of 0.3.0 are applied again.

-- Rate limits go: their functions, the key states
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
DROP FUNCTION pglease._limit_cost(text, text, text, integer);
DROP FUNCTION pglease._limit_of(text, text);
DROP FUNCTION pglease._limit_admin(text, text, text);
DROP FUNCTION pglease._limit_key_role(text);
DROP FUNCTION pglease._limit_purge(timestamptz, boolean, text);
DROP FUNCTION pglease._limit_us(timestamptz);
DROP FUNCTION pglease.reserve(text, integer, interval);
DROP FUNCTION pglease.settle(text, bigint, integer);
DROP FUNCTION pglease.reserve_all(text[], integer, interval);
DROP FUNCTION pglease._limit_reserve(text, text, text[], integer, interval);
DROP FUNCTION pglease._limit_keys(text, text, text[], text, integer[]);
DROP FUNCTION pglease._limit_order(text[], integer[]);
DROP TABLE pglease.limit_reservations;
DROP TABLE pglease.limit_state;
DROP TABLE pglease.limits;
DELETE FROM pglease.quotas AS q WHERE q.kind = 'limits';
ALTER TABLE pglease.quotas
    DROP CONSTRAINT quotas_kind_check,
    ADD CONSTRAINT quotas_kind_check
        CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs'));
