#!/bin/sh
# Generates the upgrade to head (the last version in sql/versions) from the
# readable sources in sql/: the golang-migrate migration NNNNNN_pglease_X_Y_Z
# (up and down) and the extension's files (control, full install script,
# upgrade and downgrade scripts). Released files are never written: they are
# frozen, and `make verify` checks them against sql/released.sha256.
#
# Usage: scripts/gen-schema.sh [OUTROOT]   (default: the repository)
# Writes OUTROOT/migrations/ and OUTROOT/extension/.
#
# How an upgrade from the previous version PREV to head is made:
#   1. a catalog check: schema pglease must be exactly what PREV installed
#      (sql/catalog.sql against sql/releases/PREV.catalog), else it stops
#      with an error naming the objects that differ, before changing anything;
#   2. the hand-written table changes, sql/upgrades/HEAD.up.sql;
#   3. every view, function and privilege of head as it stands in sql/
#      (CREATE OR REPLACE: live callers keep running, and a renewal under way
#      during the upgrade commits with the definition it started with);
#   4. for the extension: pg_extension_config_dump of every logged table.
# A fresh extension install of head runs sql/ as it stands (tables from
# sql/schema/10_schema.sql); the upgrade test compares its catalog with an
# upgraded one, which is what proves sql/upgrades/HEAD.up.sql right.
# The downgrade runs sql/upgrades/HEAD.down.sql, then PREV's views,
# functions and privileges, taken from PREV's frozen extension script.
# Migrations and upgrade scripts each run as one transaction.
set -eu
cd "$(dirname "$0")/.."
out=${1:-.}

die() {
    echo "gen-schema: $*" >&2
    exit 1
}

# The versions, oldest first; head is the last.
versions=$(grep -v '^#' sql/versions | awk 'NF')
head_line=$(printf '%s\n' "$versions" | tail -1)
prev_line=$(printf '%s\n' "$versions" | tail -2 | head -1)
[ "$head_line" != "$prev_line" ] || die "sql/versions lists one version: nothing to upgrade from"
head=${head_line% *}
head_mig=${head_line#* }
prev=${prev_line% *}

mig_name=$(printf '%06d_pglease_%s' "$head_mig" "$(printf '%s' "$head" | tr . _)")
[ -f "extension/pglease--$prev.sql" ] || die "extension/pglease--$prev.sql (released $prev) is missing"
[ -f "sql/releases/$prev.catalog" ] || die "sql/releases/$prev.catalog (the catalog $prev installs) is missing"
[ -f "sql/upgrades/$head.up.sql" ] || die "sql/upgrades/$head.up.sql (table changes $prev -> $head) is missing"
[ -f "sql/upgrades/$head.down.sql" ] || die "sql/upgrades/$head.down.sql (undoing them) is missing"
grep -q "SELECT '$head'::text;" sql/functions/01_version.sql ||
    die "sql/functions/01_version.sql must return '$head', the head version in sql/versions"

# section FILE...: the files, each after a "-- Source:" line.
section() {
    for f in "$@"; do
        printf '\n-- Source: %s\n\n' "$f"
        cat "$f"
    done
}

# guard: stops unless schema pglease is what $prev installed.
guard() {
    echo '-- pglease:guard-begin'
    cat <<EOF
-- Refuse to upgrade a schema that is not exactly pglease $prev: an upgrade
-- written for $prev could half-fit a schema changed by hand.
DO \$pglease_guard\$
DECLARE
    v_count integer;
    v_diff  text;
    v_path  text := pg_catalog.current_setting('search_path');
BEGIN
    IF pg_catalog.to_regnamespace('pglease') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'pglease: cannot upgrade to $head: schema pglease does not exist',
            HINT = 'Install pglease first (pglease migrate up, or CREATE EXTENSION pglease).';
    END IF;
    -- Types and constraints print schema-qualified, as in the recorded
    -- catalog, whatever the search_path (an extension script runs with
    -- pglease first in it).
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
    WITH expected(object, digest) AS (VALUES
EOF
    awk -F '\t' '{ gsub(/'\''/, "'\'\''", $1); printf "%s        ('\''%s'\'', '\''%s'\'')", (NR > 1 ? ",\n" : ""), $1, $2 } END { print "" }' \
        "sql/releases/$prev.catalog"
    echo '    ), actual AS ('
    grep -v '^--' sql/catalog.sql | sed 's/^/        /'
    cat <<EOF
    ), differences AS (
        SELECT coalesce(e.object, a.object) AS object,
               CASE WHEN a.object IS NULL THEN 'missing'
                    WHEN e.object IS NULL THEN 'not part of pglease $prev'
                    ELSE 'changed' END AS what
        FROM expected AS e
        FULL JOIN actual AS a ON a.object = e.object
        WHERE e.digest IS DISTINCT FROM a.digest
    )
    SELECT count(*)::integer,
           pg_catalog.string_agg(d.object || ' (' || d.what || ')', '; ' ORDER BY d.object COLLATE "C")
    INTO v_count, v_diff
    FROM differences AS d;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
    IF v_count > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('pglease: cannot upgrade schema pglease from $prev to $head: %s object(s) differ from what pglease $prev installed: %s',
                                        v_count, v_diff),
            HINT = 'The schema was changed by hand. Undo those changes (or restore the definitions of pglease $prev), then upgrade again. This upgrade changed nothing.';
    END IF;
END
\$pglease_guard\$;
EOF
    echo '-- pglease:guard-end'
}

# prev_code: the views, functions and privileges of $prev, from its frozen
# extension script, as CREATE OR REPLACE.
prev_code() {
    awk '
        /^-- Source: / {
            src = $3
            keep = (src ~ /^sql\/functions\// || src ~ /^sql\/schema\/(20|90)_/)
            views = (src ~ /^sql\/schema\/10_/)
            if (views) print "\n-- Views of " src "\n"
            inview = 0
            if (keep) print "\n" $0 "\n"
            next
        }
        /^-- Extension only:/ { keep = 0; views = 0 }
        keep { sub(/^CREATE FUNCTION /, "CREATE OR REPLACE FUNCTION "); sub(/^CREATE VIEW /, "CREATE OR REPLACE VIEW "); print; next }
        views && /^CREATE (OR REPLACE )?VIEW / { inview = 1; sub(/^CREATE VIEW /, "CREATE OR REPLACE VIEW ") }
        views && /^COMMENT ON VIEW / { inview = 1 }
        inview { print; if ($0 ~ /;$/) { inview = 0; print "" } }
    ' "extension/pglease--$prev.sql"
}

# config_dump: pg_dump keeps the rows of the extension's logged tables and the
# values of its sequences (the fence floors), so a restored database keeps
# every fence.
config_dump() {
    cat <<'EOF'

-- Extension only: pg_dump dumps the rows of these tables, so that a restored
-- database keeps every fence (a restore that lost them would hand out fences
-- again from 1).
EOF
    # A partitioned table holds no rows of its own: its partitions, made
    # at run time and no members of the extension, are dumped as tables.
    awk '/^CREATE (TABLE|SEQUENCE) pglease\.[a-z_]+ / { name = $3; open = ($2 == "TABLE" && $0 !~ /\);$/); if (!open) print name; next }
         open && /^\)/ { if ($0 !~ /PARTITION BY/) print name; open = 0 }' sql/schema/10_schema.sql |
        while read -r table; do
            # The open tenures are not dumped: restoring the rows of
            # pglease.leases and pglease.slots (the extension's triggers are
            # there during the restore) writes them again, as they were.
            filter=''
            [ "$table" = pglease.tenures ] && filter='WHERE ended_at IS NOT NULL'
            printf "SELECT pg_catalog.pg_extension_config_dump('%s', '%s');\n" "$table" "$filter"
        done
}

functions=$(ls sql/functions/*.sql)
code() {
    section $functions sql/schema/20_views.sql sql/schema/90_privileges.sql
}

gen='-- Code generated by scripts/gen-schema.sh from sql/. DO NOT EDIT.'
psql_guard='\echo Use "CREATE EXTENSION pglease" to load this file. \quit'

# Head's files are new: none of them may be a released (frozen) one. A
# released version's files stay as they are (make verify checks them); this
# writes only the upgrade from prev, the last release, to head.
for f in "migrations/$mig_name.up.sql" "migrations/$mig_name.down.sql" "extension/pglease--$head.sql" \
    "extension/pglease--$prev--$head.sql" "extension/pglease--$head--$prev.sql"; do
    ! grep -q "  $f\$" sql/released.sha256 ||
        die "$f is released (sql/released.sha256): head $head must be a new version (add its line to sql/versions)"
done

mkdir -p "$out/migrations" "$out/extension"

# lock_bound: an upgrade or downgrade gives up after 3 s of waiting for a
# lock, changing nothing, rather than queue its ALTERs behind a client that
# holds a lock on a view it reads (LOCK TABLE pglease.lease_status IN ACCESS
# SHARE MODE, a long query) while every pglease call queues behind it.
lock_bound() {
    cat <<'EOF2'
-- Gives up after 3 s of waiting for a lock (a client's long read of a
-- view, say), changing nothing, rather than hold every pglease call up
-- behind that wait: run it again.
SET LOCAL lock_timeout = '3s';
EOF2
}


{
    echo "$gen"
    echo "-- pglease $prev -> $head. One transaction: it applies whole or not at all."
    echo 'BEGIN;'
    lock_bound
    echo
    guard
    section "sql/upgrades/$head.up.sql"
    code
    echo
    echo 'COMMIT;'
} > "$out/migrations/$mig_name.up.sql"

{
    echo "$gen"
    echo "-- pglease $head -> $prev. One transaction: it applies whole or not at all."
    echo 'BEGIN;'
    lock_bound
    section "sql/upgrades/$head.down.sql"
    prev_code
    echo
    echo 'COMMIT;'
} > "$out/migrations/$mig_name.down.sql"

cat > "$out/extension/pglease.control" <<EOF
# pglease extension. Generated by scripts/gen-schema.sh from sql/. DO NOT EDIT.
# Not trusted: it creates role pglease_client and SECURITY DEFINER functions.
comment = 'fenced leases and N-slot concurrency claims decided by the server clock'
default_version = '$head'
schema = pglease
relocatable = false
superuser = true
trusted = false
EOF

{
    echo "$gen"
    echo
    printf '%s\n' "$psql_guard"
    echo
    echo '-- Schema pglease is created by CREATE EXTENSION (control file: schema = pglease).'
    section sql/schema/10_schema.sql | sed '/^CREATE SCHEMA pglease;$/d'
    code
    config_dump
} > "$out/extension/pglease--$head.sql"

{
    echo "$gen"
    echo "-- ALTER EXTENSION pglease UPDATE TO '$head' (from $prev)."
    echo
    printf '%s\n' "$psql_guard"
    echo
    lock_bound
    guard
    section "sql/upgrades/$head.up.sql"
    code
    config_dump
} > "$out/extension/pglease--$prev--$head.sql"

{
    echo "$gen"
    echo "-- ALTER EXTENSION pglease UPDATE TO '$prev' (from $head)."
    echo
    printf '%s\n' "$psql_guard"
    section "sql/upgrades/$head.down.sql"
    prev_code
} > "$out/extension/pglease--$head--$prev.sql"
