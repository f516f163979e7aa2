-- Every partition's renewals and losses, concatenated in partition order;
-- expires_at and expires_in are the earliest any partition returned (each
-- is its own clock's now + p_ttl, a lower bound of the end of every tenure
-- it renewed; the earliest is one of them all). Fails when any partition
-- fails: renew each tenure on its own (renew, renew_slot) to keep the
-- others going while a partition is down.
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    leases := '{}'; lease_fences := '{}';
    slot_scopes := '{}'; slots := '{}'; slot_fences := '{}';
    lost_leases := '{}'; lost_slot_scopes := '{}'; lost_slots := '{}';
    FOR r IN SELECT * FROM pglease._all_renew_holder(p_holder, p_ttl) LOOP
        leases := leases || r.leases;
        lease_fences := lease_fences || r.lease_fences;
        slot_scopes := slot_scopes || r.slot_scopes;
        slots := slots || r.slots;
        slot_fences := slot_fences || r.slot_fences;
        lost_leases := lost_leases || r.lost_leases;
        lost_slot_scopes := lost_slot_scopes || r.lost_slot_scopes;
        lost_slots := lost_slots || r.lost_slots;
        IF expires_at IS NULL OR r.expires_at < expires_at THEN
            expires_at := r.expires_at;
        END IF;
        IF expires_in IS NULL OR r.expires_in < expires_in THEN
            expires_in := r.expires_in;
        END IF;
    END LOOP;
END
$$;
