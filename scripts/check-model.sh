#!/bin/sh
# Checks the Promela model of the shard-group protocol (model/shards.pml)
# with spin: safety (no two members run one shard's function; a running
# function is its shard's current tenure) over every reachable state with
# EVENTS joins, leaves, crashes and stalls, and convergence (after the
# events, eventually for ever balanced) under weak fairness. Fails on any
# error. Installs nothing: names the package when spin or gcc is missing.
# Usage: scripts/check-model.sh   (SAFETY_EVENTS=3, CONVERGE_EVENTS=2)
set -eu
cd "$(dirname "$0")/.."
for tool in spin gcc; do
    command -v "$tool" >/dev/null 2>&1 ||
        { echo "check-model: $tool is missing: make deps (as root or with sudo), or apt-get install $tool" >&2; exit 1; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp model/shards.pml "$dir/"
cd "$dir"
model=shards.pml

# check NAME EVENTS PAN_FLAGS...: verify one ltl property.
check() {
    name=$1 events=$2
    shift 2
    spin -a -DEVENTS="$events" "$model" >spin.log 2>&1 || { cat spin.log >&2; exit 1; }
    gcc -O2 -DNFAIR=8 -o pan pan.c 2>gcc.log || { cat gcc.log >&2; exit 1; }
    start=$(date +%s)
    ./pan -m2000000 -w26 -N "$name" "$@" >pan.log 2>&1 || true
    took=$(($(date +%s) - start))
    states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' pan.log | head -1)
    if grep -q 'errors: 0' pan.log && ! grep -q 'error:' pan.log; then
        echo "check-model: $name with $events events: no errors, $states states, ${took}s"
    else
        echo "check-model: $name with $events events FAILED:" >&2
        grep -E 'error|violated|cycle|errors:' pan.log >&2 || cat pan.log >&2
        spin -DEVENTS="$events" -t "$model" 2>&1 | grep -vE '^Never claim' | tail -60 >&2 || true
        exit 1
    fi
}
check safety "${SAFETY_EVENTS:-2}"
check converge "${CONVERGE_EVENTS:-2}" -a -f
