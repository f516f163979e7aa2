-- Names a role owns (0.3.0, docs/security.md#names-a-role-owns). The schema
-- owner binds a name prefix to a role (pglease.prefix_bind); from then on
-- only members of that role take a lease, claim a slot scope or create a
-- group whose name starts with it. Names under no bound prefix are shared.
-- The longest bound prefix of a name decides. The names
-- of a group's shard leases ('{group}/...') belong to the group's role
-- itself: only that role (not its members) takes them, as only it syncs.

-- _owner(p_name): who owns p_name: for a name '{g}/...' of an existing
-- group g, the group's role (prefix NULL); else the role of p_name's longest bound
-- prefix, and that prefix; both NULL for a shared name. PL/pgSQL, so that
-- its two reads are planned once per session: pglease.prefixes holds a few
-- rows (one per service, say), and names starting with '{' cost one more
-- read, of pglease.groups by its key.
CREATE OR REPLACE FUNCTION pglease._owner(p_name text, OUT owner_role text, OUT prefix text)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF pg_catalog.starts_with(p_name, '{') AND pg_catalog.strpos(p_name, '}/') > 2 THEN
        SELECT g.group_role INTO owner_role FROM pglease.groups AS g
        WHERE g.name = pg_catalog.substr(p_name, 2, pg_catalog.strpos(p_name, '}/') - 2);
        IF FOUND THEN
            RETURN;
        END IF;
    END IF;
    SELECT p.owner_role, p.prefix INTO owner_role, prefix FROM pglease.prefixes AS p
    WHERE pg_catalog.starts_with(p_name, p.prefix)
    ORDER BY pg_catalog.octet_length(p.prefix) DESC
    LIMIT 1;
END
$$;

-- _owner_allows(p_owner, p_prefix): whether the caller (session_user) may
-- take a name that _owner finds owned by p_owner through bound prefix
-- p_prefix: a shared name (p_owner NULL) is everyone's; a group's shard
-- (p_prefix NULL) only the group's role's; a name under a bound prefix the
-- members' of its role. A prefix bound to a role that no longer exists is
-- nobody's: false. The one rule of _may_take, _check_owner and the limits'
-- key check (_limit_key), for a name whose owner is read once; inlinable.
CREATE OR REPLACE FUNCTION pglease._owner_allows(p_owner text, p_prefix text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_owner IS NULL THEN true
        WHEN p_prefix IS NULL THEN p_owner = session_user
        ELSE coalesce(pg_catalog.pg_has_role(session_user,
                          pg_catalog.to_regrole(pg_catalog.quote_ident(p_owner)), 'MEMBER'), false)
    END
$$;

-- _may_take(p_name): whether the caller (session_user) may take p_name
-- (_owner_allows of its owner).
CREATE OR REPLACE FUNCTION pglease._may_take(p_name text)
RETURNS boolean
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN (SELECT pglease._owner_allows(o.owner_role, o.prefix) FROM pglease._owner(p_name) AS o);
END
$$;

-- _owner_refuse(p_func, p_arg, p_name, p_owner, p_prefix): raises 42501
-- for name p_name (argument p_arg of pglease.p_func), owned by p_owner
-- through bound prefix p_prefix (NULL: a group's shard), naming the
-- prefix or the group and the role. Called once _owner_allows said no.
CREATE OR REPLACE FUNCTION pglease._owner_refuse(p_func text, p_arg text, p_name text,
    p_owner text, p_prefix text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_prefix IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('pglease.%s: %s %L is a shard of a group of role %I; role %I is not a member of it',
                             p_func, p_arg, p_name, p_owner, session_user),
            HINT = 'A group''s shards are taken by its own role, through pglease.group_sync.';
    END IF;
    RAISE EXCEPTION USING ERRCODE = '42501',
        MESSAGE = format('pglease.%s: %s %L is under prefix %L, which belongs to role %I; role %I is not a member of it',
                         p_func, p_arg, p_name, p_prefix, p_owner, session_user),
        HINT = format('Use a name outside %L, or GRANT %I TO %I.', p_prefix, p_owner, session_user);
END
$$;

-- _schema_owner(): whether the caller (session_user) is the schema owner,
-- a member of its role, or a superuser.
CREATE OR REPLACE FUNCTION pglease._schema_owner()
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pg_catalog.pg_has_role(session_user, n.nspowner, 'MEMBER')
    FROM pg_catalog.pg_namespace AS n
    WHERE n.nspname = 'pglease';
$$;

-- _prefix_admin(p_target): whether the caller may configure what applies to
-- the names under p_target (their limits, their history): the schema owner
-- (pglease._schema_owner), or a member of the role that owns p_target (see
-- pglease._owner: its bound prefix is p_target or a shorter one, or it is
-- a group's). Shared names are the schema owner's alone; pglease_operator
-- is not enough.
CREATE OR REPLACE FUNCTION pglease._prefix_admin(p_target text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT pglease._schema_owner()
        OR (o.owner_role IS NOT NULL AND pglease._owner_allows(o.owner_role, o.prefix))
    FROM pglease._owner(p_target) AS o;
$$;

-- _check_owner(p_func, p_arg, p_name): raises 42501 when p_name belongs to
-- a role the caller is not a member of (see pglease._owner), naming the
-- prefix or the group and the role (_owner_refuse); returns otherwise.
-- Reads p_name's owner once.
CREATE OR REPLACE FUNCTION pglease._check_owner(p_func text, p_arg text, p_name text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_owner  text;
    v_prefix text;
BEGIN
    SELECT o.owner_role, o.prefix INTO v_owner, v_prefix FROM pglease._owner(p_name) AS o;
    IF NOT pglease._owner_allows(v_owner, v_prefix) THEN
        PERFORM pglease._owner_refuse(p_func, p_arg, p_name, v_owner, v_prefix);
    END IF;
END
$$;

-- pglease.prefix_bind(p_prefix, p_role): bind the name prefix p_prefix to
-- role p_role: from now on only members of p_role take a lease, claim a
-- slot scope or create a group whose name starts with p_prefix (42501 for
-- anyone else, nothing changed), unless a longer bound prefix of the name
-- says otherwise. Tenures live now keep running until they end (renewals
-- and releases work; a re-acquire is refused like any acquire under the
-- prefix; end another role's with pglease.force_release). A group created
-- under the prefix belongs to the member role that created it. Binding a
-- bound prefix again moves it to p_role. Returns the role the prefix was
-- bound to before (NULL: none).
-- The schema owner's call: granted to no role.
-- Raises 22004 for NULL arguments, 22023 for a prefix or role name not 1
-- to 256 bytes, 42704 for a role that does not exist; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.prefix_bind(p_prefix text, p_role text, OUT previous_role text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('prefix_bind', 'p_prefix', p_prefix);
    PERFORM pglease._check_text('prefix_bind', 'p_role', p_role);
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.rolname = p_role) THEN
        RAISE EXCEPTION USING ERRCODE = '42704',
            MESSAGE = format('pglease.prefix_bind: role %I does not exist', p_role),
            HINT = 'Name an existing role (the service''s login role, or a group role its logins are members of).';
    END IF;
    SELECT p.owner_role INTO previous_role FROM pglease.prefixes AS p WHERE p.prefix = p_prefix;
    INSERT INTO pglease.prefixes AS p (prefix, owner_role, bound_at)
    VALUES (p_prefix, p_role, clock_timestamp())
    ON CONFLICT ON CONSTRAINT prefixes_pkey
    DO UPDATE SET owner_role = excluded.owner_role, bound_at = excluded.bound_at;
END
$$;

-- pglease.prefix_unbind(p_prefix): make the names under p_prefix shared
-- again (as far as no other bound prefix covers them). Returns the role it
-- was bound to, NULL when it was not bound (nothing changes). The schema
-- owner's call. Raises 22004 for NULL, 22023 for a prefix not 1 to 256
-- bytes.
CREATE OR REPLACE FUNCTION pglease.prefix_unbind(p_prefix text, OUT previous_role text)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('prefix_unbind', 'p_prefix', p_prefix);
    DELETE FROM pglease.prefixes AS p WHERE p.prefix = p_prefix
    RETURNING p.owner_role INTO previous_role;
END
$$;

-- pglease.owner_of(p_name): the role that owns name p_name (a lease name or
-- a slot scope): the group's role for a group's shard lease, else the role
-- its longest bound prefix is bound to; NULL for a shared name. Read-only,
-- for every client (lease_status shows it too). Raises 22004 for NULL,
-- 22023 for a name not 1 to 256 bytes.
CREATE OR REPLACE FUNCTION pglease.owner_of(p_name text)
RETURNS text
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('owner_of', 'p_name', p_name);
    RETURN (pglease._owner(p_name)).owner_role;
END
$$;
