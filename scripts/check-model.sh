#!/bin/sh
# Checks the Promela models with spin. Fails on any error. Installs
# nothing: names the package when spin or gcc is missing.
#
# core (model/lease.pml, `make model-core`, in CI): acquire, renew,
# release, expiry on the server's clock and the local deadline, safety over
# every reachable state; then each mutant and each limit, which must FAIL,
# on the property it breaks (a model that stopped checking is caught).
#
# shards (model/shards.pml): safety (no two members run one shard's
# function; a running function is its shard's current tenure) over every
# reachable state with EVENTS joins, leaves, crashes and stalls, and
# convergence (after the events, eventually for ever balanced) under weak
# fairness.
#
# Usage: scripts/check-model.sh [all|core|shards]   (default all;
#        SAFETY_EVENTS=2, CONVERGE_EVENTS=2 for shards)
set -eu
cd "$(dirname "$0")/.."
what=${1:-all}
case $what in
all | core | shards) ;;
*) echo "usage: $0 [all|core|shards]" >&2; exit 2 ;;
esac
for tool in spin gcc; do
    command -v "$tool" >/dev/null 2>&1 ||
        { echo "check-model: $tool is missing: make deps (as root or with sudo), or apt-get install $tool" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp model/shards.pml model/lease.pml "$dir/"
cd "$dir"

# figures: the states, memory and time of the last pan.log.
figures() {
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' pan.log | head -1)
    mem=$(sed -n 's/^ *\([0-9.]*\).*total actual memory usage.*/\1/p' pan.log | head -1)
    took=$(sed -n 's/^pan: elapsed time \([0-9.e+]*\) seconds.*/\1/p' pan.log | head -1)
    echo "$states states, ${mem} MB, ${took} s"
}

# shard NAME EVENTS PAN_FLAGS...: verify one ltl property of shards.pml.
shard() {
    name=$1 events=$2
    shift 2
    spin -a -DEVENTS="$events" shards.pml >spin.log 2>&1 || { cat spin.log >&2; exit 1; }
    gcc -O2 -DNFAIR=8 -o pan pan.c 2>gcc.log || { cat gcc.log >&2; exit 1; }
    ./pan -m2000000 -w26 -N "$name" "$@" >pan.log 2>&1 || true
    if grep -q 'errors: 0' pan.log && ! grep -q 'error:' pan.log; then
        echo "check-model: shards $name with $events events: no errors, $(figures)"
    else
        echo "check-model: shards $name with $events events FAILED:" >&2
        grep -E 'error|violated|cycle|errors:' pan.log >&2 || cat pan.log >&2
        spin -DEVENTS="$events" -t shards.pml 2>&1 | grep -vE '^Never claim' | tail -60 >&2 || true
        exit 1
    fi
}

# lease FLAGS...: verify lease.pml (exhaustive, COLLAPSE is lossless) with
# spin flags; pan.log holds the result.
lease() {
    spin -a "$@" lease.pml >spin.log 2>&1 || { cat spin.log >&2; exit 1; }
    gcc -O1 -DMEMLIM=2048 -DCOLLAPSE -o pan pan.c 2>gcc.log || { cat gcc.log >&2; exit 1; }
    ./pan -m300000 -w23 >pan.log 2>&1 || true
}

core() {
    lease
    if grep -q 'errors: 0' pan.log && ! grep -qE 'error:|violated' pan.log; then
        echo "check-model: lease safety: no errors, $(figures)"
    else
        echo "check-model: lease safety FAILED:" >&2
        grep -E 'error|violated|errors:' pan.log >&2 || cat pan.log >&2
        spin -t -p -g lease.pml 2>&1 | tail -80 >&2 || true
        exit 1
    fi
    # Each must fail, on the property named: safety (the ltl claim),
    # fences (the grant's assert) or unfenced (the effect's assert).
    for m in MUTANT_RENEW_AFTER_DEADLINE:safety MUTANT_CLIENT_CLOCK_GRANT:safety \
        MUTANT_DEADLINE_FROM_RECEIVE:safety MUTANT_NO_MARGIN:safety \
        MUTANT_FENCE_RESTART:fences UNFENCED:unfenced REORDER:safety; do
        flag=${m%%:*} want=${m#*:}
        lease -D"$flag"
        line=$(grep -m1 'assertion violated' pan.log || true)
        case $line in
        *'fence>maxf'*) got=fences ;;
        *'assertion violated  !( !('*) got=safety ;;
        *'assertion violated'*) got=unfenced ;;
        *) got=none ;;
        esac
        depth=$(sed -n 's/.*(at depth \([0-9]*\)).*/\1/p' pan.log | head -1)
        if [ "$got" = "$want" ]; then
            echo "check-model: lease -D$flag fails as it must: $want violated at depth $depth, $(figures)"
        else
            echo "check-model: lease -D$flag must violate $want, got: ${line:-no error}" >&2
            exit 1
        fi
    done
}

case $what in
all)
    shard safety "${SAFETY_EVENTS:-2}"
    shard converge "${CONVERGE_EVENTS:-2}" -a -f
    core
    ;;
core) core ;;
shards)
    shard safety "${SAFETY_EVENTS:-2}"
    shard converge "${CONVERGE_EVENTS:-2}" -a -f
    ;;
esac
