#!/bin/sh
# Prints the files of every released schema version (every version of
# sql/versions but the last, head), one path a line, oldest version first:
# its migration (up and down), its extension install script, its extension
# upgrade and downgrade scripts from and to the version before it, and the
# catalog it installs (sql/releases/VERSION.catalog). These are the files
# whose checksums sql/released.sha256 must hold: scripts/freeze-schema.sh
# (make freeze) records them, scripts/verify-schema.sh (make verify) checks
# that none is missing from it. Fails naming a released file that does not
# exist.
set -eu
cd "$(dirname "$0")/.."

die() {
    echo "released-files: $*" >&2
    exit 1
}

versions=$(grep -v '^#' sql/versions | awk 'NF')
released=$(printf '%s\n' "$versions" | sed '$d')
prev=""
# A here-document, not a pipe: die must end the script, not a subshell.
while read -r v mig; do
    [ -n "$v" ] || continue
    for dir in up down; do
        set -- migrations/$(printf '%06d' "$mig")_*.$dir.sql
        [ "$#" -eq 1 ] && [ -f "$1" ] || die "released $v: want one migrations/$(printf '%06d' "$mig")_*.$dir.sql, found: $*"
        echo "$1"
    done
    for f in "extension/pglease--$v.sql" ${prev:+"extension/pglease--$prev--$v.sql" "extension/pglease--$v--$prev.sql"} \
        "sql/releases/$v.catalog"; do
        [ -f "$f" ] || die "released $v: $f is missing"
        echo "$f"
    done
    prev=$v
done <<EOF
$released
EOF
