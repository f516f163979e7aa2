-- pglease 0.3.0 -> 0.2.0: undoes sql/upgrades/0.3.0.up.sql. Runs before the
-- functions, views and privileges of 0.2.0 are applied again.
--
-- 0.3.0 changed no table (see sql/upgrades/0.3.0.up.sql), so every lease,
-- slot, fence and counter stays exactly as it is. The function 0.3.0 added
-- goes: 0.2.0 has no pglease.metrics.
DROP FUNCTION pglease.metrics(text, integer);
