-- pglease 0.2.0 -> 0.1.0: undoes sql/upgrades/0.2.0.up.sql and drops what
-- 0.2.0 added. Runs before the functions and privileges of 0.1.0 are
-- applied again. Leases, slots and fences stay; the role binding, the
-- capacities of live tenures and the slot counters go (0.1.0 has none). A call running
-- 0.2.0's code when this commits fails once (SQLSTATE 42703: the column
-- went under it); its retry runs 0.1.0's.

-- 0.1.0 has no fence floor: once a row was purged, a purged name would start
-- again at fence 1 there. Refuse rather than let a fence go backwards.
DO $pglease$
DECLARE
    v_purged bigint;
BEGIN
    SELECT f.purged INTO v_purged FROM pglease.fence_floor AS f;
    IF v_purged > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('pglease: cannot downgrade to 0.1.0: pglease.purge removed %s rows, and 0.1.0 has no fence floor to keep their names'' fences from starting again at 1', v_purged),
            HINT = 'Stay on 0.2.0 (nothing was changed).';
    END IF;
END
$pglease$;

DROP FUNCTION pglease._wake(text, text, boolean);
ALTER TABLE pglease.slots RESET (vacuum_truncate);
ALTER TABLE pglease.leases RESET (vacuum_truncate);
DROP INDEX pglease.slots_counted_capacity_idx;
DROP INDEX pglease.slots_counted_expires_idx;
ALTER TABLE pglease.slots DROP COLUMN counted;
ALTER TABLE pglease.slot_scopes DROP COLUMN counted;
ALTER TABLE pglease.slots DROP COLUMN capacity;
ALTER TABLE pglease.slots DROP COLUMN holder_role;
ALTER TABLE pglease.leases DROP COLUMN holder_role;
DROP FUNCTION pglease.purge_due(interval, interval);
DROP FUNCTION pglease.purge(interval);
DROP FUNCTION pglease.version();
DROP TABLE pglease.fence_floor;
