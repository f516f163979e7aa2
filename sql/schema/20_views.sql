-- pglease: status views. CREATE OR REPLACE, so that an upgrade can apply
-- this file as it stands (a view may gain columns at the end, never lose or
-- change one: drop it in the upgrade delta first).

-- Status views. Times are computed from the server clock when the view is
-- read. expires_at is when the tenure ends or ended (for a free row: when it
-- was released); expires_in is the time left, zero once expired or free.
CREATE OR REPLACE VIEW pglease.lease_status AS
SELECT l.name,
       l.holder,
       l.fence,
       CASE WHEN l.holder IS NULL THEN 'free'
            WHEN l.expires_at > c.now THEN 'held'
            ELSE 'expired' END AS state,
       l.expires_at,
       CASE WHEN l.holder IS NULL THEN interval '0'
            ELSE greatest(l.expires_at - c.now, interval '0') END AS expires_in,
       -- Leadership (0.3.0, docs/leadership.md): the live tenure's value and
       -- release request; the holder a release request preferred, until
       -- when the next grant is reserved for it (once the tenure is over).
       CASE WHEN l.holder IS NOT NULL AND l.expires_at > c.now THEN l.value END AS value,
       CASE WHEN l.holder IS NOT NULL AND l.expires_at > c.now
            THEN l.release_requested_at END AS release_requested_at,
       l.release_to AS preferred_holder,
       CASE WHEN l.holder IS NULL OR l.expires_at <= c.now
            THEN l.expires_at + l.release_for END AS preferred_until,
       -- 0.3.0: the preferred holder's role, and the role owning the name
       -- (pglease.prefix_bind; NULL: a shared name).
       l.release_to_role AS preferred_role,
       pglease.owner_of(l.name) AS owner_role
FROM pglease.leases AS l
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;
COMMENT ON VIEW pglease.lease_status IS
    'pglease leases as seen now: state is held, expired or free';

CREATE OR REPLACE VIEW pglease.slot_status AS
SELECT s.scope,
       s.slot::integer AS slot,
       s.holder,
       s.fence::bigint AS fence,
       CASE WHEN s.holder IS NULL THEN 'free'
            WHEN s.expires_at > c.now THEN 'held'
            ELSE 'expired' END AS state,
       s.expires_at,
       CASE WHEN s.holder IS NULL THEN interval '0'
            ELSE greatest(s.expires_at - c.now, interval '0') END AS expires_in,
       s.units::integer AS units
FROM pglease.slots AS s
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;
COMMENT ON VIEW pglease.slot_status IS
    'pglease slots as seen now: state is held, expired or free';

CREATE OR REPLACE VIEW pglease.slot_scope_status AS
SELECT s.scope,
       count(*) FILTER (WHERE s.holder IS NOT NULL AND s.expires_at > c.now)::integer AS in_use,
       count(*)::integer AS slots,
       coalesce(sum(s.units) FILTER (WHERE s.holder IS NOT NULL AND s.expires_at > c.now), 0)::integer
           AS units_in_use
FROM pglease.slots AS s
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
GROUP BY s.scope;
COMMENT ON VIEW pglease.slot_scope_status IS
    'pglease slot scopes: live holders (in_use), slot rows ever created (slots) and units the live holders hold (units_in_use)';
