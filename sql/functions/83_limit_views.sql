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
-- (one pass over pglease.limit_state) and every unsettled reservation.
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
        SELECT st.key, st.key_role, st.tat FROM pglease.limit_state AS st
        WHERE st.tat > v_now AND (v_all OR st.key_role IN (SELECT m.role FROM mine AS m))
    ), held AS (
        SELECT r.key, r.key_role, pg_catalog.sum(r.amount) AS amount
        FROM pglease.limit_reservations AS r
        WHERE r.expires_at > v_now AND (v_all OR r.key_role IN (SELECT m.role FROM mine AS m))
        GROUP BY r.key, r.key_role
    ), keyed AS (
        -- Each bucket not full or holding reservations, with its key's
        -- limit: the longest matching target no shorter than the key's
        -- bound prefix, as pglease._limit_of finds it.
        SELECT coalesce(s.key, h.key) AS key, s.tat, coalesce(h.amount, 0) AS amount, m.target
        FROM spent AS s
        FULL JOIN held AS h ON h.key = s.key AND h.key_role = s.key_role
        CROSS JOIN LATERAL (
            SELECT l.target FROM pglease.limits AS l
            WHERE l.target = ANY (ARRAY(
                      SELECT pg_catalog.left(coalesce(s.key, h.key), i)
                      FROM pg_catalog.generate_series(
                          greatest(pg_catalog.char_length((pglease._owner(coalesce(s.key, h.key))).prefix), 1),
                          pg_catalog.char_length(coalesce(s.key, h.key))) AS i))
              AND (NOT l.exact OR l.target = coalesce(s.key, h.key))
            ORDER BY pg_catalog.octet_length(l.target) DESC
            LIMIT 1) AS m
    ), per_target AS (
        SELECT k.target,
               pg_catalog.count(k.tat) AS buckets,
               pg_catalog.max(k.tat) AS max_tat,
               pg_catalog.count(*) FILTER (
                   WHERE pglease._limit_us(k.tat) - pglease._limit_us(v_now)
                         > sh.emission_us * (sh.burst - 1)) AS limited,
               pg_catalog.sum(k.amount) AS reserved
        FROM keyed AS k
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
