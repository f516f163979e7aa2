-- pglease: schema, tables and views.
--
-- Every table is an ordinary logged table: an UNLOGGED table is truncated on
-- crash and is not replicated, which would restart fences and break fencing.
-- A lease row keeps its fence across release and expiry, so the next tenure
-- always gets a larger one. pglease.purge deletes rows that have been free
-- for a while; it first raises the fence floor above their fences, and a
-- row created later starts above the floor, so fences never go backwards
-- across purge either.

CREATE SCHEMA pglease;
COMMENT ON SCHEMA pglease IS
    'pglease: fenced leases and N-slot concurrency claims decided by the server clock';

-- vacuum_truncate = false on pglease.leases and pglease.slots: a VACUUM
-- that gives the empty pages at the end of the table back to the system
-- (after a purge, say) holds an ACCESS EXCLUSIVE lock meanwhile, which every
-- renewal would wait for. Free pages are reused by the next rows instead.
-- So right after a purge and VACUUM the statistics say these tables are
-- empty until the next ANALYZE: the functions find rows by primary key
-- whatever the statistics say (see pglease.renew).

-- One row per lease name ever acquired. holder_role is the database role
-- (session_user) that took the tenure: only that role may renew or release
-- it (NULL: a tenure granted before 0.2.0, bound by its first renewal).
--   holder IS NULL                           -> free (released, or never acquired)
--   holder IS NOT NULL, expires_at > now     -> held
--   holder IS NOT NULL, expires_at <= now    -> expired (its tenure is over)
CREATE TABLE pglease.leases (
    name        text        PRIMARY KEY,
    holder      text,
    fence       bigint      NOT NULL CHECK (fence > 0),
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    holder_role text
) WITH (fillfactor = 50, vacuum_truncate = false);
COMMENT ON TABLE pglease.leases IS
    'pglease leases; change only through the pglease functions';

CREATE INDEX leases_holder_idx ON pglease.leases (holder) WHERE holder IS NOT NULL;

-- One row per slot scope; claims lock it so that counting live holders and
-- taking a slot happen as one step per scope. counted is how many units the
-- scope's counted slot rows hold (pglease.slots.counted, units), kept exact
-- by the claims under this lock: a claim first un-counts the rows that
-- ended by its clock, and then counted is the number of units in use, read
-- in O(1). Invariant: counted is at most the capacity of every counted
-- slot row (those of NULL capacity, from before 0.2.0, aside). Every claim
-- (0.2.0's too) grants only while the units after it fit in the smallest
-- capacity of the rows it leaves counted and its own, and every other
-- change of counted lowers it and un-counts rows; so a claim that takes a
-- slot back in place with the capacity and units it had keeps it, whatever
-- the other rows' capacities (pglease.claim_slot relies on it).
-- Claims lock the row FOR NO KEY UPDATE; a refused claim keeps only FOR KEY
-- SHARE, which no claim waits for (see pglease.claim_slot).
CREATE TABLE pglease.slot_scopes (
    scope   text    PRIMARY KEY,
    counted integer NOT NULL DEFAULT 0 CHECK (counted >= 0)
);
COMMENT ON TABLE pglease.slot_scopes IS
    'pglease slot scopes; the row lock serialises claims within one scope';

-- One row per slot of a scope, that is per tenure that can be live at once;
-- slot numbers are dense from 1 and created on first use, so a scope never
-- has more rows than the largest capacity it was claimed with. Same states
-- as pglease.leases; holder_role as there; capacity is the capacity the
-- tenure was claimed with (NULL before 0.2.0) and units how many units of
-- it the tenure holds (1 before 0.3.0): a claim of k units succeeds only
-- while the units in use plus k fit in the smallest capacity of any live
-- holder and its own. counted is true from the claim that takes the slot
-- until a later claim in the scope finds the tenure over on its clock
-- (released or expired) and un-counts it; every change of it happens under
-- the scope lock, with the scope's counter. So after a claim's un-counting,
-- the counted rows are exactly the slots in use (a renewal extends only a
-- live tenure, which is counted).
-- check_at (0.3.0) is when a claim looks at a counted row next: the claim
-- sets it to the tenure's end, a release to the release, and a claim that
-- finds it passed un-counts the row when the tenure is over, else moves it
-- to the tenure's end as renewed. check_at <= expires_at while counted, so
-- the counted rows with check_at <= now include every one that ended (a
-- row written otherwise gets '-infinity': the next claim looks at it). A
-- renewal changes only expires_at and holder_role, which no index holds,
-- so it is a HOT update (fillfactor leaves room on the page for it).
-- The ranges of slot numbers, fences, capacities and units are domains
-- (0.3.0), not CHECK constraints: every statement that writes a table
-- prepares all of its CHECK constraints again (about 9 µs per renewal of a
-- slot, measured), whereas a domain's check is cached per backend and runs
-- only on a value written to its column.
CREATE DOMAIN pglease.slot_number AS integer CHECK (VALUE > 0);
CREATE DOMAIN pglease.fence_number AS bigint CHECK (VALUE > 0);
CREATE DOMAIN pglease.unit_count AS integer CHECK (VALUE BETWEEN 1 AND 1000000);
CREATE TABLE pglease.slots (
    scope       text                 NOT NULL,
    slot        pglease.slot_number  NOT NULL,
    holder      text,
    fence       pglease.fence_number NOT NULL,
    acquired_at timestamptz          NOT NULL,
    expires_at  timestamptz          NOT NULL,
    holder_role text,
    capacity    pglease.unit_count,
    counted     boolean              NOT NULL DEFAULT false,
    units       pglease.unit_count   NOT NULL DEFAULT 1,
    check_at    timestamptz          NOT NULL DEFAULT '-infinity',
    PRIMARY KEY (scope, slot)
) WITH (fillfactor = 50, vacuum_truncate = false);
COMMENT ON TABLE pglease.slots IS
    'pglease slots; change only through the pglease functions';

-- No index holds expires_at or holder_role (see check_at above).
CREATE INDEX slots_holder_idx ON pglease.slots (holder, scope) WHERE holder IS NOT NULL;
-- The counted rows of a scope by check_at (what a claim looks at: those
-- that ended or were renewed since it last looked) and by capacity (the
-- smallest capacity of the live holders), and the rows not counted by
-- number (the free slots a claim takes), each an index range read whatever
-- the holders' number.
CREATE INDEX slots_counted_check_idx ON pglease.slots (scope, check_at) WHERE counted;
CREATE INDEX slots_counted_capacity_idx ON pglease.slots (scope, capacity) WHERE counted;
CREATE INDEX slots_free_idx ON pglease.slots (scope, slot) WHERE NOT counted;

-- Who waits for a release, so that a release NOTIFYs only when someone
-- listens for it (see pglease._wake). A NOTIFY makes its transaction commit
-- under a cluster-wide lock, one notifying commit at a time; without this
-- every acquire and release would pay that. UNLOGGED on purpose: it holds
-- no fence and no grant, registering must not wait for a WAL flush, and
-- losing it (crash, failover) only makes waiters wake at the expiry they
-- were told rather than at the release.
-- One row per waiting role (0.3.0): a registration never waits for another
-- role's registration in flight.
CREATE UNLOGGED TABLE pglease.waiters (
    kind        text        NOT NULL,  -- 'lease' or 'slot'
    name        text        NOT NULL,  -- lease name or slot scope
    until       timestamptz NOT NULL,  -- waiters retry by then anyway
    caller_role text        NOT NULL,  -- the waiting role (session_user)
    PRIMARY KEY (kind, name, caller_role)
);
COMMENT ON TABLE pglease.waiters IS
    'pglease: refused acquires and claims waiting for a release notification';

-- The queue of refused slot claims (0.3.0), in the order they were first
-- refused: one row per waiting (scope, holder, role) with the units it
-- asks for. The oldest live entry of a scope (until > now) is its head:
-- a claim by anyone else succeeds only when it leaves room for the head's
-- units, so a claim of many units is not overtaken forever by claims of
-- few (see pglease._slot_claim_locked). until is the time by which the
-- waiter must claim again (its retry_in plus two seconds); one that does
-- not lapses, and its entry is deleted by the next claim that finds it.
-- UNLOGGED, as pglease.waiters: it holds no fence and no grant; losing it
-- (crash, failover) only forgets the order of the waiters.
CREATE UNLOGGED TABLE pglease.slot_queue (
    scope       text        NOT NULL,
    holder      text        NOT NULL,
    holder_role text        NOT NULL,
    units       integer     NOT NULL CHECK (units BETWEEN 1 AND 1000000),
    since       timestamptz NOT NULL,  -- first refused
    until       timestamptz NOT NULL,  -- lapses unless it claims again by then
    PRIMARY KEY (scope, holder, holder_role)
);
COMMENT ON TABLE pglease.slot_queue IS
    'pglease: refused slot claims in the order they were first refused; the oldest keeps room for its units';
CREATE INDEX slot_queue_since_idx ON pglease.slot_queue (scope, since);

-- The fence floors. pglease.purge raises lease_fence_floor (slot_fence_floor)
-- to the largest fence of the lease (slot) rows it deletes, before its
-- commit; a lease name or slot created afterwards starts at floor + 1, so a
-- purged name never sees a fence again that it had before. Sequences, not a
-- table row: a caller reads a sequence as it stands, whatever its snapshot,
-- so an acquire or claim under REPEATABLE READ or SERIALIZABLE whose
-- snapshot is older than a purge still starts above that purge's floor,
-- and nobody ever waits for a purge to read it. A floor raised by a purge
-- that then rolls back stays raised: fences skip numbers, never repeat.
-- setval is WAL-logged before the purge's commit record, so the floors
-- survive a crash and a failover with the deletes they guard.
-- purged_rows counts the rows purges deleted (pglease.metrics).
CREATE SEQUENCE pglease.lease_fence_floor AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE pglease.slot_fence_floor AS bigint MINVALUE 0 START 0;
CREATE SEQUENCE pglease.purged_rows AS bigint MINVALUE 0 START 0;

-- When pglease.purge_due last let a purge of each role through: each role
-- purges what it left (see pglease.purge), so each takes its own turns.
-- A turn's row is locked until the purging transaction ends; the role's
-- other callers skip it, nobody else waits for it.
CREATE TABLE pglease.purge_turns (
    role_name  text        PRIMARY KEY,
    last_purge timestamptz NOT NULL
);
COMMENT ON TABLE pglease.purge_turns IS
    'pglease: when each role last purged through pglease.purge_due; change only through the pglease functions';

-- Purges raise the sequences above one at a time, under this table's lock,
-- taken inside a subtransaction that ends before the purge returns. It has
-- no rows and no grant: no client can lock it, so no purge waits for
-- another purge, or for anyone, longer than that subtransaction.
CREATE TABLE pglease.purge_lock ();
COMMENT ON TABLE pglease.purge_lock IS
    'pglease: locked by purges while they raise the fence floors; holds no rows';

-- The run ledger (0.3.0): one row per run of a job under a lease tenure
-- (pglease.run_begin to pglease.run_end), so that a fleet of cron hosts
-- runs a job at most once per window, counting only runs that succeeded
-- (docs/cron.md). name is the lease name, fence the tenure's (so one run
-- per tenure: fences never repeat for a name, also across purge),
-- window_start the start of the window on the server's clock and
-- run_window its length (the p_window of run_begin), holder and
-- holder_role the tenure's. started_at and ended_at are server clock
-- readings. outcome: 'running' until run_end; 'succeeded' (exit_status 0)
-- or 'failed' when run_end came while the tenure was current; 'lost' when
-- it came after the tenure ended, or a later tenure began a run first. At
-- most one run per (name, window_start) succeeds: run_begin skips a window
-- already succeeded, and the unique index below makes a second success
-- fail rather than commit.
CREATE TABLE pglease.runs (
    name         text        NOT NULL,
    fence        bigint      NOT NULL CHECK (fence > 0),
    window_start timestamptz NOT NULL,
    run_window   interval    NOT NULL,
    holder       text        NOT NULL,
    holder_role  text        NOT NULL,
    started_at   timestamptz NOT NULL,
    ended_at     timestamptz,
    exit_status  integer,
    outcome      text        NOT NULL DEFAULT 'running'
                 CHECK (outcome IN ('running', 'succeeded', 'failed', 'lost')),
    PRIMARY KEY (name, fence)
);
COMMENT ON TABLE pglease.runs IS
    'pglease run ledger: one row per run of a job; change only through the pglease functions';

CREATE UNIQUE INDEX runs_one_success_idx ON pglease.runs (name, window_start)
    WHERE outcome = 'succeeded';
CREATE INDEX runs_started_idx ON pglease.runs (name, started_at);
-- Leadership (0.3.0, sql/functions/60_leader.sql). On pglease.leases:
--   value                 the holder's value (at most 1024 bytes, NULL: none),
--                         set by the tenure's holder; a new tenure starts
--                         without one, a release clears it, and
--                         lease_status shows it only while the tenure is
--                         live.
--   release_requested_at  when pglease.request_release asked this tenure's
--                         holder to hand over (NULL: not asked); a new
--                         tenure clears it.
--   release_to            the preferred next holder of that request (NULL:
--                         anyone), release_to_role the role it asked as
--                         (a holder is a pair of string and role), and
--                         release_for how long after this tenure ends
--                         (expires_at, which a release moves to the
--                         release) the next grant is reserved for it.
ALTER TABLE pglease.leases
    ADD COLUMN value                text CHECK (octet_length(value) <= 1024),
    ADD COLUMN release_requested_at timestamptz,
    ADD COLUMN release_to           text,
    ADD COLUMN release_for          interval,
    ADD COLUMN release_to_role      text;

-- Who observes a lease (pglease.observe), so that a change of it NOTIFYs
-- only when someone listens (see pglease._observed_wake), as waiters do
-- for releases. UNLOGGED for the same reasons as pglease.waiters: losing
-- it only makes observers notice the change at their next look.
CREATE UNLOGGED TABLE pglease.observers (
    name        text        NOT NULL,  -- lease name
    until       timestamptz NOT NULL,  -- observers look again by then anyway
    caller_role text        NOT NULL,  -- the observing role (session_user)
    PRIMARY KEY (name, caller_role)
);
COMMENT ON TABLE pglease.observers IS
    'pglease: observed leases, whose changes are notified';

-- Who asked for a lease and was refused (pglease.acquire with p_value),
-- until when: the holders pglease.request_release may name as preferred
-- next holder. UNLOGGED: losing it only refuses a preferred holder (PGL05)
-- until it asks again.
CREATE UNLOGGED TABLE pglease.candidates (
    name        text        NOT NULL,  -- lease name
    holder      text        NOT NULL,  -- the refused holder
    until       timestamptz NOT NULL,  -- forgotten after
    holder_role text        NOT NULL,  -- the refused holder's role
    PRIMARY KEY (name, holder, holder_role)
);
COMMENT ON TABLE pglease.candidates IS
    'pglease: refused holders of a lease, which a release request may prefer';

-- Shard groups (0.3.0, sql/functions/70_groups.sql, docs/groups.md). A
-- group's shards are leases named '{group}/shard' in pglease.leases; these
-- tables hold only the group, its shard names and its live members.
-- pglease.groups: one row per group; group_role is the role (session_user)
-- that created it, the only one that may take part in it; the row lock
-- serialises the group's decisions (pglease.group_sync).
CREATE TABLE pglease.groups (
    name       text        PRIMARY KEY,
    group_role text        NOT NULL,
    shards     integer     NOT NULL CHECK (shards BETWEEN 1 AND 100000),
    created_at timestamptz NOT NULL
);
COMMENT ON TABLE pglease.groups IS
    'pglease shard groups; change only through the pglease functions';

-- The shards of a group, named, in order (ord from 1). They never change.
CREATE TABLE pglease.group_shards (
    group_name text    NOT NULL REFERENCES pglease.groups (name) ON DELETE CASCADE,
    shard      text    NOT NULL CHECK (octet_length(shard) BETWEEN 1 AND 128),
    ord        integer NOT NULL,
    PRIMARY KEY (group_name, shard)
);
COMMENT ON TABLE pglease.group_shards IS
    'pglease: the shards of each group; change only through the pglease functions';
CREATE UNIQUE INDEX group_shards_ord_idx ON pglease.group_shards (group_name, ord);

-- The members of a group: live until expires_at (each pglease.group_sync
-- moves it to now + TTL); a lapsed row is deleted by the next sync.
-- max_shards NULL: no maximum.
CREATE TABLE pglease.group_members (
    group_name text        NOT NULL REFERENCES pglease.groups (name) ON DELETE CASCADE,
    member     text        NOT NULL,
    max_shards integer     CHECK (max_shards BETWEEN 1 AND 100000),
    joined_at  timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (group_name, member)
);
COMMENT ON TABLE pglease.group_members IS
    'pglease: the members of each group; change only through the pglease functions';

-- Names a role owns (0.3.0, sql/functions/05_prefixes.sql): one row per
-- bound name prefix, set by the schema owner. owner_role is a role name
-- (a role dropped later owns its prefixes still: nobody may take them).
CREATE TABLE pglease.prefixes (
    prefix     text        PRIMARY KEY CHECK (octet_length(prefix) BETWEEN 1 AND 256),
    owner_role text        NOT NULL,
    bound_at   timestamptz NOT NULL
);
COMMENT ON TABLE pglease.prefixes IS
    'pglease: name prefixes bound to the role that owns them; change only through pglease.prefix_bind and prefix_unbind';

-- Quotas (0.3.0, sql/functions/06_quotas.sql): the schema owner's caps per
-- role and kind of row. created_by on leases, slots and slot_scopes is the
-- role that created the row while that role was capped (NULL otherwise:
-- the partial indexes then cost uncapped roles nothing, also on the
-- updates of a takeover or release that are not HOT); it never changes.
CREATE TABLE pglease.quotas (
    role_name text    NOT NULL,
    kind      text    NOT NULL CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs', 'limits')),
    max_rows  integer NOT NULL CHECK (max_rows >= 0),
    PRIMARY KEY (role_name, kind)
);
COMMENT ON TABLE pglease.quotas IS
    'pglease: caps on the rows each role may have, by kind; change only through pglease.quota_set';
ALTER TABLE pglease.leases ADD COLUMN created_by text;
ALTER TABLE pglease.slots ADD COLUMN created_by text;
ALTER TABLE pglease.slot_scopes ADD COLUMN created_by text;
CREATE INDEX leases_created_by_idx ON pglease.leases (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX slots_created_by_idx ON pglease.slots (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX slot_scopes_created_by_idx ON pglease.slot_scopes (created_by) WHERE created_by IS NOT NULL;
CREATE INDEX runs_holder_role_idx ON pglease.runs (holder_role);

-- Rate limits (0.4.0, sql/functions/80_limits.sql, docs/limits.md). One
-- row per configured target: a key (exact) or every key starting with the
-- target; a key's limit is that of its longest matching target within the
-- names its owner owns (see pglease._limit_match). rate tokens per per, as
-- emission_us, the microseconds between two tokens (per / rate rounded up,
-- so the rate is never exceeded), and burst, the tokens a full bucket
-- holds. set_by is the role that set it; created_by the role that created
-- it while that role was capped ('limits' quota, as for leases).
CREATE TABLE pglease.limits (
    target      text        PRIMARY KEY CHECK (octet_length(target) BETWEEN 1 AND 256),
    exact       boolean     NOT NULL,
    rate        integer     NOT NULL CHECK (rate >= 1),
    per         interval    NOT NULL,
    burst       integer     NOT NULL CHECK (burst >= 1),
    emission_us bigint      NOT NULL CHECK (emission_us >= 1),
    set_by      text        NOT NULL,
    set_at      timestamptz NOT NULL,
    created_by  text
);
COMMENT ON TABLE pglease.limits IS
    'pglease: rate limits by key or prefix; change only through pglease.limit_set and limit_unset';
CREATE INDEX limits_created_by_idx ON pglease.limits (created_by) WHERE created_by IS NOT NULL;

-- The state of each rate-limited key: its theoretical arrival time (tat,
-- GCRA on the server's clock): the bucket is full once tat <= now, and a
-- take of n tokens is allowed while max(tat, now) + n * emission <= now +
-- burst * emission. One row per key and owning role (key_role: the role
-- owning the key's bound prefix, else the taking role: the same key taken
-- by two roles of a shared namespace is two buckets). due: no open
-- reservation of the bucket (pglease.limit_reservations) expires before
-- it; NULL when the bucket has none. Created by the first take, deleted
-- by pglease.purge once full and without reservations, or by
-- pglease.limit_reset. Takes lock the row FOR NO KEY UPDATE until the
-- taker's transaction ends. tat and due have no index, so that a take is
-- a HOT update (fillfactor leaves room on the page for it); purge reads
-- the table whole.
CREATE TABLE pglease.limit_state (
    key        text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    key_role   text        NOT NULL,
    tat        timestamptz NOT NULL,
    due        timestamptz,
    created_by text,
    PRIMARY KEY (key, key_role)
) WITH (fillfactor = 70);
COMMENT ON TABLE pglease.limit_state IS
    'pglease: the state of each rate-limited key; change only through the pglease functions';
CREATE INDEX limit_state_created_by_idx ON pglease.limit_state (created_by) WHERE created_by IS NOT NULL;

-- Reservations of a key's tokens (pglease.reserve, 0.4.0): amount tokens
-- spent from the bucket of (key, key_role) at reserved_at, of which
-- pglease.settle gives back what was not used, until expires_at; at
-- expires_at the whole amount goes back, and the row is deleted by the
-- first call that locks the bucket's row after it. A row exists only while
-- its bucket's row in pglease.limit_state does. A reservation of several
-- keys (pglease.reserve_all) is one row per key, with one id.
CREATE TABLE pglease.limit_reservations (
    id          bigint      GENERATED BY DEFAULT AS IDENTITY,
    key         text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    key_role    text        NOT NULL,
    amount      integer     NOT NULL CHECK (amount >= 1),
    reserved_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (id, key)
);
COMMENT ON TABLE pglease.limit_reservations IS
    'pglease: reservations of rate-limit tokens awaiting settlement; change only through the pglease functions';
CREATE INDEX limit_reservations_bucket_idx ON pglease.limit_reservations (key, key_role, expires_at);

-- Tenure history (0.4.0, #52, sql/functions/45_tenures.sql,
-- docs/tenure-history.md). Opt-in per name prefix: one row of
-- pglease.history_prefixes per prefix whose names (lease names and slot
-- scopes) have their tenures written to pglease.tenures; keep is how long
-- after its end pglease.purge keeps a tenure's row. enabled_by is the role
-- that turned it on. Set only through pglease.history_enable and
-- history_disable.
CREATE TABLE pglease.history_prefixes (
    prefix     text        PRIMARY KEY CHECK (octet_length(prefix) BETWEEN 1 AND 256),
    keep       interval    NOT NULL CHECK (keep > interval '0'),
    enabled_by text        NOT NULL,
    enabled_at timestamptz NOT NULL
);
COMMENT ON TABLE pglease.history_prefixes IS
    'pglease: name prefixes whose tenures are written to pglease.tenures; change only through pglease.history_enable and history_disable';

-- One row per tenure of a name under a history prefix: a lease's (slot 0)
-- or a slot's (slot >= 1 of scope name, units its units), written by
-- triggers on pglease.leases and pglease.slots in the statements that grant
-- and end the tenure (never by a renewal). ended_at is NULL while the
-- tenure is open (held, or expired and not yet taken over or purged);
-- ended_how says how it ended:
--   released     its holder released it (ended_at: the release)
--   handed_over  released while a release was requested (pglease.request_release)
--   forced       pglease.force_release ended it while live
--   expired      it ran out; the next tenure is the same holder's, or an
--                operator cleared it after it ran out (ended_at: its expiry)
--   taken_over   it ran out and another holder took the name (ended_at: its expiry)
--   purged       it ran out and pglease.purge deleted its row (ended_at: its expiry)
-- Postgres itself checks the history, so that a grant that would make a
-- second live holder fails its statement:
--   * tenures_one_open: at most one open tenure per name and slot;
--   * tenures_no_overlap (below, when btree_gist is installed): no two
--     tenures of one name (and slot) whose time ranges on the server's
--     clock overlap, an open tenure standing for the instant of its grant
--     (so a grant inside an ended tenure's span is refused; and its index
--     entry, kept until VACUUM after the tenure ends, covers no later
--     grant, so the check costs the same however many tenures are kept);
--     its names compare byte by byte (COLLATE "C", the same equality), so
--     that no lookup by name can take its index for the primary key's and
--     read every tenure the name has kept, whatever the statistics say;
--   * the trigger pglease._tenure_check: fences increase in the order of
--     the grants, and no tenure is written beside an open one (whose
--     range runs on to any later time).
-- Not partitioned: an exclusion constraint cannot
-- span time partitions; old tenures move to pglease.tenures_archive,
-- which is (docs/tenure-history.md#retention-and-how-big-it-gets).
CREATE TABLE pglease.tenures (
    name        text        NOT NULL,
    slot        integer     NOT NULL CHECK (slot >= 0),
    fence       bigint      NOT NULL CHECK (fence > 0),
    holder      text        NOT NULL,
    holder_role text,
    units       integer,
    granted_at  timestamptz NOT NULL,
    ended_at    timestamptz,
    ended_how   text        CHECK (ended_how IN ('released', 'handed_over', 'forced', 'expired',
                                                 'taken_over', 'purged')),
    PRIMARY KEY (name, slot, fence),
    CHECK ((ended_at IS NULL) = (ended_how IS NULL)),
    CHECK (ended_at >= granted_at)
);
COMMENT ON TABLE pglease.tenures IS
    'pglease tenure history; written only by the triggers on pglease.leases and pglease.slots';
CREATE INDEX tenures_ended_idx ON pglease.tenures (ended_at) WHERE ended_at IS NOT NULL;
CREATE UNIQUE INDEX tenures_one_open ON pglease.tenures (name, slot) WHERE ended_at IS NULL;

-- The archive of the history (#52): closed tenures that pglease.purge moved
-- out of pglease.tenures once their keep had passed, when archiving is on
-- (pglease.history_archive); the same columns, never open. Partitioned by
-- the month of ended_at (UTC), so that old history goes by dropping a
-- month (pglease.history_drop_before) rather than deleting rows. The
-- partitions, pglease.tenures_archive_YYYYMM, are created by the purge
-- that first moves a tenure of their month. No exclusion constraint here:
-- one cannot span partitions on PostgreSQL 13 to 16; the tenures of a name
-- here all ended before those still in pglease.tenures began. Each month
-- has its own primary key on (name, slot, fence) and the parent none, so
-- that pg_dump restores the months of an extension install as they were.
CREATE TABLE pglease.tenures_archive (
    name        text        NOT NULL,
    slot        integer     NOT NULL,
    fence       bigint      NOT NULL,
    holder      text        NOT NULL,
    holder_role text,
    units       integer,
    granted_at  timestamptz NOT NULL,
    ended_at    timestamptz NOT NULL,
    ended_how   text        NOT NULL
) PARTITION BY RANGE (ended_at);
COMMENT ON TABLE pglease.tenures_archive IS
    'pglease tenure history archive, by month of ended_at; written only by pglease.purge, dropped by pglease.history_drop_before';

-- At most one row, made by pglease.history_archive's first call: whether
-- pglease.purge moves the closed tenures whose keep has passed to
-- pglease.tenures_archive (archive true) or deletes them (also with no
-- row). None at install, so that restoring a dump of the extension's
-- tables brings its own row.
CREATE TABLE pglease.history_settings (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    archive boolean NOT NULL DEFAULT false
);
COMMENT ON TABLE pglease.history_settings IS
    'pglease: tenure history settings, one row; change only through pglease.history_archive';

-- The tenures ended, by how, since the schema was made (the exporter's
-- counter, pglease.tenure_ends): sequences, so that counting never makes
-- one holder's transaction wait for another's. A transaction that rolls
-- back after an end keeps its count.
CREATE SEQUENCE pglease.tenures_released AS bigint MINVALUE 0 START 1;
CREATE SEQUENCE pglease.tenures_handed_over AS bigint MINVALUE 0 START 1;
CREATE SEQUENCE pglease.tenures_forced AS bigint MINVALUE 0 START 1;
CREATE SEQUENCE pglease.tenures_expired AS bigint MINVALUE 0 START 1;
CREATE SEQUENCE pglease.tenures_taken_over AS bigint MINVALUE 0 START 1;
CREATE SEQUENCE pglease.tenures_purged AS bigint MINVALUE 0 START 1;

-- The exclusion constraint needs btree_gist (the = of text and integer in
-- a GiST index), which postgresql-contrib ships (a trusted extension: the
-- database's owner may create it). Created here when the server has it and
-- it is missing; without it pglease works as before and
-- pglease.history_enable refuses (55000) until it is installed and the
-- constraint added (docs/tenure-history.md#btree_gist). CREATE EXTENSION
-- pglease cannot create it (no nested CREATE EXTENSION): create btree_gist
-- first.
DO $pglease$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_extension AS e WHERE e.extname = 'btree_gist') THEN
        BEGIN
            CREATE EXTENSION btree_gist;
            COMMENT ON EXTENSION btree_gist IS 'pglease: created by the pglease migration';
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE 'pglease: tenure history needs btree_gist, which cannot be created here (%): history stays off until it is (docs/tenure-history.md)', SQLERRM;
        END;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_extension AS e WHERE e.extname = 'btree_gist') THEN
        ALTER TABLE pglease.tenures ADD CONSTRAINT tenures_no_overlap
            EXCLUDE USING gist ((name COLLATE "C") WITH =, slot WITH =,
                                (CASE WHEN ended_at IS NULL THEN tstzrange(granted_at, granted_at, '[]')
                                      ELSE tstzrange(granted_at, ended_at, '[)') END) WITH &&);
    END IF;
END
$pglease$;

-- The triggers that write the history. Their functions are defined in
-- sql/functions/45_tenures.sql; these bodies are placeholders, replaced in
-- the same transaction. A renewal changes neither fence nor holder, so the
-- WHEN conditions keep every renewal from calling anything.
CREATE FUNCTION pglease._tenure_lease() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_slot() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_purged() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_check() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER tenure_granted AFTER INSERT ON pglease.leases
    FOR EACH ROW WHEN (NEW.holder IS NOT NULL) EXECUTE FUNCTION pglease._tenure_lease();
CREATE TRIGGER tenure_changed AFTER UPDATE ON pglease.leases
    FOR EACH ROW WHEN (OLD.fence <> NEW.fence OR (OLD.holder IS NOT NULL AND NEW.holder IS NULL))
    EXECUTE FUNCTION pglease._tenure_lease();
CREATE TRIGGER tenure_purged AFTER DELETE ON pglease.leases
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pglease._tenure_purged();
CREATE TRIGGER tenure_granted AFTER INSERT ON pglease.slots
    FOR EACH ROW WHEN (NEW.holder IS NOT NULL) EXECUTE FUNCTION pglease._tenure_slot();
CREATE TRIGGER tenure_changed AFTER UPDATE ON pglease.slots
    FOR EACH ROW WHEN (OLD.fence <> NEW.fence OR (OLD.holder IS NOT NULL AND NEW.holder IS NULL))
    EXECUTE FUNCTION pglease._tenure_slot();
CREATE TRIGGER tenure_purged AFTER DELETE ON pglease.slots
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pglease._tenure_purged();
CREATE TRIGGER tenure_order BEFORE INSERT OR UPDATE OF name, slot, fence, granted_at ON pglease.tenures
    FOR EACH ROW EXECUTE FUNCTION pglease._tenure_check();
