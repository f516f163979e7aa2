-- pglease.acquire(p_name, p_holder, p_ttl): take a lease, or learn who has it.
--
-- A tenure belongs to the pair (p_holder, the database role that took it:
-- session_user). A caller of another role with the same p_holder string is
-- another holder: it is refused like any other while the tenure is live.
-- Time is the server clock read after every wait of the call (row locks of
-- a release, takeover or fenced transaction in flight), never before.
-- Returns one row:
--   * lease free, released or expired: acquired = true, a new tenure with
--     fence = previous fence + 1 (for a new or purged name: one more than
--     the fence floor, see pglease.purge, read as it stands at any
--     isolation level), starting at now (at or after the
--     previous tenure's end), expires_at = now + p_ttl.
--   * lease live and held by p_holder of the caller's role: acquired = true,
--     same fence (a retry after a lost reply is the same tenure),
--     expires_at re-pinned to now + p_ttl.
--   * lease live and held by another holder (or another role): acquired =
--     false, and holder, fence, expires_at describe that holder's tenure
--     as of the clock reading that decided the refusal.
-- expires_in is expires_at minus the server clock reading that decided the
-- call, taken after its waits: for a grant exactly p_ttl; for a refusal
-- the holder's expires_at minus that same reading, so always > 0 (the
-- refusal needs expires_at later than it) and at most the TTL the holder
-- last asked for. It is true when the call returns, but for the call's own
-- few microseconds. (One exception: the first acquire of a name whose row
-- a purge is deleting at that very moment waits for the purge's commit
-- after reading the clock.)
-- A refused caller is registered as a waiter until that expiry, so that a
-- release of the lease NOTIFYs channel 'pglease' (see pglease._wake).
-- Release on request (0.3.0, see pglease.request_release): after a tenure
-- whose release was requested for a preferred holder ends, the next grant
-- is that holder's alone for release_for after the end (expires_at): any
-- other caller is refused as if the preferred holder held the lease until
-- then (holder = the preferred holder, expires_at = the reservation's end).
-- The preferred holder is a holder of a role: the same string from another
-- role is refused during the reservation.
-- A new tenure starts without a value or a request, and NOTIFYs observers
-- (see pglease._observed_wake).
-- Raises 22004 for a NULL argument, 22023 for a name or holder not 1 to 256
-- bytes or a TTL not in (0, 24 hours]; 42501 for a name under a prefix
-- bound to a role the caller is not a member of (see pglease.prefix_bind);
-- 53400 when a new name would take the caller's role over its quota of
-- leases (see pglease.quota_set); 40001 when the lease changed under
-- ten attempts in a row (retry); nothing is changed then.
-- A refused call locks the row only FOR KEY SHARE, which no renewal,
-- release or takeover waits for, so it never delays the holder's renewals.
CREATE OR REPLACE FUNCTION pglease.acquire(
    p_name text, p_holder text, p_ttl interval,
    OUT acquired boolean, OUT fence bigint, OUT holder text,
    OUT expires_at timestamptz, OUT expires_in interval)
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_role    text := session_user::text;
    v_ttl     interval;
    v_floor   bigint;
    v_now     timestamptz;
    v_holder  text;
    v_hrole   text;
    v_fence   bigint;
    v_expires timestamptz;
    v_next    text;
    v_tid     tid;
    v_rto     text;
    v_rrole   text;
    v_rfor    interval;
    v_observed boolean;
    v_capped  boolean;
BEGIN
    IF NOT pglease._tenure_ok(p_name, p_holder, 0) THEN
        PERFORM pglease._check_tenure('acquire', p_name, p_holder, 0);
    END IF;
    v_ttl := coalesce(pglease._ttl(p_ttl), pglease._check_ttl('acquire', p_ttl));
    -- A name under a prefix another role owns: 42501.
    PERFORM pglease._check_owner('acquire', 'p_name', p_name);

    -- Each pass either decides or sees the row change under it; a
    -- concurrent change can only happen a bounded number of times in a row.
    -- A pass that ends with v_next = 'take' holds the row lock, has read the
    -- row (v_*, at v_tid: a locked row version stays where it is) and has
    -- read the clock after the lock: the lease is ours to take then.
    FOR attempt IN 1..10 LOOP
        v_next := NULL;
        -- Fast path, no subtransaction: lock the row at once when it is
        -- ours to take (free, expired, or our own) and nobody has it
        -- locked. Once locked it stays ours to take (a free or expired
        -- tenure cannot come back, our own cannot change hands), so the
        -- decision on the clock read after the lock is a grant.
        v_now := clock_timestamp();
        SELECT l.holder, l.holder_role, l.fence, l.expires_at, l.ctid
        INTO v_holder, v_hrole, v_fence, v_expires, v_tid
        FROM pglease.leases AS l
        WHERE l.name = p_name
          AND pglease._takeable(l.holder, l.holder_role, l.expires_at, l.release_to,
                                l.release_to_role, l.release_for, p_holder, v_role, v_now)
        FOR NO KEY UPDATE SKIP LOCKED;
        IF FOUND THEN
            v_now := clock_timestamp();
            v_next := 'take';
        ELSE
            -- Locked by someone, held by someone else, or no row yet: look
            -- without locking.
            SELECT l.holder, l.holder_role, l.fence, l.expires_at, l.release_to, l.release_to_role,
                   l.release_for
            INTO v_holder, v_hrole, v_fence, v_expires, v_rto, v_rrole, v_rfor
            FROM pglease.leases AS l
            WHERE l.name = p_name;
            v_now := clock_timestamp();
            IF NOT FOUND THEN
                v_next := 'insert';
            ELSIF NOT pglease._takeable(v_holder, v_hrole, v_expires, v_rto, v_rrole, v_rfor,
                                        p_holder, v_role, v_now) THEN
                v_next := 'refuse'; -- held by another, or reserved for the preferred holder
            ELSE
                -- Ours to take, but locked (a release, takeover, renewal,
                -- purge or fenced transaction in flight): wait for it. A
                -- row lock taken for nothing (the lease turned out to be
                -- someone else's) goes with the subtransaction (PGL03), so
                -- that it never delays that holder's renewals; a lock for a
                -- grant stays with the transaction when the block ends.
                BEGIN
                    -- A tenure that is over: its fenced transactions may
                    -- keep us out at most 200 ms past its end (see
                    -- pglease._lock_for_takeover).
                    IF v_holder IS NOT NULL AND v_expires <= v_now THEN
                        PERFORM pglease._lock_for_takeover(p_name, v_fence, v_expires);
                    END IF;
                    SELECT l.holder, l.holder_role, l.fence, l.expires_at, l.ctid,
                           l.release_to, l.release_to_role, l.release_for
                    INTO v_holder, v_hrole, v_fence, v_expires, v_tid, v_rto, v_rrole, v_rfor
                    FROM pglease.leases AS l
                    WHERE l.name = p_name
                    FOR NO KEY UPDATE;
                    IF NOT FOUND THEN
                        v_next := 'insert'; -- purged meanwhile
                    ELSE
                        -- Decide on the clock read now, after every wait.
                        v_now := clock_timestamp();
                        IF NOT pglease._takeable(v_holder, v_hrole, v_expires, v_rto, v_rrole,
                                                 v_rfor, p_holder, v_role, v_now) THEN
                            RAISE EXCEPTION USING ERRCODE = 'PGL03', MESSAGE = 'pglease: held';
                        END IF;
                        v_next := 'take';
                    END IF;
                EXCEPTION WHEN SQLSTATE 'PGL03' THEN
                    v_next := 'refuse';
                END;
            END IF;
        END IF;

        IF v_next = 'take' THEN
            -- The same tenure re-pinned when p_holder of the caller's role
            -- (or of no role: a tenure from before 0.2.0, which this binds)
            -- holds it live at v_now; else a new tenure with the next fence.
            IF v_holder = p_holder AND v_expires > v_now
               AND coalesce(v_hrole = v_role, true) THEN
                UPDATE pglease.leases AS l
                SET expires_at = v_now + v_ttl, holder_role = v_role
                WHERE l.ctid = v_tid;
                fence := v_fence;
            ELSE
                UPDATE pglease.leases AS l
                SET holder = p_holder, holder_role = v_role, fence = v_fence + 1,
                    acquired_at = v_now, expires_at = v_now + v_ttl, value = NULL,
                    release_requested_at = NULL, release_to = NULL, release_for = NULL,
                    release_to_role = NULL
                WHERE l.ctid = v_tid
                -- A look for observers, read with the update (a statement
                -- after the row lock, as pglease.observe needs): most
                -- leases have none, and pglease._observed_wake looks again.
                RETURNING EXISTS (SELECT FROM pglease.observers AS o
                                  WHERE o.name = p_name AND o.until > clock_timestamp())
                INTO v_observed;
                fence := v_fence + 1;
                IF v_observed THEN
                    PERFORM pglease._observed_wake(p_name);
                END IF;
            END IF;
            acquired := true;
            holder := p_holder;
            expires_at := v_now + v_ttl;
            expires_in := v_ttl;
            RETURN;
        END IF;

        IF v_next = 'insert' THEN
            -- A new row starts above the fence floor (see pglease.purge),
            -- within the role's quota.
            v_capped := pglease._check_quota('acquire', 'leases');
            v_now := clock_timestamp();
            INSERT INTO pglease.leases AS l (name, holder, fence, acquired_at, expires_at, holder_role,
                                             created_by)
            VALUES (p_name, p_holder,
                    (SELECT f.last_value FROM pglease.lease_fence_floor AS f) + 1,
                    v_now, v_now + v_ttl, v_role, CASE WHEN v_capped THEN v_role END)
            ON CONFLICT ON CONSTRAINT leases_pkey DO NOTHING
            RETURNING l.fence INTO fence;
            IF FOUND THEN
                -- The insert may have waited for a purge of this very name
                -- to commit, after it read the floor: read it again, now
                -- that the purge has raised it, and stay above it.
                SELECT f.last_value INTO v_floor FROM pglease.lease_fence_floor AS f;
                IF v_floor >= fence THEN
                    fence := v_floor + 1;
                    UPDATE pglease.leases AS l SET fence = v_floor + 1 WHERE l.name = p_name;
                END IF;
                acquired := true;
                holder := p_holder;
                expires_at := v_now + v_ttl;
                expires_in := v_ttl;
                PERFORM pglease._observed_wake(p_name);
                RETURN;
            END IF;
            CONTINUE; -- another session created the row first
        END IF;

        -- Held by another holder. Before refusing, lock the row FOR KEY
        -- SHARE (waiting for a release in flight to commit) and look again
        -- (see pglease._wake), then register as a waiter. The refusal is
        -- decided on the clock read after that lock, and expires_in is
        -- taken on that same reading (so it is > 0), not after the waiter's
        -- registration, which may itself wait.
        SELECT l.holder, l.holder_role, l.fence, l.expires_at, l.release_to, l.release_to_role,
               l.release_for
        INTO v_holder, v_hrole, v_fence, v_expires, v_rto, v_rrole, v_rfor
        FROM pglease.leases AS l
        WHERE l.name = p_name
        FOR KEY SHARE;
        v_now := clock_timestamp();
        IF FOUND AND NOT pglease._takeable(v_holder, v_hrole, v_expires, v_rto, v_rrole, v_rfor,
                                           p_holder, v_role, v_now) THEN
            acquired := false;
            fence := v_fence;
            IF v_holder IS NOT NULL AND v_expires > v_now THEN
                holder := v_holder;
                expires_at := v_expires;
            ELSE
                -- Reserved for the preferred holder until v_expires + v_rfor.
                holder := v_rto;
                expires_at := v_expires + v_rfor;
            END IF;
            expires_in := expires_at - v_now;
            PERFORM pglease._wait_register('lease', p_name, expires_at);
            RETURN;
        END IF;
        -- Released, expired or purged meanwhile: try again.
    END LOOP;
    RAISE EXCEPTION USING ERRCODE = '40001',
        MESSAGE = format('pglease.acquire: lease %L changed on every attempt; retry the call', p_name),
        HINT = 'Call pglease.acquire again.';
END
$$;
