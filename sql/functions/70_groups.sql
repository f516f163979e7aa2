-- Shard groups (0.3.0): N members share M shards evenly, each shard owned
-- once, moved gracefully. docs/groups.md explains the whole; each function
-- states its contract.
--
-- Leaderless and decided here, on the server's clock: every member calls
-- pglease.group_sync once per interval, which heartbeats it, renews its
-- shards, works out its fair share from the live members and takes or
-- offers shards accordingly, under the group's row lock so that the
-- members' decisions are taken one at a time on the same state.
--
-- A shard's ownership IS a lease: shard S of group G is the lease named
-- '{G}/S' (the braces are the proxy's routing tag: a group's leases live on
-- its partition). Its holder is the member, its role the caller's
-- (session_user), its fence grows at every move, and pglease.assert_held
-- fences a shard's writes unchanged. The group functions take, renew and
-- release those leases with pglease.acquire and pglease.release, or with
-- renew_holder's own statements for the bulk renewal.
--
-- A group belongs to the role that created it: only that role may sync,
-- release or leave in it (42501 for any other), so another role can neither
-- join, nor make a member hand shards over.
--
-- Limits: a group name is 1 to 100 bytes of [A-Za-z0-9._:-], starting with a
-- letter or digit; a shard name 1 to 128 bytes; a member name (the lease
-- holder) 1 to 256 bytes; 1 to pglease._group_max_shards() (100,000) shards;
-- a member's maximum 1 to 100,000 or NULL (none).

-- _group_max_shards(): the largest number of shards a group may have.
CREATE OR REPLACE FUNCTION pglease._group_max_shards()
RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 100000;
$$;

-- _group_lease(p_group, p_shard): the lease name of shard p_shard of group
-- p_group: '{p_group}/p_shard'.
CREATE OR REPLACE FUNCTION pglease._group_lease(p_group text, p_shard text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT '{' || p_group || '}/' || p_shard;
$$;

-- _check_group(p_func, p_group): raises 22004 for a NULL group name, 22023
-- for one outside the name rules (1 to 100 bytes of [A-Za-z0-9._:-],
-- starting with a letter or digit).
CREATE OR REPLACE FUNCTION pglease._check_group(p_func text, p_group text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
AS $$
BEGIN
    IF p_group IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: p_group must not be NULL', p_func),
            HINT = 'Pass the group name, e.g. ''outbox''.';
    END IF;
    IF octet_length(p_group) > 100 OR p_group !~ '^[A-Za-z0-9][A-Za-z0-9._:-]*$' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: p_group %L is not a group name', p_func, p_group),
            HINT = 'A group name is 1 to 100 bytes of letters, digits and . _ : -, starting with a letter or digit.';
    END IF;
END
$$;

-- _group_of(p_func, p_group): the shard count of group p_group, after
-- checking that it exists (PGL10 otherwise) and belongs to the caller's
-- role (42501 otherwise). p_lock locks the group row until the caller's
-- transaction ends, which serialises the group's decisions.
CREATE OR REPLACE FUNCTION pglease._group_of(p_func text, p_group text, p_lock boolean)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_role   text;
    v_shards integer;
BEGIN
    IF p_lock THEN
        SELECT g.group_role, g.shards INTO v_role, v_shards
        FROM pglease.groups AS g WHERE g.name = p_group
        FOR NO KEY UPDATE;
    ELSE
        SELECT g.group_role, g.shards INTO v_role, v_shards
        FROM pglease.groups AS g WHERE g.name = p_group;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL10',
            MESSAGE = format('pglease.%s: group %L does not exist', p_func, p_group),
            HINT = 'Create it first with pglease.group_create.';
    END IF;
    IF v_role <> session_user::text THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('pglease.%s: group %L belongs to role %L, not to %L',
                             p_func, p_group, v_role, session_user::text),
            HINT = 'Only the role that created a group may take part in it.';
    END IF;
    RETURN v_shards;
END
$$;

-- pglease.group_create(p_group, p_count, p_names): create group p_group
-- with its shards, owned by the caller's role (session_user).
--
-- Give exactly one of p_count (shards named '0' to p_count - 1) and p_names
-- (the shard names, in order). Returns created = true and the number of
-- shards when the group was created; created = false when it exists
-- already with exactly these shards and this role (idempotent: nothing
-- changes).
-- Raises 22004 for a NULL group, or when both p_count and p_names are NULL,
-- or for a NULL shard name; 22023 for a group name outside the name rules,
-- both p_count and p_names given, a count or a number of names not from 1
-- to 100,000, a shard name not 1 to 128 bytes, or a duplicate shard name;
-- PGL11 when the group exists with other shards; 42501 when it exists and
-- belongs to another role. Nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.group_create(
    p_group text, p_count integer, p_names text[],
    OUT created boolean, OUT shards integer)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_names text[];
    v_dup   text;
    v_bad   text;
    v_role  text;
    v_old   text[];
BEGIN
    PERFORM pglease._check_group('group_create', p_group);
    PERFORM pglease._check_owner('group_create', 'p_group', p_group);
    IF p_count IS NULL AND p_names IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.group_create: p_count and p_names must not both be NULL',
            HINT = 'Pass a shard count (shards 0 to count - 1) or a list of shard names.';
    END IF;
    IF p_count IS NOT NULL AND p_names IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'pglease.group_create: pass p_count or p_names, not both',
            HINT = 'Pass a shard count (shards 0 to count - 1) or a list of shard names.';
    END IF;
    IF p_count IS NOT NULL THEN
        PERFORM pglease._check_int('group_create', 'p_count', p_count, 1, pglease._group_max_shards());
        v_names := ARRAY(SELECT i::text FROM generate_series(0, p_count - 1) AS i);
    ELSE
        IF cardinality(p_names) NOT BETWEEN 1 AND pglease._group_max_shards() THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('pglease.group_create: p_names must hold 1 to %s names, got %s',
                                 pglease._group_max_shards(), cardinality(p_names)),
                HINT = 'Pass at least one shard name, and split a larger workload over several groups.';
        END IF;
        IF array_position(p_names, NULL) IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22004',
                MESSAGE = format('pglease.group_create: p_names must not hold NULL (position %s)',
                                 array_position(p_names, NULL)),
                HINT = 'Pass every shard name as text of 1 to 128 bytes.';
        END IF;
        SELECT n INTO v_bad FROM unnest(p_names) AS n WHERE octet_length(n) NOT BETWEEN 1 AND 128 LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('pglease.group_create: shard name %L must be 1 to 128 bytes long', v_bad),
                HINT = 'Pass every shard name as text of 1 to 128 bytes.';
        END IF;
        SELECT n INTO v_dup FROM unnest(p_names) AS n GROUP BY n HAVING count(*) > 1 ORDER BY n LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('pglease.group_create: shard name %L is given more than once', v_dup),
                HINT = 'Pass each shard name once.';
        END IF;
        v_names := p_names;
    END IF;

    IF NOT EXISTS (SELECT 1 FROM pglease.groups AS g WHERE g.name = p_group) THEN
        PERFORM pglease._check_quota('group_create', 'groups');
    END IF;
    INSERT INTO pglease.groups AS g (name, group_role, shards, created_at)
    VALUES (p_group, session_user::text, cardinality(v_names), clock_timestamp())
    ON CONFLICT ON CONSTRAINT groups_pkey DO NOTHING;
    IF FOUND THEN
        INSERT INTO pglease.group_shards AS s (group_name, shard, ord)
        SELECT p_group, n.name, n.ord::integer
        FROM unnest(v_names) WITH ORDINALITY AS n(name, ord);
        created := true;
        shards := cardinality(v_names);
        RETURN;
    END IF;
    -- It exists: the same shards and role are a retry, anything else a conflict.
    SELECT g.group_role INTO v_role FROM pglease.groups AS g WHERE g.name = p_group;
    IF v_role <> session_user::text THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('pglease.group_create: group %L belongs to role %L', p_group, v_role),
            HINT = 'Pick another group name.';
    END IF;
    v_old := ARRAY(SELECT s.shard FROM pglease.group_shards AS s
                   WHERE s.group_name = p_group ORDER BY s.ord);
    IF v_old IS DISTINCT FROM v_names THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL11',
            MESSAGE = format('pglease.group_create: group %L exists with other shards (%s of them)',
                             p_group, cardinality(v_old)),
            HINT = 'A group''s shards do not change: create a group under a new name for a new shard layout.';
    END IF;
    created := false;
    shards := cardinality(v_names);
END
$$;

-- pglease.group_sync(p_group, p_member, p_ttl, p_max_shards): one member's
-- call per interval: heartbeat, renew, take, offer. Role-bound: p_member
-- of the caller's role (session_user), in a group of that role.
--
-- In one call, on the server's clock:
--   1. renews every live shard lease p_member holds in the group to at
--      least now + p_ttl (as pglease.renew_holder does: waiting for a
--      fenced transaction in flight on a shard, never moving an end
--      earlier), before the group lock, so that such a wait delays only
--      this member;
--   2. locks the group row (the group's syncs are taken one at a time),
--      drops members whose heartbeat has lapsed, and records p_member as a
--      live member until now + p_ttl with maximum p_max_shards (NULL: no
--      maximum);
--   3. works out each live member's share: members are ordered by maximum
--      (none last), then name; a member whose maximum is at most the even
--      share of what is left gets exactly its maximum; the others share the
--      rest, floor or ceiling of it (share_min, share_max). So with no
--      maxima every member's share is floor(M/N) or ceil(M/N);
--   4. takes unowned shards (no live lease, none reserved; a free lease
--      row locked by a call in flight is skipped until the next sync) with
--      pglease.acquire, each a new tenure with the next fence: up to
--      share_min, and beyond it, up to share_max, only the unowned shards
--      no other member needs to reach its share_min;
--   5. offers shards (marks their leases as asked to release, as
--      pglease.request_release does): those above share_max, or, when no
--      shard is unowned and some member is below its share_min by more
--      than the shards already being handed over, those above share_min.
--      A shard stays the member's until it releases it
--      (pglease.group_release) after its workload has returned, or until
--      its tenure expires.
-- Returns: shards and fences, aligned: every live shard p_member holds in
-- the group after the call (renewed or just taken), in shard order;
-- release: those of them it has been asked to hand over (offered now or
-- before); members: the live members; share_min, share_max: p_member's
-- share; unowned: shards with no live owner after the call; expires_at =
-- the clock at the call's start + p_ttl, and expires_in = p_ttl: every
-- shard returned lasts at least until expires_at (a client may take the
-- time it sent the call + expires_in as every shard's deadline).
-- NOTIFYs channel 'pglease' with {"kind": "group", "event": "changed",
-- "name": <group>} when p_member joined (was not live) or offered shards,
-- so that the other members sync at once.
-- A shard missing from shards that p_member's workload still runs is lost:
-- stop it.
-- Raises 22004 for a NULL group, member or TTL, 22023 for a bad group name
-- or member, a TTL not in (0, 24 hours] or a maximum not from 1 to 100,000;
-- PGL10 for an unknown group; 42501 for a group of another role. Nothing
-- is changed then.
CREATE OR REPLACE FUNCTION pglease.group_sync(
    p_group text, p_member text, p_ttl interval, p_max_shards integer,
    OUT shards text[], OUT fences bigint[], OUT release text[],
    OUT members integer, OUT share_min integer, OUT share_max integer,
    OUT unowned integer, OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role     text := session_user::text;
    v_start    timestamptz := clock_timestamp();
    v_ttl      interval;
    v_now      timestamptz;
    v_prefix   text;
    v_m        integer;
    v_names    text[];
    v_caps     integer[];
    v_cnt      integer[];
    v_lo       integer[];
    v_hi       integer[];
    v_me       integer;
    v_n        integer;
    v_i        integer;
    v_rest     integer;
    v_k        integer;
    v_free     integer;
    v_pending  integer;
    v_deficit  integer;
    v_need     integer;
    v_take     integer;
    v_give     integer;
    v_taken    integer := 0;
    v_name     text;
    v_fence    bigint;
    v_ok       boolean;
    v_joined   boolean;
BEGIN
    PERFORM pglease._check_group('group_sync', p_group);
    PERFORM pglease._check_text('group_sync', 'p_member', p_member);
    v_ttl := pglease._check_ttl('group_sync', p_ttl);
    IF p_max_shards IS NOT NULL THEN
        PERFORM pglease._check_int('group_sync', 'p_max_shards', p_max_shards, 1,
                                   pglease._group_max_shards());
    END IF;
    v_m := pglease._group_of('group_sync', p_group, false);
    v_prefix := '{' || p_group || '}/';

    -- 1. Renew, before the group lock: a fenced transaction in flight on one
    -- of our shards delays only us. Rows nobody has locked first, in one
    -- statement; then each locked one, waiting for it (renew_holder's way).
    UPDATE pglease.leases AS l
    SET expires_at = greatest(l.expires_at, clock_timestamp() + v_ttl)
    WHERE l.name IN (SELECT l2.name FROM pglease.leases AS l2
                     WHERE l2.holder = p_member AND l2.holder_role = v_role
                       AND starts_with(l2.name, v_prefix)
                       AND l2.expires_at > clock_timestamp()
                     FOR NO KEY UPDATE SKIP LOCKED);
    FOR v_name, v_fence IN
        SELECT l.name, l.fence FROM pglease.leases AS l
        WHERE l.holder = p_member AND l.holder_role = v_role
          AND starts_with(l.name, v_prefix)
          AND l.expires_at > clock_timestamp() AND l.expires_at < v_start + v_ttl -- not renewed above
    LOOP
        PERFORM 1 FROM pglease.leases AS l
        WHERE l.name = v_name AND l.holder = p_member AND l.fence = v_fence
        FOR NO KEY UPDATE;
        UPDATE pglease.leases AS l
        SET expires_at = greatest(l.expires_at, clock_timestamp() + v_ttl)
        WHERE l.name = v_name AND l.holder = p_member AND l.fence = v_fence
          AND l.holder_role = v_role AND l.expires_at > clock_timestamp();
    END LOOP;

    -- 2. Membership, under the group lock.
    PERFORM pglease._group_of('group_sync', p_group, true);
    v_now := clock_timestamp();
    DELETE FROM pglease.group_members AS m
    WHERE m.group_name = p_group AND m.expires_at <= v_now;
    INSERT INTO pglease.group_members AS m (group_name, member, max_shards, joined_at, expires_at)
    VALUES (p_group, p_member, p_max_shards, v_now, v_now + v_ttl)
    ON CONFLICT ON CONSTRAINT group_members_pkey
    DO UPDATE SET max_shards = excluded.max_shards,
                  expires_at = greatest(m.expires_at, excluded.expires_at)
    RETURNING m.joined_at = v_now INTO v_joined;

    -- 3. Shares. Owners and counts on the clock read under the lock.
    -- Unowned: no live tenure, and not reserved for a preferred holder.
    SELECT count(*)::integer INTO v_free
    FROM pglease.group_shards AS s
    LEFT JOIN pglease.leases AS l ON l.name = v_prefix || s.shard
    WHERE s.group_name = p_group
      AND (l.name IS NULL OR pglease._free(l.holder, l.expires_at, l.release_to,
                                            l.release_to_role, l.release_for, NULL, NULL, v_now));
    -- Being handed over: live shards asked to release, or held by no live
    -- member (one that left, or another role's tenure, which frees only at
    -- its end).
    SELECT count(*)::integer INTO v_pending
    FROM pglease.group_shards AS s
    JOIN pglease.leases AS l
      ON l.name = v_prefix || s.shard AND s.shard = substr(l.name, length(v_prefix) + 1)
    LEFT JOIN pglease.group_members AS m
           ON m.group_name = p_group AND m.member = l.holder AND l.holder_role = v_role
    WHERE s.group_name = p_group AND l.holder IS NOT NULL AND l.expires_at > v_now
      AND (l.release_requested_at IS NOT NULL OR m.member IS NULL);

    SELECT array_agg(m.member ORDER BY m.max_shards NULLS LAST, m.member),
           array_agg(m.max_shards ORDER BY m.max_shards NULLS LAST, m.member),
           array_agg(coalesce(c.kept, 0) ORDER BY m.max_shards NULLS LAST, m.member)
    INTO v_names, v_caps, v_cnt
    FROM pglease.group_members AS m
    LEFT JOIN (SELECT l.holder, count(*)::integer AS kept
               FROM pglease.group_shards AS s
               JOIN pglease.leases AS l
      ON l.name = v_prefix || s.shard AND s.shard = substr(l.name, length(v_prefix) + 1)
               WHERE s.group_name = p_group AND l.holder IS NOT NULL AND l.expires_at > v_now
                 AND l.holder_role = v_role AND l.release_requested_at IS NULL
               GROUP BY l.holder) AS c ON c.holder = m.member
    WHERE m.group_name = p_group;
    v_n := cardinality(v_names);
    v_me := array_position(v_names, p_member);
    v_lo := array_fill(0, ARRAY[v_n]);
    v_hi := array_fill(0, ARRAY[v_n]);
    v_rest := v_m;
    v_k := v_n;
    v_i := 1;
    WHILE v_i <= v_n AND v_caps[v_i] IS NOT NULL AND v_caps[v_i]::bigint * v_k <= v_rest LOOP
        v_lo[v_i] := v_caps[v_i];
        v_hi[v_i] := v_caps[v_i];
        v_rest := v_rest - v_caps[v_i];
        v_k := v_k - 1;
        v_i := v_i + 1;
    END LOOP;
    WHILE v_i <= v_n LOOP
        v_lo[v_i] := v_rest / v_k;
        v_hi[v_i] := (v_rest + v_k - 1) / v_k;
        v_i := v_i + 1;
    END LOOP;
    v_deficit := 0;
    FOR v_i IN 1 .. v_n LOOP
        v_deficit := v_deficit + greatest(0, v_lo[v_i] - v_cnt[v_i]);
    END LOOP;

    -- 4. Take: up to share_min, and beyond it only what nobody else needs.
    v_need := greatest(0, v_lo[v_me] - v_cnt[v_me]);
    v_take := least(v_free, v_need + greatest(0, least(
        v_hi[v_me] - greatest(v_cnt[v_me], v_lo[v_me]),
        v_free - v_deficit)));
    -- A free lease row another member's renewal has locked (it renewed
    -- before waiting for the group lock, on an earlier clock) is skipped,
    -- not waited for: that wait would close a cycle with the group lock.
    -- Shards never taken yet have no row to lock.
    -- Shards with a free lease row first, then those never taken (no row),
    -- each in shard order.
    IF v_take > 0 THEN
        FOR v_name IN
            SELECT f.name FROM (
                SELECT l.name, s.ord
                FROM pglease.group_shards AS s
                JOIN pglease.leases AS l
                  ON l.name = v_prefix || s.shard AND s.shard = substr(l.name, length(v_prefix) + 1)
                WHERE s.group_name = p_group
                  AND pglease._free(l.holder, l.expires_at, l.release_to, l.release_to_role,
                                    l.release_for, p_member, v_role, v_now)
                ORDER BY s.ord
                FOR NO KEY UPDATE OF l SKIP LOCKED) AS f
            UNION ALL
            SELECT n.name FROM (
                SELECT v_prefix || s.shard AS name
                FROM pglease.group_shards AS s
                WHERE s.group_name = p_group
                  AND NOT EXISTS (SELECT 1 FROM pglease.leases AS l WHERE l.name = v_prefix || s.shard)
                ORDER BY s.ord) AS n
        LOOP
            EXIT WHEN v_taken >= v_take;
            SELECT a.acquired INTO v_ok FROM pglease.acquire(v_name, p_member, v_ttl) AS a;
            IF v_ok THEN
                v_taken := v_taken + 1;
            END IF;
        END LOOP;
    END IF;

    -- 5. Offer: above share_max, or above share_min while a member is
    -- short and neither unowned nor departing shards will cover it.
    v_give := 0;
    IF v_cnt[v_me] > v_hi[v_me] THEN
        v_give := v_cnt[v_me] - v_hi[v_me];
    ELSIF v_taken = 0 AND v_cnt[v_me] > v_lo[v_me] THEN
        v_give := least(v_cnt[v_me] - v_lo[v_me], v_deficit - v_free - v_pending);
    END IF;
    IF v_give > 0 THEN
        UPDATE pglease.leases AS l SET release_requested_at = v_now
        WHERE l.name IN (SELECT l2.name
                         FROM pglease.group_shards AS s
                         JOIN pglease.leases AS l2
      ON l2.name = v_prefix || s.shard AND s.shard = substr(l2.name, length(v_prefix) + 1)
                         WHERE s.group_name = p_group AND l2.holder = p_member
                           AND l2.holder_role = v_role AND l2.expires_at > v_now
                           AND l2.release_requested_at IS NULL
                         ORDER BY s.ord DESC
                         LIMIT v_give);
    END IF;
    IF v_joined OR v_give > 0 THEN
        PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
            'kind', 'group', 'event', 'changed', 'name', p_group)::text);
    END IF;

    SELECT coalesce(array_agg(s.shard ORDER BY s.ord), '{}'),
           coalesce(array_agg(l.fence ORDER BY s.ord), '{}'),
           coalesce(array_agg(s.shard ORDER BY s.ord)
                    FILTER (WHERE l.release_requested_at IS NOT NULL), '{}')
    INTO shards, fences, release
    FROM pglease.group_shards AS s
    JOIN pglease.leases AS l
      ON l.name = v_prefix || s.shard AND s.shard = substr(l.name, length(v_prefix) + 1)
    WHERE s.group_name = p_group AND l.holder = p_member AND l.holder_role = v_role
      AND l.expires_at > clock_timestamp();
    members := v_n;
    share_min := v_lo[v_me];
    share_max := v_hi[v_me];
    unowned := greatest(0, v_free - v_taken);
    expires_at := v_start + v_ttl;
    expires_in := v_ttl;
END
$$;

-- pglease.group_release(p_group, p_shard, p_member, p_fence): hand shard
-- p_shard over, after its workload has returned.
--
-- pglease.release of the shard's lease ('{p_group}/p_shard') by p_member
-- with fence p_fence: when that is p_member's live tenure (of the caller's
-- role), the shard is free at once, its fence kept (the next owner gets
-- fence + 1), and released = true; the group's members hear it by a NOTIFY
-- on channel 'pglease' ({"kind": "group", "event": "released", "name":
-- <group>}) at commit and sync at once, so the next owner starts then, not
-- at the expiry. Otherwise released = false and nothing changes.
-- Raises 22004 for a NULL argument, 22023 for a bad group name, shard
-- name, member or a negative fence, PGL10 for an unknown group, 42501 for a
-- group of another role; nothing is changed then.
CREATE OR REPLACE FUNCTION pglease.group_release(
    p_group text, p_shard text, p_member text, p_fence bigint,
    OUT released boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_group('group_release', p_group);
    IF p_shard IS NULL OR octet_length(p_shard) NOT BETWEEN 1 AND 128 THEN
        PERFORM pglease._check_text('group_release', 'p_shard', p_shard);
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.group_release: p_shard must be 1 to 128 bytes long, got %s bytes',
                             octet_length(p_shard)),
            HINT = 'Pass a shard name of the group.';
    END IF;
    PERFORM pglease._check_text('group_release', 'p_member', p_member);
    PERFORM pglease._check_fence('group_release', p_fence);
    PERFORM pglease._group_of('group_release', p_group, false);
    SELECT r.released INTO released
    FROM pglease.release(pglease._group_lease(p_group, p_shard), p_member, p_fence) AS r;
    IF released THEN
        PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
            'kind', 'group', 'event', 'released', 'name', p_group)::text);
    END IF;
END
$$;

-- pglease.group_leave(p_group, p_member): end p_member's membership now.
--
-- Removes p_member (of the caller's role) from the live members, so that
-- the others' shares count without it at once, and returns left = true
-- (false when it was not a member: nothing changes). Its shards stay its
-- tenures until it releases them (pglease.group_release, after each
-- workload returned) or they expire; meanwhile the others count them as
-- being handed over. NOTIFYs the group ({"kind": "group", "event":
-- "changed"}) when it left. Call it first when leaving gracefully, then
-- release each shard.
-- Raises 22004 for a NULL argument, 22023 for a bad group name or member,
-- PGL10 for an unknown group, 42501 for a group of another role; nothing
-- is changed then.
CREATE OR REPLACE FUNCTION pglease.group_leave(
    p_group text, p_member text,
    OUT left_group boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_group('group_leave', p_group);
    PERFORM pglease._check_text('group_leave', 'p_member', p_member);
    PERFORM pglease._group_of('group_leave', p_group, true);
    DELETE FROM pglease.group_members AS m
    WHERE m.group_name = p_group AND m.member = p_member;
    left_group := FOUND;
    IF left_group THEN
        PERFORM pg_catalog.pg_notify('pglease', pg_catalog.json_build_object(
            'kind', 'group', 'event', 'changed', 'name', p_group)::text);
    END IF;
END
$$;

-- pglease.group_delete(p_group): delete group p_group, its shard list and
-- its members' rows, once nobody takes part in it: no member is live and
-- no shard lease is held live. The shard leases stay, as shared names
-- (their fences go on; pglease.purge deletes them once free for long
-- enough). Only the group's role may delete it. Returns deleted = true.
-- Raises 22004 for a NULL group, 22023 for a bad group name, PGL10 for an
-- unknown group, 42501 for a group of another role, 55006 while a member
-- is live or a shard is held; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.group_delete(p_group text, OUT deleted boolean)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_now    timestamptz;
    v_prefix text := '{' || p_group || '}/';
BEGIN
    PERFORM pglease._check_group('group_delete', p_group);
    PERFORM pglease._group_of('group_delete', p_group, true);
    v_now := clock_timestamp();
    IF EXISTS (SELECT 1 FROM pglease.group_members AS m
               WHERE m.group_name = p_group AND m.expires_at > v_now)
       OR EXISTS (SELECT 1 FROM pglease.group_shards AS s
                  JOIN pglease.leases AS l ON l.name = v_prefix || s.shard
                  WHERE s.group_name = p_group AND l.holder IS NOT NULL AND l.expires_at > v_now) THEN
        RAISE EXCEPTION USING ERRCODE = '55006',
            MESSAGE = format('pglease.group_delete: group %L has live members or held shards', p_group),
            HINT = 'Stop its members first (they leave with pglease.group_leave and release their shards), then delete it.';
    END IF;
    DELETE FROM pglease.groups AS g WHERE g.name = p_group;
    deleted := true;
END
$$;

-- pglease.group_status(p_group): who owns what in group p_group, read-only.
--
-- One row per live member (member, its maximum, the shards it owns, of
-- which asked to hand over, and its heartbeat's end), then one row with
-- member NULL for the shards no live member owns (unowned: free, expired,
-- or held by a departed member or another role). Rows by member name,
-- the NULL row last. Any client role may read any group's status (no
-- holder string or fence is secret in it beyond lease_status's).
-- Raises 22004 for a NULL group, 22023 for a bad group name, PGL10 for an
-- unknown group.
CREATE OR REPLACE FUNCTION pglease.group_status(
    p_group text,
    OUT member text, OUT max_shards integer, OUT shards integer,
    OUT handing_over integer, OUT expires_at timestamptz)
RETURNS SETOF record
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_prefix text := '{' || p_group || '}/';
    v_now    timestamptz := clock_timestamp();
    v_role   text;
BEGIN
    PERFORM pglease._check_group('group_status', p_group);
    SELECT g.group_role INTO v_role FROM pglease.groups AS g WHERE g.name = p_group;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL10',
            MESSAGE = format('pglease.group_status: group %L does not exist', p_group),
            HINT = 'List the groups with SELECT names FROM pglease.group_list().';
    END IF;
    RETURN QUERY
    SELECT m.member, m.max_shards, coalesce(c.owned, 0), coalesce(c.asked, 0), m.expires_at
    FROM pglease.group_members AS m
    LEFT JOIN (SELECT l.holder,
                      count(*)::integer AS owned,
                      (count(*) FILTER (WHERE l.release_requested_at IS NOT NULL))::integer AS asked
               FROM pglease.group_shards AS s
               JOIN pglease.leases AS l
      ON l.name = v_prefix || s.shard AND s.shard = substr(l.name, length(v_prefix) + 1)
               WHERE s.group_name = p_group AND l.holder IS NOT NULL AND l.expires_at > v_now
                 AND l.holder_role = v_role
               GROUP BY l.holder) AS c ON c.holder = m.member
    WHERE m.group_name = p_group AND m.expires_at > v_now
    ORDER BY m.member;
    RETURN QUERY
    SELECT NULL::text, NULL::integer, count(*)::integer, 0, NULL::timestamptz
    FROM pglease.group_shards AS s
    LEFT JOIN pglease.leases AS l ON l.name = v_prefix || s.shard
    LEFT JOIN pglease.group_members AS m
           ON m.group_name = p_group AND m.member = l.holder AND m.expires_at > v_now
    WHERE s.group_name = p_group
      AND (l.name IS NULL OR l.holder IS NULL OR l.expires_at <= v_now
           OR l.holder_role IS DISTINCT FROM v_role OR m.member IS NULL);
END
$$;

-- pglease.group_list(): every group, read-only, in one row of arrays
-- aligned by index, by name: names, their roles (group_roles), their
-- numbers of shards and of live members. Empty arrays when there is no
-- group.
CREATE OR REPLACE FUNCTION pglease.group_list(
    OUT names text[], OUT group_roles text[], OUT shards integer[], OUT members integer[])
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT coalesce(array_agg(g.name ORDER BY g.name), '{}'),
           coalesce(array_agg(g.group_role ORDER BY g.name), '{}'),
           coalesce(array_agg(g.shards ORDER BY g.name), '{}'),
           coalesce(array_agg((SELECT count(*)::integer FROM pglease.group_members AS m
                               WHERE m.group_name = g.name AND m.expires_at > clock_timestamp())
                              ORDER BY g.name), '{}')
    FROM pglease.groups AS g;
$$;
