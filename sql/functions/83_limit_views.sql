-- The level of each configured rate limit (0.4.0, #51, docs/limits.md):
-- what `pglease status` and `pglease exporter` show. Read-only.

-- pglease.limit_status(p_max): one row per configured limit the caller may
-- see, by target, at most p_max (default 1000) of them:
--   target, exact, rate, per, burst: the limit as pglease.limit_set set it;
--   owner_role: the role owning the target's bound prefix (NULL: a shared
--     name);
--   buckets: the keys' buckets this limit is the longest match of that
--     are not full now (a full bucket has no row, or a row purge may
--     delete);
--   limited: of those, the buckets with less than one token now (a take
--     of one token would be refused);
--   min_remaining: the fewest whole tokens left in any of its buckets now
--     (burst when none is spent): for a budget, burst - min_remaining is
--     the most any one key has used of it;
--   reserved: tokens of its buckets held by reservations not yet settled
--     nor expired (pglease.reserve);
--   limits: how many limits the caller may see in all (more than p_max:
--     the rest were left out);
--   read_at: the server clock reading the levels are computed at.
-- Who sees what: the schema owner, superusers and members of
-- pglease_operator see every limit and bucket. Any other role sees what
-- pglease.peek would answer it: the limits of shared names and of names
-- its roles own, and only the buckets of roles it is a member of (its own
-- bucket of a shared key, its prefixes' buckets); another role's buckets
-- are not counted. Takes no lock; reads every bucket that is not full
-- (one pass over pglease.limit_state) and every unsettled reservation;
-- the amounts of reservations expired by read_at count as back in their
-- buckets, as the buckets' next take finds them.
-- Raises 22004 for a NULL p_max, 22023 for one not from 1 to 100,000.
CREATE OR REPLACE FUNCTION pglease.limit_status(p_max integer DEFAULT 1000,
    OUT target text, OUT exact boolean, OUT rate integer, OUT per interval, OUT burst integer,
    OUT owner_role text, OUT buckets bigint, OUT limited bigint, OUT min_remaining integer,
    OUT reserved bigint, OUT limits bigint, OUT read_at timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_all boolean;
BEGIN
    PERFORM pglease._check_int('limit_status', 'p_max', p_max, 1, 100000);
    v_all := EXISTS (SELECT FROM pg_catalog.pg_namespace AS n
                     WHERE n.nspname = 'pglease'
                       AND pg_catalog.pg_has_role(session_user, n.nspowner, 'MEMBER'))
             OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r
                        WHERE r.rolname = 'pglease_operator'
                          AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'));
    RETURN QUERY
    WITH mine AS (
        SELECT r.rolname::text AS role FROM pg_catalog.pg_roles AS r
        WHERE pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
    ), seen AS (
        SELECT l.target, l.exact, l.rate, l.per, l.burst, l.emission_us, o.owner_role
        FROM pglease.limits AS l
        CROSS JOIN LATERAL pglease._owner(l.target) AS o
        WHERE v_all OR o.owner_role IS NULL OR o.owner_role IN (SELECT m.role FROM mine AS m)
    ), shown AS (
        SELECT s.*, pg_catalog.count(*) OVER () AS n_seen FROM seen AS s
        ORDER BY s.target
        LIMIT p_max
    ), spent AS (
        -- Each bucket not full, or holding reservations expired by v_now
        -- whose amounts it has back (as the next take of it gives them).
        SELECT st.key, st.key_role, st.tat,
               CASE WHEN st.due <= v_now THEN
                   (SELECT coalesce(pg_catalog.sum(r.amount), 0) FROM pglease.limit_reservations AS r
                    WHERE r.key = st.key AND r.key_role = st.key_role AND r.expires_at <= v_now)
               ELSE 0 END AS back
        FROM pglease.limit_state AS st
        WHERE st.tat > v_now AND (v_all OR st.key_role IN (SELECT m.role FROM mine AS m))
    ), held AS (
        SELECT r.key, r.key_role, pg_catalog.sum(r.amount) AS amount
        FROM pglease.limit_reservations AS r
        WHERE r.expires_at > v_now AND (v_all OR r.key_role IN (SELECT m.role FROM mine AS m))
        GROUP BY r.key, r.key_role
    ), keyed AS (
        -- Each bucket not full or holding reservations, with its key's
        -- limit (pglease._limit_find).
        SELECT coalesce(s.key, h.key) AS key, s.tat, s.back, coalesce(h.amount, 0) AS amount, m.target
        FROM spent AS s
        FULL JOIN held AS h ON h.key = s.key AND h.key_role = s.key_role
        CROSS JOIN LATERAL pglease._limit_find(coalesce(s.key, h.key)) AS m
    ), levels AS (
        -- Each bucket's tat with what its expired reservations gave back.
        SELECT k.target, k.amount,
               CASE WHEN k.tat IS NOT NULL
                    THEN pglease._limit_refund(k.tat, k.back, sh.emission_us, v_now) END AS tat
        FROM keyed AS k
        JOIN shown AS sh ON sh.target = k.target
    ), per_target AS (
        SELECT k.target,
               pg_catalog.count(k.tat) FILTER (WHERE k.tat > v_now) AS buckets,
               pg_catalog.max(k.tat) FILTER (WHERE k.tat > v_now) AS max_tat,
               pg_catalog.count(*) FILTER (
                   WHERE pglease._limit_us(k.tat) - pglease._limit_us(v_now)
                         > sh.emission_us * (sh.burst - 1)) AS limited,
               pg_catalog.sum(k.amount) AS reserved
        FROM levels AS k
        JOIN shown AS sh ON sh.target = k.target
        GROUP BY k.target
    )
    SELECT sh.target, sh.exact, sh.rate, sh.per, sh.burst, sh.owner_role,
           coalesce(p.buckets, 0),
           coalesce(p.limited, 0),
           CASE WHEN p.max_tat IS NULL THEN sh.burst
                ELSE greatest((sh.emission_us * sh.burst
                               - (pglease._limit_us(p.max_tat) - pglease._limit_us(v_now))) / sh.emission_us,
                              0)::integer END,
           coalesce(p.reserved, 0)::bigint,
           sh.n_seen,
           v_now
    FROM shown AS sh
    LEFT JOIN per_target AS p ON p.target = sh.target
    ORDER BY sh.target;
END
$$;
