-- Status views: the union of every partition's view (RUN ON ALL), read
-- from all partitions at once. Reading one fails while any partition is
-- unreachable.
CREATE OR REPLACE FUNCTION pglease._all_lease_status(
    OUT name text, OUT holder text, OUT fence bigint, OUT state text,
    OUT expires_at timestamptz, OUT expires_in interval,
    OUT value text, OUT release_requested_at timestamptz,
    OUT preferred_holder text, OUT preferred_until timestamptz,
    OUT preferred_role text, OUT owner_role text)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
    CLUSTER 'pglease';
    RUN ON ALL;
    SELECT name, holder, fence, state, expires_at, expires_in,
           value, release_requested_at, preferred_holder, preferred_until,
           preferred_role, owner_role
    FROM pglease.lease_status;
$$;

CREATE OR REPLACE FUNCTION pglease._all_slot_status(
    OUT scope text, OUT slot integer, OUT holder text, OUT fence bigint, OUT state text,
    OUT expires_at timestamptz, OUT expires_in interval, OUT units integer)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
    CLUSTER 'pglease';
    RUN ON ALL;
    SELECT scope, slot, holder, fence, state, expires_at, expires_in, units FROM pglease.slot_status;
$$;

CREATE OR REPLACE FUNCTION pglease._all_slot_scope_status(
    OUT scope text, OUT in_use integer, OUT slots integer, OUT units_in_use integer)
RETURNS SETOF record
LANGUAGE plproxy VOLATILE
AS $$
    CLUSTER 'pglease';
    RUN ON ALL;
    SELECT scope, in_use, slots, units_in_use FROM pglease.slot_scope_status;
$$;

CREATE OR REPLACE VIEW pglease.lease_status AS
SELECT * FROM pglease._all_lease_status();
COMMENT ON VIEW pglease.lease_status IS
    'pglease leases of every partition as seen now: state is held, expired or free';

CREATE OR REPLACE VIEW pglease.slot_status AS
SELECT * FROM pglease._all_slot_status();
COMMENT ON VIEW pglease.slot_status IS
    'pglease slots of every partition as seen now: state is held, expired or free';

CREATE OR REPLACE VIEW pglease.slot_scope_status AS
SELECT * FROM pglease._all_slot_scope_status();
COMMENT ON VIEW pglease.slot_scope_status IS
    'pglease slot scopes of every partition: live holders (in_use), slot rows ever created (slots) and units the live holders hold (units_in_use)';
