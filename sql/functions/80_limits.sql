-- Rate limits (0.4.0, #51, docs/limits.md): GCRA on the server's clock,
-- inside the caller's transaction.
--
-- A limit is configured for a target (pglease.limit_set): a key, or every
-- key that starts with the target; a key's limit is its longest matching
-- target (tiers: 'tenant/gold/' 1000 per minute beside 'tenant/' 100 per
-- minute). Callers name the key, never the numbers. A limit of rate tokens
-- per interval per and burst B spends one token every emission = per /
-- rate (rounded up to a whole microsecond, so the rate is never exceeded)
-- and holds at most B at once. A key's state is one row of
-- pglease.limit_state, its theoretical arrival time tat: a take of n
-- tokens at now is allowed iff
--     max(tat, now) + n * emission <= now + B * emission,
-- and then sets tat to the left side. So over any span of length d the
-- allowed takes of a key spend at most B + d / emission tokens, whatever
-- their concurrency (takes of a key serialise on its row).
--
-- Who: a key under a prefix bound to a role (pglease.prefix_bind) is that
-- role's: only its members take, peek or reset it (42501 for anyone else,
-- before any lock), and its members share one bucket. A key under no bound
-- prefix is a shared name, as for leases: each role taking it has a bucket
-- of its own (the row's key_role), which no other role can reach. Limits
-- are set, unset and reset by the schema owner (and superusers) on any
-- target, and by members of the role a target's bound prefix belongs to on
-- targets under it; a key's limit is looked up only among targets inside
-- the key's own bound prefix, so no role can configure another role's keys.
--
-- Clock: every decision reads clock_timestamp() once, after the row lock;
-- all arithmetic is in whole microseconds (bigint), exact.

-- _limit_us(p_at): p_at in microseconds since 1970-01-01 UTC (exact: the
-- epoch is numeric from PostgreSQL 14 on; on 13 a double, exact once
-- rounded for any time of this millennium).
CREATE OR REPLACE FUNCTION pglease._limit_us(p_at timestamptz)
RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT pg_catalog.round(EXTRACT(epoch FROM p_at) * 1000000)::bigint
$$;

-- _limit_role(p_owner): whose bucket a key owned by p_owner (_owner:
-- its bound prefix's role, or its group's) is for the caller: p_owner's,
-- else, for a shared key, the caller's own (session_user). Inlinable.
CREATE OR REPLACE FUNCTION pglease._limit_role(p_owner text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce(p_owner, session_user::text)
$$;

-- _limit_key_role(p_key): whose bucket p_key is for the caller
-- (_limit_role of its owner).
CREATE OR REPLACE FUNCTION pglease._limit_key_role(p_key text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT pglease._limit_role((pglease._owner(p_key)).owner_role)
$$;

-- _limit_match(p_key, p_prefix): the limit of p_key, whose bound prefix
-- is p_prefix (NULL: none): its longest matching target (an exact target
-- only when it is p_key) no shorter than p_prefix; target, emission_us and
-- burst, no row when there is none. Reads pglease.limits without a lock,
-- by primary key: one probe per prefix of p_key (at most 256), whatever
-- the number of limits. Inlinable: the one rule of a key's limit. The
-- prefixes' lengths are bounded by constants (a key has at most 256
-- characters), so that a plan cached with parameters costs no more than
-- one planned for the values and is kept: no planning per call.
CREATE OR REPLACE FUNCTION pglease._limit_match(p_key text, p_prefix text)
RETURNS TABLE (target text, emission_us bigint, burst integer)
LANGUAGE sql STABLE
AS $$
    SELECT l.target, l.emission_us, l.burst
    FROM pglease.limits AS l
    WHERE l.target = ANY (ARRAY(SELECT pg_catalog.left(p_key, i)
                                FROM pg_catalog.generate_series(1, 256) AS i
                                WHERE i >= greatest(pg_catalog.char_length(p_prefix), 1)
                                  AND i <= pg_catalog.char_length(p_key)))
      AND (NOT l.exact OR l.target = p_key)
    ORDER BY pg_catalog.octet_length(l.target) DESC
    LIMIT 1
$$;

-- _limit_find(p_key): the limit of p_key as _limit_match finds it within
-- p_key's bound prefix; target, emission_us and burst, all NULL when
-- there is none.
CREATE OR REPLACE FUNCTION pglease._limit_find(p_key text,
    OUT target text, OUT emission_us bigint, OUT burst integer)
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT m.target, m.emission_us, m.burst INTO target, emission_us, burst
    FROM pglease._limit_match(p_key, (pglease._owner(p_key)).prefix) AS m;
END
$$;

-- _limit_key(p_func, p_arg, p_key, p_cost_arg, p_cost): key p_key
-- (argument p_arg of pglease.p_func) as the caller reaches it, its owner
-- read once (_owner): key_role, the role of the caller's bucket
-- (_limit_role), and the key's limit (_limit_match): emission_us and
-- burst. Checks, in this order: p_key (22004, 22023: _check_text); p_cost
-- (argument p_cost_arg) when p_cost_arg is not NULL (22004; 22023 for less
-- than 1); that the caller may take p_key (42501: _owner_allows,
-- _owner_refuse); that it has a limit (PGL20, naming p_func and p_key);
-- and that p_cost is at most its burst (PGL21: it could never be
-- allowed). Locks nothing. The one check of a key of every limits call
-- (take, peek, claim_and_take, reserve, reserve_all, settle).
CREATE OR REPLACE FUNCTION pglease._limit_key(p_func text, p_arg text, p_key text,
    p_cost_arg text, p_cost integer,
    OUT key_role text, OUT emission_us bigint, OUT burst integer)
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_owner  text;
    v_prefix text;
BEGIN
    PERFORM pglease._check_text(p_func, p_arg, p_key);
    IF p_cost_arg IS NOT NULL THEN
        PERFORM pglease._check_int(p_func, p_cost_arg, p_cost, 1, 2147483647);
    END IF;
    SELECT o.owner_role, o.prefix INTO v_owner, v_prefix FROM pglease._owner(p_key) AS o;
    IF NOT pglease._owner_allows(v_owner, v_prefix) THEN
        PERFORM pglease._owner_refuse(p_func, p_arg, p_key, v_owner, v_prefix);
    END IF;
    key_role := pglease._limit_role(v_owner);
    SELECT m.emission_us, m.burst INTO emission_us, burst FROM pglease._limit_match(p_key, v_prefix) AS m;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL20',
            MESSAGE = format('pglease.%s: no rate limit is set for key %L', p_func, p_key),
            HINT = 'Set one for the key or a prefix of it: pglease.limit_set (the schema owner, or the role owning the key''s prefix).';
    END IF;
    IF p_cost > burst THEN
        RAISE EXCEPTION USING ERRCODE = 'PGL21',
            MESSAGE = format('pglease.%s: %s %s is more than the burst %s of key %L: it could never be allowed',
                             p_func, p_cost_arg, p_cost, burst, p_key),
            HINT = 'Take at most the burst at once, or ask for a larger burst (pglease.limit_set).';
    END IF;
END
$$;

-- _limit_admin(p_func, p_arg, p_target): returns when the caller may set,
-- unset or reset limits of p_target (pglease._prefix_admin). Raises 42501
-- otherwise, naming p_func, p_target and the role.
CREATE OR REPLACE FUNCTION pglease._limit_admin(p_func text, p_arg text, p_target text)
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_owner text;
BEGIN
    IF pglease._prefix_admin(p_target) THEN
        RETURN;
    END IF;
    v_owner := (pglease._owner(p_target)).owner_role;
    RAISE EXCEPTION USING ERRCODE = '42501',
        MESSAGE = CASE WHEN v_owner IS NULL
            THEN format('pglease.%s: %s %L is a shared name; only the schema owner sets or resets its limits, not role %I',
                        p_func, p_arg, p_target, session_user)
            ELSE format('pglease.%s: %s %L belongs to role %I; role %I is not a member of it',
                        p_func, p_arg, p_target, v_owner, session_user) END,
        HINT = 'Limits are set by the schema owner, or by the role a prefix is bound to (pglease.prefix_bind) for names under it.';
END
$$;

-- _limit_refund(p_tat, p_tokens, p_emit, p_now): a bucket's theoretical
-- arrival time p_tat after p_tokens tokens of emission p_emit microseconds
-- go back to it at p_now: p_tat - p_tokens * p_emit, never before p_now
-- (a bucket holds at most its burst); p_tat itself when p_tokens is 0. Exact to the microsecond, for any
-- p_tokens (no overflow). The one rule of a refund (settle, expiry).
CREATE OR REPLACE FUNCTION pglease._limit_refund(p_tat timestamptz, p_tokens bigint, p_emit bigint,
    p_now timestamptz)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT CASE
        WHEN p_tokens <= 0 THEN p_tat
        WHEN p_tat <= p_now THEN p_now
        ELSE p_now + greatest((pglease._limit_us(p_tat) - pglease._limit_us(p_now))
                              - least(p_tokens, (pglease._limit_us(p_tat) - pglease._limit_us(p_now)) / p_emit + 1)
                                * p_emit, 0) * interval '1 microsecond'
    END
$$;

-- _limit_expire(p_key, p_role, p_tat, p_now, p_emit): gives back the
-- reservations of bucket (p_key, p_role) expired by p_now: deletes their
-- rows and returns their amounts to the bucket at p_now (_limit_refund at
-- emission p_emit, the key's limit as it stands; p_emit NULL, a key with
-- no limit: nothing to give back to), and sets the bucket's due to its
-- next reservation's expiry (NULL: none). p_tat is the bucket's tat; tat
-- is the bucket's after the call, gone how many rows it deleted. The
-- caller holds the bucket's row lock (so a reservation comes back once:
-- a settle or another expiry of it waits for the lock, then finds its rows
-- gone) and reads p_now after taking it.
CREATE OR REPLACE FUNCTION pglease._limit_expire(p_key text, p_role text, p_tat timestamptz,
    p_now timestamptz, p_emit bigint, OUT tat timestamptz, OUT gone bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_back bigint;
BEGIN
    WITH expired AS (
        DELETE FROM pglease.limit_reservations AS r
        WHERE r.key = p_key AND r.key_role = p_role AND r.expires_at <= p_now
        RETURNING r.amount
    )
    SELECT coalesce(sum(e.amount), 0), count(*) INTO v_back, gone FROM expired AS e;
    tat := CASE WHEN p_emit IS NULL THEN p_tat ELSE pglease._limit_refund(p_tat, v_back, p_emit, p_now) END;
    UPDATE pglease.limit_state AS s
    SET tat = _limit_expire.tat,
        due = (SELECT min(r.expires_at) FROM pglease.limit_reservations AS r
               WHERE r.key = p_key AND r.key_role = p_role)
    WHERE s.key = p_key AND s.key_role = p_role;
END
$$;

-- _limit_take(p_func, p_key, p_cost): the decision of pglease.take, for
-- the functions that take (p_func names the caller in errors). Checks its
-- arguments first (_limit_key: 22004, 22023, 42501, PGL20, PGL21: see
-- pglease.take);
-- then, in a subtransaction, locks the key's row FOR NO KEY UPDATE
-- (creating it, under the 'limits' quota, when missing: 53400 at the cap),
-- reads the clock, gives back the bucket's reservations expired by then
-- (_limit_expire, when the row's due has come) and decides. An allowed
-- take writes the row, which stays locked until the caller's transaction
-- ends; a refused one rolls the subtransaction back with the lock and
-- writes nothing (an expiry it gave back is given back by the next call).
CREATE OR REPLACE FUNCTION pglease._limit_take(p_func text, p_key text, p_cost integer,
    OUT allowed boolean, OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_role   text;
    v_emit   bigint;
    v_tat    timestamptz;
    v_due    timestamptz;
    v_now_us bigint;
    v_base   bigint;
    v_new    bigint;
    v_tol    bigint;
BEGIN
    SELECT k.key_role, k.emission_us, k.burst INTO v_role, v_emit, burst
    FROM pglease._limit_key(p_func, 'p_key', p_key, 'p_cost', p_cost) AS k;
    v_tol := v_emit * burst;
    BEGIN
        SELECT s.tat, s.due INTO v_tat, v_due FROM pglease.limit_state AS s
        WHERE s.key = p_key AND s.key_role = v_role
        FOR NO KEY UPDATE;
        IF NOT FOUND THEN
            -- A new bucket, full: its first take is always allowed (p_cost
            -- is at most the burst), so a refusal never creates a row.
            INSERT INTO pglease.limit_state AS s (key, key_role, tat, created_by)
            VALUES (p_key, v_role, clock_timestamp(),
                    CASE WHEN pglease._check_quota(p_func, 'limits') THEN session_user END)
            ON CONFLICT ON CONSTRAINT limit_state_pkey DO NOTHING;
            SELECT s.tat, s.due INTO v_tat, v_due FROM pglease.limit_state AS s
            WHERE s.key = p_key AND s.key_role = v_role
            FOR NO KEY UPDATE;
        END IF;
        decided_at := clock_timestamp();
        IF v_due <= decided_at THEN
            SELECT e.tat INTO v_tat FROM pglease._limit_expire(p_key, v_role, v_tat, decided_at, v_emit) AS e;
        END IF;
        v_now_us := pglease._limit_us(decided_at);
        v_base := greatest(pglease._limit_us(v_tat), v_now_us);
        v_new := v_base + v_emit * p_cost;
        allowed := v_new - v_now_us <= v_tol;
        IF allowed THEN
            remaining := ((v_tol - (v_new - v_now_us)) / v_emit)::integer;
            reset_in := (v_new - v_now_us) * interval '1 microsecond';
            UPDATE pglease.limit_state AS s SET tat = decided_at + reset_in
            WHERE s.key = p_key AND s.key_role = v_role;
        ELSE
            remaining := greatest((v_tol - (v_base - v_now_us)) / v_emit, 0)::integer;
            reset_in := (v_base - v_now_us) * interval '1 microsecond';
            retry_in := (v_new - v_tol - v_now_us) * interval '1 microsecond';
            RAISE EXCEPTION USING ERRCODE = 'PGL02', MESSAGE = 'pglease: refused';
        END IF;
    EXCEPTION WHEN SQLSTATE 'PGL02' THEN
        NULL; -- refused: the row lock goes with the subtransaction
    END;
END
$$;

-- _limit_keys(p_func, p_keys_arg, p_keys, p_costs_arg, p_costs): returns
-- when p_keys (argument p_keys_arg of pglease.p_func) and their costs
-- p_costs (argument p_costs_arg; NULL: 1 each) can be taken together:
-- 1 to 64 keys in one dimension, none twice, one cost per key; each key
-- and cost as pglease.take checks them. Raises 22004 for NULL (the array,
-- a key or a cost); 22023 for the count, a duplicate, the costs' length,
-- a key not 1 to 256 bytes or a cost less than 1; 42501 for a key under a
-- prefix bound to a role the caller is not a member of; PGL20 for a key
-- with no limit; PGL21 for a cost more than its key's burst. Locks
-- nothing. The one check of multi-key calls (claim_and_take, reserve_all).
CREATE OR REPLACE FUNCTION pglease._limit_keys(p_func text, p_keys_arg text, p_keys text[],
    p_costs_arg text, p_costs integer[])
RETURNS void
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_n    integer := coalesce(cardinality(p_keys), 0);
    v_key  text;
    v_cost integer;
BEGIN
    IF p_keys IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = format('pglease.%s: %s must not be NULL', p_func, p_keys_arg),
            HINT = 'Pass the rate-limited keys, 1 to 64 of them.';
    END IF;
    IF v_n NOT BETWEEN 1 AND 64 OR array_ndims(p_keys) <> 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must hold 1 to 64 keys, got %s', p_func, p_keys_arg, v_n),
            HINT = 'Pass 1 to 64 keys in a one-dimensional array; split larger sets over several calls.';
    END IF;
    IF p_costs IS NOT NULL AND (cardinality(p_costs) <> v_n OR array_ndims(p_costs) <> 1) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must hold one cost per key (%s), got %s',
                             p_func, p_costs_arg, v_n, cardinality(p_costs)),
            HINT = 'Pass one cost per key, in the order of the keys, or NULL for 1 each.';
    END IF;
    IF (SELECT count(DISTINCT k) FROM unnest(p_keys) AS k) <> v_n
       AND NOT EXISTS (SELECT FROM unnest(p_keys) AS k WHERE k IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.%s: %s must not name a key twice', p_func, p_keys_arg),
            HINT = 'Name each key once, with the sum of its costs.';
    END IF;
    FOR i IN 1 .. v_n LOOP
        v_cost := coalesce(p_costs[array_lower(p_costs, 1) + i - 1], CASE WHEN p_costs IS NULL THEN 1 END);
        v_key := p_keys[array_lower(p_keys, 1) + i - 1];
        PERFORM pglease._limit_key(p_func, p_keys_arg, v_key, p_costs_arg, v_cost);
    END LOOP;
END
$$;

-- _limit_order(p_keys, p_costs): p_keys with their costs (p_costs NULL: 1
-- each) in the one order every multi-key call locks keys in: narrowest
-- first (the longest key first, ties in byte order), so that two such
-- calls never deadlock on each other's keys. Checked by _limit_keys first.
CREATE OR REPLACE FUNCTION pglease._limit_order(p_keys text[], p_costs integer[],
    OUT key text, OUT cost integer)
RETURNS SETOF record
LANGUAGE sql IMMUTABLE
AS $$
    SELECT k.key, coalesce(k.cost, 1)
    FROM unnest(p_keys, coalesce(p_costs, array_fill(1, ARRAY[cardinality(p_keys)]))) AS k(key, cost)
    ORDER BY pg_catalog.octet_length(k.key) DESC, k.key COLLATE "C"
$$;

-- pglease.take(p_key, p_cost): spend p_cost tokens (default 1) of key
-- p_key's rate limit, or say when they will be there. One row:
--   * allowed = true: the tokens are spent (the key's row is written; the
--     spend commits or rolls back with the caller's transaction);
--     remaining = whole tokens left after it, retry_in NULL, reset_in = how
--     long until the bucket is full again;
--   * allowed = false: nothing is spent or written; remaining = whole
--     tokens there now (fewer than p_cost), retry_in = how long until
--     p_cost are (> 0; a take of p_cost at decided_at + retry_in is allowed
--     unless others spend first), reset_in as above.
--   burst = the key's burst; decided_at = the server clock reading the
--   call decided on.
-- Exact to the microsecond on the server's clock: decided_at + reset_in is
-- the key's new theoretical arrival time. A key with no row yet is full;
-- the first take creates its row (counted in the caller's 'limits' quota).
-- Reservations of the bucket (pglease.reserve) that expired by decided_at
-- have their amounts back in it before it decides.
-- Locks: the key's row FOR NO KEY UPDATE: an allowed take holds it until
-- the caller's transaction ends (takes of the same bucket wait for it, as
-- claims of a scope do: take in short transactions); a refused take gives
-- it back before it returns. Other keys and other roles' buckets are never
-- locked. Under REPEATABLE READ or SERIALIZABLE a take that races another
-- take of the same bucket raises 40001, spending nothing: retry.
-- Raises 22004 for NULL; 22023 for a key not 1 to 256 bytes or a cost
-- less than 1; 42501 for a key under a prefix bound to a role the caller
-- is not a member of; PGL20 when no limit is set for the key; PGL21 for a
-- cost more than the key's burst; 53400 when a new row would take the
-- caller's role over its 'limits' quota; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.take(p_key text, p_cost integer DEFAULT 1,
    OUT allowed boolean, OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT t.allowed, t.remaining, t.retry_in, t.reset_in, t.burst, t.decided_at
    INTO allowed, remaining, retry_in, reset_in, burst, decided_at
    FROM pglease._limit_take('take', p_key, p_cost) AS t;
END
$$;

-- pglease.peek(p_key): what pglease.take(p_key, 1) would answer now,
-- without spending, writing or locking anything: allowed (one token is
-- there), remaining (whole tokens there), retry_in (NULL when allowed,
-- else until one token is), reset_in, burst, decided_at, counting back
-- the amounts of the bucket's reservations expired by decided_at. Reads
-- the newest committed state (its snapshot's, under REPEATABLE READ), in
-- one statement; a take left open in another transaction is not seen
-- until it commits.
-- Raises 22004, 22023, 42501 and PGL20 as pglease.take.
CREATE OR REPLACE FUNCTION pglease.peek(p_key text,
    OUT allowed boolean, OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role   text;
    v_emit   bigint;
    v_now_us bigint;
    v_base   bigint;
    v_tol    bigint;
BEGIN
    SELECT k.key_role, k.emission_us, k.burst INTO v_role, v_emit, burst
    FROM pglease._limit_key('peek', 'p_key', p_key, NULL, NULL) AS k;
    v_tol := v_emit * burst;
    decided_at := clock_timestamp();
    v_now_us := pglease._limit_us(decided_at);
    SELECT greatest(pglease._limit_us(CASE WHEN s.due <= decided_at
            THEN pglease._limit_refund(s.tat,
                     (SELECT coalesce(sum(r.amount), 0) FROM pglease.limit_reservations AS r
                      WHERE r.key = s.key AND r.key_role = s.key_role AND r.expires_at <= decided_at),
                     v_emit, decided_at)
            ELSE s.tat END), v_now_us) INTO v_base
    FROM pglease.limit_state AS s
    WHERE s.key = p_key AND s.key_role = v_role;
    v_base := coalesce(v_base, v_now_us);
    allowed := v_base + v_emit - v_now_us <= v_tol;
    remaining := greatest((v_tol - (v_base - v_now_us)) / v_emit, 0)::integer;
    reset_in := (v_base - v_now_us) * interval '1 microsecond';
    IF NOT allowed THEN
        retry_in := (v_base + v_emit - v_tol - v_now_us) * interval '1 microsecond';
    END IF;
END
$$;

-- pglease.take_wait(p_key, p_cost, p_max_wait): pglease.take, waiting up
-- to p_max_wait for the tokens. While refused with a retry_in that ends
-- within p_max_wait of the call's start, it sleeps retry_in (pg_sleep, in
-- the call) and takes again; the refusal gave the key's row lock back, so
-- the sleeper holds no lock of the key and delays nobody (locks the
-- caller's transaction took before, earlier takes included, stay held
-- while it sleeps: call it first, or in a transaction of its own). Returns
-- pglease.take's row of the last attempt, and waited = the time spent in
-- the call before it. Refused at once, without sleeping, when the tokens
-- cannot be there by the deadline: a caller never waits in vain for
-- them, only for others that spend first. p_max_wait 0 is pglease.take.
-- Raises as pglease.take, and 22004 for a NULL p_max_wait, 22023 for one
-- less than 0 or more than 1 hour; the caller's statement_timeout ends
-- the wait (57014) as any statement.
CREATE OR REPLACE FUNCTION pglease.take_wait(p_key text, p_cost integer, p_max_wait interval,
    OUT allowed boolean, OUT remaining integer, OUT retry_in interval, OUT reset_in interval,
    OUT burst integer, OUT decided_at timestamptz, OUT waited interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_start    timestamptz := clock_timestamp();
    v_deadline timestamptz;
BEGIN
    IF p_max_wait IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22004',
            MESSAGE = 'pglease.take_wait: p_max_wait must not be NULL',
            HINT = 'Pass how long to wait at most, from 0 to 1 hour, e.g. interval ''2 seconds''.';
    END IF;
    IF EXTRACT(epoch FROM p_max_wait) NOT BETWEEN 0 AND 3600 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.take_wait: p_max_wait must be from 0 to 1 hour, got %s', p_max_wait),
            HINT = 'Wait at most an hour in one call; wait longer in a loop of your own.';
    END IF;
    v_deadline := v_start + make_interval(secs => EXTRACT(epoch FROM p_max_wait));
    LOOP
        SELECT t.allowed, t.remaining, t.retry_in, t.reset_in, t.burst, t.decided_at
        INTO allowed, remaining, retry_in, reset_in, burst, decided_at
        FROM pglease._limit_take('take_wait', p_key, p_cost) AS t;
        EXIT WHEN allowed OR decided_at + retry_in > v_deadline;
        PERFORM pg_catalog.pg_sleep(EXTRACT(epoch FROM retry_in));
    END LOOP;
    waited := decided_at - v_start;
END
$$;

-- pglease.limit_set(p_target, p_rate, p_per, p_burst, p_exact): set the
-- rate limit of p_target to p_rate tokens per p_per, at most p_burst at
-- once: of every key starting with p_target (p_exact false, the default),
-- or of the key p_target alone (p_exact true). The longest matching target
-- of a key wins. Replaces the target's limit when it has one (the keys'
-- states stay: a bucket fuller than the new burst refills first).
-- Returns true when it replaced one. Who: the schema owner, or a member
-- of the role owning p_target's bound prefix (42501 for anyone else).
-- Takes deciding meanwhile use the limit they read; a limit_set left open
-- in a transaction delays no take (they read limits without a lock).
-- Raises 22004 for NULL; 22023 for a target not 1 to 256 bytes, a rate or
-- burst not from 1 to 1,000,000,000, a p_per not more than 0 or more than
-- 366 days, a rate of more than one token per microsecond of p_per, or a
-- time to fill the bucket (burst * p_per / p_rate) of more than 100 years;
-- 42501 as above; 53400 when a new target would take the caller's role
-- over its 'limits' quota; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.limit_set(p_target text, p_rate integer, p_per interval,
    p_burst integer, p_exact boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_per    interval;
    v_per_us bigint;
    v_emit   bigint;
BEGIN
    PERFORM pglease._check_text('limit_set', 'p_target', p_target);
    PERFORM pglease._check_int('limit_set', 'p_rate', p_rate, 1, 1000000000);
    v_per := pglease._check_span('limit_set', 'p_per', p_per, interval '366 days');
    PERFORM pglease._check_int('limit_set', 'p_burst', p_burst, 1, 1000000000);
    PERFORM pglease._check_flag('limit_set', 'p_exact', p_exact);
    v_per_us := pg_catalog.round(EXTRACT(epoch FROM v_per) * 1000000)::bigint;
    IF v_per_us < p_rate THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.limit_set: p_rate %s per %s is more than one token per microsecond',
                             p_rate, p_per),
            HINT = 'Give a lower rate, or a longer p_per.';
    END IF;
    v_emit := (v_per_us + p_rate - 1) / p_rate;
    IF v_emit::numeric * p_burst > 3162240000000000 THEN  -- 100 years of 366 days
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('pglease.limit_set: a burst of %s at %s per %s takes more than 100 years to fill',
                             p_burst, p_rate, p_per),
            HINT = 'Give a smaller burst or a higher rate.';
    END IF;
    PERFORM pglease._limit_admin('limit_set', 'p_target', p_target);
    PERFORM 1 FROM pglease.limits AS l WHERE l.target = p_target FOR NO KEY UPDATE;
    IF FOUND THEN
        UPDATE pglease.limits AS l
        SET exact = p_exact, rate = p_rate, per = v_per, burst = p_burst, emission_us = v_emit,
            set_by = session_user, set_at = clock_timestamp()
        WHERE l.target = p_target;
        RETURN true;
    END IF;
    INSERT INTO pglease.limits AS l (target, exact, rate, per, burst, emission_us, set_by, set_at, created_by)
    VALUES (p_target, p_exact, p_rate, v_per, p_burst, v_emit, session_user, clock_timestamp(),
            CASE WHEN pglease._check_quota('limit_set', 'limits') THEN session_user END)
    ON CONFLICT ON CONSTRAINT limits_pkey
    DO UPDATE SET exact = excluded.exact, rate = excluded.rate, per = excluded.per,
                  burst = excluded.burst, emission_us = excluded.emission_us,
                  set_by = excluded.set_by, set_at = excluded.set_at;
    RETURN false;
END
$$;

-- pglease.limit_unset(p_target): remove p_target's limit (keys it was the
-- longest match of fall back to a shorter target, or get PGL20). Returns
-- true when there was one. Who: as pglease.limit_set (42501). Raises 22004
-- for NULL, 22023 for a target not 1 to 256 bytes; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.limit_unset(p_target text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pglease._check_text('limit_unset', 'p_target', p_target);
    PERFORM pglease._limit_admin('limit_unset', 'p_target', p_target);
    DELETE FROM pglease.limits AS l WHERE l.target = p_target;
    RETURN FOUND;
END
$$;

-- pglease.limit_reset(p_key): refill key p_key's bucket: for a key under a
-- bound prefix, the one bucket its role's members share; for a shared key
-- called by the schema owner, every role's bucket of it. A bucket's state
-- row is deleted, or, while it holds reservations, set full (their
-- settles and expiries give back into the full bucket, which changes
-- nothing). Returns how many buckets were reset (0: they were full
-- already). Waits for takes of the key in flight (their row locks). Who:
-- as pglease.limit_set (42501; a client cannot refill its own bucket of a
-- shared key, which the owner limits). Raises 22004 for NULL, 22023 for a
-- key not 1 to 256 bytes; nothing changes then.
CREATE OR REPLACE FUNCTION pglease.limit_reset(p_key text)
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_owner text;
    v_n     integer;
    v_held  integer;
BEGIN
    PERFORM pglease._check_text('limit_reset', 'p_key', p_key);
    PERFORM pglease._limit_admin('limit_reset', 'p_key', p_key);
    v_owner := (pglease._owner(p_key)).owner_role;
    PERFORM FROM pglease.limit_state AS s
    WHERE s.key = p_key AND (v_owner IS NULL OR s.key_role = v_owner)
    FOR UPDATE;
    DELETE FROM pglease.limit_state AS s
    WHERE s.key = p_key AND (v_owner IS NULL OR s.key_role = v_owner) AND s.due IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE pglease.limit_state AS s SET tat = clock_timestamp()
    WHERE s.key = p_key AND (v_owner IS NULL OR s.key_role = v_owner) AND s.due IS NOT NULL;
    GET DIAGNOSTICS v_held = ROW_COUNT;
    RETURN v_n + v_held;
END
$$;

-- _limit_purge(p_cutoff, p_all, p_role): for pglease.purge: gives back the
-- reservations (sql/functions/82_reservations.sql) expired by now, as
-- the next call of their bucket would (_limit_expire; a key with no limit
-- has none to give back to), and deletes the key states full since
-- p_cutoff (tat <= p_cutoff) that hold no reservation: deleting them
-- changes no decision. Of every role's buckets when p_all, else those of
-- p_role (and states it created). Skips rows locked by a take or settle
-- in flight. Returns how many rows it deleted (states and reservations).
CREATE OR REPLACE FUNCTION pglease._limit_purge(p_cutoff timestamptz, p_all boolean, p_role text)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_n    bigint := 0::bigint;
    v_gone bigint;
    v_b    record;
BEGIN
    FOR v_b IN
        SELECT s.key, s.key_role, s.tat FROM pglease.limit_state AS s
        WHERE s.due <= clock_timestamp() AND (p_all OR s.key_role = p_role OR s.created_by = p_role)
        FOR UPDATE SKIP LOCKED
    LOOP
        SELECT e.gone INTO v_gone
        FROM pglease._limit_expire(v_b.key, v_b.key_role, v_b.tat, clock_timestamp(),
                                   (pglease._limit_find(v_b.key)).emission_us) AS e;
        v_n := v_n + v_gone;
    END LOOP;
    WITH gone AS (
        DELETE FROM pglease.limit_state AS s
        WHERE s.ctid = ANY (ARRAY(SELECT d.ctid FROM pglease.limit_state AS d
                                  WHERE d.tat <= p_cutoff AND d.due IS NULL
                                    AND (p_all OR d.key_role = p_role OR d.created_by = p_role)
                                  FOR UPDATE SKIP LOCKED))
          AND s.tat <= p_cutoff AND s.due IS NULL
        RETURNING 1
    )
    SELECT v_n + count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
