-- Quotas (0.3.0, docs/security.md#quotas): the schema owner caps how many
-- rows of each kind a role may have, so that no client role grows a table
-- without bound. A cap is checked when a call would create a row of its
-- kind, never on renewals, releases or calls on existing rows:
--   leases  lease rows the role created (by the first acquire of a name)
--           while capped, held, expired or free, until a purge deletes them
--   slots   slot rows the role created while capped (a scope's slot numbers)
--   scopes  slot scopes the role created while capped (by its first claim)
--   groups  shard groups the role created
--   queue   the role's live entries in slot queues (a lapsed entry no
--           longer counts)
--   runs    run ledger rows of the role's tenures
--   limits  rate-limit key states (pglease.take) and limits
--           (pglease.limit_set) the role created while capped (0.4.0)
-- A call that would go over its role's cap raises 53400 and changes
-- nothing. Checks of one role and kind take turns (the cap's row is locked
-- until the caller's transaction ends), so a cap is never exceeded, and
-- only that role waits for itself. Roles without a cap pay one index probe.
-- Rows record their creator (created_by) only while it is capped, so that
-- the partial indexes that count them cost uncapped roles nothing: leases,
-- slots and scopes a role created before its cap was set do not count.

-- _quota_kinds(): the kinds of rows a quota caps.
CREATE OR REPLACE FUNCTION pglease._quota_kinds()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT ARRAY['leases', 'slots', 'scopes', 'groups', 'queue', 'runs', 'limits']
$$;

-- _quota_used(p_role, p_kind, p_limit): how many rows of p_kind role p_role
-- has, counted up to p_limit (a count stops there).
CREATE OR REPLACE FUNCTION pglease._quota_used(p_role text, p_kind text, p_limit bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    CASE p_kind
    WHEN 'leases' THEN
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.leases AS l
                                      WHERE l.created_by = p_role LIMIT p_limit) AS r);
    WHEN 'slots' THEN
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.slots AS s
                                      WHERE s.created_by = p_role LIMIT p_limit) AS r);
    WHEN 'scopes' THEN
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.slot_scopes AS sc
                                      WHERE sc.created_by = p_role LIMIT p_limit) AS r);
    WHEN 'groups' THEN
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.groups AS g
                                      WHERE g.group_role = p_role LIMIT p_limit) AS r);
    WHEN 'queue' THEN
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.slot_queue AS q
                                      WHERE q.holder_role = p_role AND q.until > clock_timestamp()
                                      LIMIT p_limit) AS r);
    WHEN 'limits' THEN
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.limit_state AS s WHERE s.created_by = p_role
                                      UNION ALL
                                      SELECT 1 FROM pglease.limits AS l WHERE l.created_by = p_role
                                      LIMIT p_limit) AS r);
    ELSE -- 'runs'
        RETURN (SELECT count(*) FROM (SELECT 1 FROM pglease.runs AS u
                                      WHERE u.holder_role = p_role LIMIT p_limit) AS r);
    END CASE;
END
$$;

-- _check_quota(p_func, p_kind): before a call creates a row of p_kind for
-- the caller's role (session_user): returns false when the role has no cap
-- for p_kind, true when it stays within its cap with one more row (the
-- row then records its creator); raises 53400 naming the function (p_func;
-- NULL: none, for the claims' building blocks), the role, the kind and the
-- cap otherwise. Locks the cap's row until the caller's transaction ends
-- (see above).
CREATE OR REPLACE FUNCTION pglease._check_quota(p_func text, p_kind text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_max integer;
BEGIN
    SELECT q.max_rows INTO v_max FROM pglease.quotas AS q
    WHERE q.role_name = session_user AND q.kind = p_kind
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF pglease._quota_used(session_user, p_kind, v_max::bigint + 1) < v_max THEN
        RETURN true;
    END IF;
    RAISE EXCEPTION USING ERRCODE = '53400',
        MESSAGE = format('pglease%s: role %I has %s %s, its quota; this call would add one',
                         coalesce('.' || p_func, ''), session_user, v_max, p_kind),
        HINT = 'Rows go when pglease.purge deletes them (leases, slots and scopes free long enough, old runs, lapsed queue entries, idle groups); or ask the schema owner to raise the quota (pglease.quota_set).';
END
$$;

-- pglease.quota_set(p_role, p_kind, p_max): cap role p_role at p_max rows
-- of p_kind (see above); p_max NULL removes the cap. Rows the role has
-- already stay, also above a lowered cap: it then creates none until it is
-- below (leases, slots and scopes it created before any cap was set do
-- not count). Returns the previous cap (NULL: none). The schema owner's call:
-- granted to no role.
-- Raises 22004 for a NULL role or kind; 22023 for a kind not listed above
-- or a p_max not from 0 to 2,147,483,647; 42704 for a role that does not
-- exist; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.quota_set(p_role text, p_kind text, p_max integer,
                                             OUT previous_max integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('quota_set', 'p_role', p_role);
    PERFORM pglease._check_text('quota_set', 'p_kind', p_kind);
    IF p_kind <> ALL (pglease._quota_kinds()) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.quota_set: p_kind must be one of %s, got %L',
                             array_to_string(pglease._quota_kinds(), ', '), p_kind),
            HINT = 'Cap leases, slots, scopes, groups, queue, runs or limits.';
    END IF;
    IF p_max < 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.quota_set: p_max must be 0 or more, got %s', p_max),
            HINT = 'Pass the largest number of rows the role may have, or NULL for no cap.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION USING ERRCODE = '42704',
            MESSAGE = format('pglease.quota_set: role %I does not exist', p_role),
            HINT = 'Name the login role of the service to cap (session_user of its connections).';
    END IF;
    SELECT q.max_rows INTO previous_max FROM pglease.quotas AS q
    WHERE q.role_name = p_role AND q.kind = p_kind;
    IF p_max IS NULL THEN
        DELETE FROM pglease.quotas AS q WHERE q.role_name = p_role AND q.kind = p_kind;
    ELSE
        INSERT INTO pglease.quotas AS q (role_name, kind, max_rows)
        VALUES (p_role, p_kind, p_max)
        ON CONFLICT ON CONSTRAINT quotas_pkey DO UPDATE SET max_rows = excluded.max_rows;
    END IF;
END
$$;

-- pglease.quota_usage(): every cap with its use: role, kind, max_rows and
-- used (counted up to max_rows + 1). Read-only, for every client (as
-- public as the views). Ordered by role and kind.
CREATE OR REPLACE FUNCTION pglease.quota_usage(
    OUT role_name text, OUT kind text, OUT max_rows integer, OUT used bigint)
RETURNS SETOF record
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT q.role_name, q.kind, q.max_rows,
           pglease._quota_used(q.role_name, q.kind, q.max_rows::bigint + 1)
    FROM pglease.quotas AS q
    ORDER BY q.role_name, q.kind
$$;
