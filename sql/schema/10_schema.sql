-- pglease: schema, tables and views.
--
-- Every table is an ordinary logged table: an UNLOGGED table is truncated on
-- crash and is not replicated, which would restart fences and break fencing.
-- Rows are never deleted by pglease: a lease row keeps its fence forever so the
-- next tenure always gets a larger one, also after release and expiry.

CREATE SCHEMA pglease;
COMMENT ON SCHEMA pglease IS
    'pglease: fenced leases and N-slot concurrency claims decided by the server clock';

-- One row per lease name ever acquired.
--   holder IS NULL                           -> free (released, or never acquired)
--   holder IS NOT NULL, expires_at > now     -> held
--   holder IS NOT NULL, expires_at <= now    -> expired (its tenure is over)
CREATE TABLE pglease.leases (
    name        text        PRIMARY KEY,
    holder      text,
    fence       bigint      NOT NULL CHECK (fence > 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
) WITH (fillfactor = 50);
COMMENT ON TABLE pglease.leases IS
    'pglease leases; change only through the pglease functions';

CREATE INDEX leases_holder_idx ON pglease.leases (holder) WHERE holder IS NOT NULL;

-- One row per slot scope; claims lock it so that counting live holders and
-- taking a slot happen as one step per scope.
CREATE TABLE pglease.slot_scopes (
    scope text PRIMARY KEY
);
COMMENT ON TABLE pglease.slot_scopes IS
    'pglease slot scopes; the row lock serialises claims within one scope';

-- One row per slot of a scope; slot numbers are dense from 1 and created on
-- first use, so a scope never has more rows than the largest capacity it was
-- claimed with. Same states as pglease.leases.
CREATE TABLE pglease.slots (
    scope       text        NOT NULL,
    slot        integer     NOT NULL CHECK (slot > 0),
    holder      text,
    fence       bigint      NOT NULL CHECK (fence > 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE pglease.slots IS
    'pglease slots; change only through the pglease functions';

CREATE INDEX slots_scope_expires_idx ON pglease.slots (scope, expires_at);
CREATE INDEX slots_holder_idx ON pglease.slots (holder, scope) WHERE holder IS NOT NULL;

-- Who waits for a release, so that a release NOTIFYs only when someone
-- listens for it (see pglease._wake). A NOTIFY makes its transaction commit
-- under a cluster-wide lock, one notifying commit at a time; without this
-- every acquire and release would pay that. UNLOGGED on purpose: it holds
-- no fence and no grant, registering must not wait for a WAL flush, and
-- losing it (crash, failover) only makes waiters wake at the expiry they
-- were told rather than at the release.
CREATE UNLOGGED TABLE pglease.waiters (
    kind  text        NOT NULL,  -- 'lease' or 'slot'
    name  text        NOT NULL,  -- lease name or slot scope
    until timestamptz NOT NULL,  -- waiters retry by then anyway
    PRIMARY KEY (kind, name)
);
COMMENT ON TABLE pglease.waiters IS
    'pglease: refused acquires and claims waiting for a release notification';

-- Status views. Times are computed from the server clock when the view is
-- read. expires_at is when the tenure ends or ended (for a free row: when it
-- was released); expires_in is the time left, zero once expired or free.
CREATE VIEW pglease.lease_status AS
SELECT l.name,
       l.holder,
       l.fence,
       CASE WHEN l.holder IS NULL THEN 'free'
            WHEN l.expires_at > c.now THEN 'held'
            ELSE 'expired' END AS state,
       l.expires_at,
       CASE WHEN l.holder IS NULL THEN interval '0'
            ELSE greatest(l.expires_at - c.now, interval '0') END AS expires_in
FROM pglease.leases AS l
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;
COMMENT ON VIEW pglease.lease_status IS
    'pglease leases as seen now: state is held, expired or free';

CREATE VIEW pglease.slot_status AS
SELECT s.scope,
       s.slot,
       s.holder,
       s.fence,
       CASE WHEN s.holder IS NULL THEN 'free'
            WHEN s.expires_at > c.now THEN 'held'
            ELSE 'expired' END AS state,
       s.expires_at,
       CASE WHEN s.holder IS NULL THEN interval '0'
            ELSE greatest(s.expires_at - c.now, interval '0') END AS expires_in
FROM pglease.slots AS s
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c;
COMMENT ON VIEW pglease.slot_status IS
    'pglease slots as seen now: state is held, expired or free';

CREATE VIEW pglease.slot_scope_status AS
SELECT s.scope,
       count(*) FILTER (WHERE s.holder IS NOT NULL AND s.expires_at > c.now)::integer AS in_use,
       count(*)::integer AS slots
FROM pglease.slots AS s
CROSS JOIN (SELECT pg_catalog.clock_timestamp() AS now) AS c
GROUP BY s.scope;
COMMENT ON VIEW pglease.slot_scope_status IS
    'pglease slot scopes: live holders (in_use) and slot rows ever created (slots)';
