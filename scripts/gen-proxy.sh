#!/bin/sh
# Generates the proxy schema's migration (migrations/proxy/) from the same
# sources as a partition's: every public function of sql/functions/ gets a
# proxy function with exactly its signature (name, arguments, OUT
# parameters, return type), copied from its CREATE line up to its LANGUAGE
# line, and a body that routes it as sql/proxy/routes says. So the proxy
# cannot drift from the partitions: `make verify` (scripts/verify-proxy.sh)
# fails when the generated file is stale.
#
# Usage: scripts/gen-proxy.sh [OUTROOT]   (default: the repository)
# Writes OUTROOT/migrations/proxy/000001_pglease_proxy.{up,down}.sql.
#
# The migration: sql/proxy/00_routing.sql (schema, plproxy, routing
# helpers), the generated functions, sql/proxy/20_views.sql,
# sql/proxy/90_privileges.sql; down is sql/proxy/down.sql.
set -eu
cd "$(dirname "$0")/.."
out=${1:-.}

die() {
    echo "gen-proxy: $*" >&2
    exit 1
}

routes=sql/proxy/routes
[ -f "$routes" ] || die "$routes is missing"

# header FILE NAME: the CREATE line of pglease.NAME in FILE up to (not
# including) its LANGUAGE line.
header() {
    awk -v name="$2" '
        $0 ~ "^CREATE OR REPLACE FUNCTION pglease\\." name "\\(" { on = 1 }
        on && /^LANGUAGE / { exit }
        on { print }
    ' "$1"
}

# The public functions of sql/functions/, "NAME FILE" per line.
functions=$(for f in sql/functions/*.sql; do
    sed -n 's/^CREATE OR REPLACE FUNCTION pglease\.\([a-z][a-z0-9_]*\)(.*/\1/p' "$f" | while read -r name; do
        printf '%s %s\n' "$name" "$f"
    done
done)

# Every routed function exists, and every public function is routed.
grep -v '^#' "$routes" | awk 'NF' | while read -r name _; do
    printf '%s\n' "$functions" | grep -q "^$name " || die "$routes routes $name, which sql/functions/ does not define"
done
printf '%s\n' "$functions" | while read -r name file; do
    grep -q "^$name[[:space:]]" "$routes" || die "$file defines pglease.$name, which $routes does not route: add a line for it"
done

gen_functions() {
    printf '%s\n' "$functions" | while read -r name file; do
        set -- $(grep "^$name[[:space:]]" "$routes")
        kind=$2
        arg=${3:-}
        head=$(header "$file" "$name")
        [ -n "$head" ] || die "cannot read the signature of pglease.$name in $file"
        printf '\n-- Source: %s (signature), %s (%s)\n' "$file" "$routes" "$kind${arg:+ $arg}"
        case $kind in
        hash | scopes | keys | partition)
            case $kind in
            hash) run="pglease._route($arg)" ;;
            scopes) run="pglease._route_scopes($arg)" ;;
            keys) run="pglease._route_keys($arg)" ;;
            partition) run=$arg ;;
            esac
            printf '%s\n' "$head"
            printf "LANGUAGE plproxy VOLATILE\nAS \$\$\n    CLUSTER 'pglease';\n    RUN ON %s;\n\$\$;\n" "$run"
            ;;
        all)
            merge=sql/proxy/merge/$name.sql
            [ -f "$merge" ] || die "$routes runs $name on all partitions, but $merge (how to merge their rows) is missing"
            # pglease._all_NAME: the same arguments, one row per partition
            # (every partition's rows, for a function that returns a set).
            if printf '%s\n' "$head" | grep -q '^RETURNS '; then
                printf '%s\n' "$head" | sed -e "s/^CREATE OR REPLACE FUNCTION pglease\.$name(/CREATE OR REPLACE FUNCTION pglease._all_$name(/" \
                    -e 's/^RETURNS /RETURNS SETOF /' -e 's/^RETURNS SETOF SETOF /RETURNS SETOF /'
            else
                printf '%s\n' "$head" | sed "s/^CREATE OR REPLACE FUNCTION pglease\.$name(/CREATE OR REPLACE FUNCTION pglease._all_$name(/"
                # One OUT parameter: a set of its type (Postgres requires it).
                outs=$(printf '%s\n' "$head" | grep -o 'OUT [a-z_]* [a-z ]*[a-z]' || true)
                if [ "$(printf '%s\n' "$outs" | grep -c 'OUT ')" -eq 1 ]; then
                    echo "RETURNS SETOF $(printf '%s\n' "$outs" | sed 's/^OUT [a-z_]* //')"
                else
                    echo 'RETURNS SETOF record'
                fi
            fi
            printf "LANGUAGE plproxy VOLATILE\nAS \$\$\n    CLUSTER 'pglease';\n    RUN ON ALL;\n    TARGET pglease.%s;\n\$\$;\n\n" "$name"
            printf '%s\n' "$head"
            grep -v '^--' "$merge"
            ;;
        batch)
            body=sql/proxy/batch/$name.sql
            [ -f "$body" ] || die "$routes splits $name by partition, but $body (how to split and reassemble) is missing"
            # pglease._one_NAME: the same arguments and results, on the
            # partition of the first name (every name given to it lives there).
            printf '%s\n' "$head" | sed "s/^CREATE OR REPLACE FUNCTION pglease\.$name(/CREATE OR REPLACE FUNCTION pglease._one_$name(/"
            printf "LANGUAGE plproxy VOLATILE\nAS \$\$\n    CLUSTER 'pglease';\n    RUN ON pglease._route_first(p_names);\n    TARGET pglease.%s;\n\$\$;\n\n" "$name"
            printf '%s\n' "$head"
            grep -v '^--' "$body"
            ;;
        *) die "$routes: unknown route $kind for $name" ;;
        esac
    done
}

mkdir -p "$out/migrations/proxy"
{
    echo '-- Code generated by scripts/gen-proxy.sh from sql/functions/ and sql/proxy/. DO NOT EDIT.'
    printf '\n-- Source: sql/proxy/00_routing.sql\n\n'
    cat sql/proxy/00_routing.sql
    printf '\n-- Proxy functions: the signatures of sql/functions/, routed by %s.\n' "$routes"
    gen_functions
    printf '\n-- Source: sql/proxy/20_views.sql\n\n'
    cat sql/proxy/20_views.sql
    printf '\n-- Source: sql/proxy/90_privileges.sql\n\n'
    cat sql/proxy/90_privileges.sql
} >"$out/migrations/proxy/000001_pglease_proxy.up.sql.tmp"
mv "$out/migrations/proxy/000001_pglease_proxy.up.sql.tmp" "$out/migrations/proxy/000001_pglease_proxy.up.sql"
{
    echo '-- Code generated by scripts/gen-proxy.sh from sql/proxy/down.sql. DO NOT EDIT.'
    echo
    cat sql/proxy/down.sql
} >"$out/migrations/proxy/000001_pglease_proxy.down.sql"
