-- pglease 0.3.0 -> 0.4.0: table changes. Runs after the catalog check and
-- before the functions, views and privileges of 0.4.0 are applied.

-- Rate limits (sql/functions/80_limits.sql, docs/limits.md): two new
-- tables, empty, created as in sql/schema/10_schema.sql, and the quota
-- kind 'limits'.
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
CREATE TABLE pglease.limit_state (
    key        text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    key_role   text        NOT NULL,
    tat        timestamptz NOT NULL,
    created_by text,
    PRIMARY KEY (key, key_role)
) WITH (fillfactor = 70);
COMMENT ON TABLE pglease.limit_state IS
    'pglease: the state of each rate-limited key; change only through the pglease functions';
CREATE INDEX limit_state_created_by_idx ON pglease.limit_state (created_by) WHERE created_by IS NOT NULL;
ALTER TABLE pglease.quotas
    DROP CONSTRAINT quotas_kind_check,
    ADD CONSTRAINT quotas_kind_check
        CHECK (kind IN ('leases', 'slots', 'scopes', 'groups', 'queue', 'runs', 'limits'));
CREATE TABLE pglease.limit_reservations (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text        NOT NULL CHECK (octet_length(key) BETWEEN 1 AND 256),
    key_role    text        NOT NULL,
    amount      integer     NOT NULL CHECK (amount >= 1),
    reserved_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);
COMMENT ON TABLE pglease.limit_reservations IS
    'pglease: reservations of rate-limit tokens awaiting settlement; change only through the pglease functions';
CREATE INDEX limit_reservations_expires_idx ON pglease.limit_reservations (expires_at);

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
-- Postgres itself checks the history: tenures_no_overlap (below, when
-- btree_gist is installed) refuses two tenures of one name (and slot)
-- whose time ranges on the server's clock overlap, so a grant that would
-- make a second live holder fails its statement; the trigger
-- pglease._tenure_check refuses a fence that does not increase in the
-- order of the grants. Not partitioned: an exclusion constraint cannot
-- span time partitions (docs/tenure-history.md#how-big-it-gets).
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
            EXCLUDE USING gist (name WITH =, slot WITH =,
                                tstzrange(granted_at, ended_at, '[)') WITH &&);
    END IF;
END
$pglease$;

-- The triggers that write the history. Their functions are defined in
-- sql/functions/45_tenures.sql; these bodies are placeholders, replaced in
-- the same transaction. A renewal changes neither fence nor holder, so the
-- WHEN conditions keep every renewal from calling anything.
CREATE FUNCTION pglease._tenure_lease() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_slot() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_leases_purged() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_slots_purged() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NULL; END$$;
CREATE FUNCTION pglease._tenure_check() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER tenure_granted AFTER INSERT ON pglease.leases
    FOR EACH ROW WHEN (NEW.holder IS NOT NULL) EXECUTE FUNCTION pglease._tenure_lease();
CREATE TRIGGER tenure_changed AFTER UPDATE ON pglease.leases
    FOR EACH ROW WHEN (OLD.fence <> NEW.fence OR (OLD.holder IS NOT NULL AND NEW.holder IS NULL))
    EXECUTE FUNCTION pglease._tenure_lease();
CREATE TRIGGER tenure_purged AFTER DELETE ON pglease.leases
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pglease._tenure_leases_purged();
CREATE TRIGGER tenure_granted AFTER INSERT ON pglease.slots
    FOR EACH ROW WHEN (NEW.holder IS NOT NULL) EXECUTE FUNCTION pglease._tenure_slot();
CREATE TRIGGER tenure_changed AFTER UPDATE ON pglease.slots
    FOR EACH ROW WHEN (OLD.fence <> NEW.fence OR (OLD.holder IS NOT NULL AND NEW.holder IS NULL))
    EXECUTE FUNCTION pglease._tenure_slot();
CREATE TRIGGER tenure_purged AFTER DELETE ON pglease.slots
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION pglease._tenure_slots_purged();
CREATE TRIGGER tenure_order BEFORE INSERT OR UPDATE OF name, slot, fence, granted_at ON pglease.tenures
    FOR EACH ROW EXECUTE FUNCTION pglease._tenure_check();
