#!/usr/bin/env bash
# tests/netns_test.sh - data parallel across two "hosts": two network
# namespaces joined by a veth pair (shaped like 10 GbE with tc netem where
# the kernel has it), one rank in each, Open MPI over TCP, the remote rank
# started through scripts/netns_mpirun.sh's ssh stand-in:
#   - each rank runs in its own namespace (its address);
#   - the communicator's and ZeRO's collectives pass across the link;
#   - deterministic: true at 2 ranks across the link ends with the weights of
#     one process bit for bit; the default mode within FP32 tolerance; a
#     zero_stage 1 run within tolerance too.
# Needs root and `ip netns`: otherwise a SKIP line, counted neither pass nor fail.
# usage: tests/netns_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
TB=$(dirname "$CT")/tests
. "$(dirname "$0")/lib.sh"
H="$(cd "$(dirname "$0")/.." && pwd)/scripts/netns_mpirun.sh"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ns0=$(ip netns list 2>/dev/null | grep -c "^ctns")
probe=$(timeout -k 5 60 "$H" -- sh -c 'echo "rank $OMPI_COMM_WORLD_RANK at $(ip -o -4 addr show | grep -o "10\.77\.[0-9]*\.[0-9]*")"' 2>&1)
rc=$?
if [ "$rc" -eq 77 ]; then
  echo "  $(printf '%s\n' "$probe" | grep SKIP | head -1)"
  echo "netns_test.sh: 0 passed, 0 failed"
  exit 0
fi
if [ ! -f data/mnist/train-images-idx3-ubyte ]; then
  echo "  FAIL data/mnist is missing: run scripts/setup.sh"
  echo "netns_test.sh: 0 passed, 1 failed"
  exit 1
fi
link=$(printf '%s\n' "$probe" | grep "^netns: link")
echo "  ($link)"
if [ "$rc" -eq 0 ] && printf '%s\n' "$probe" | grep -qE "^rank 0 at 10\.77\.[0-9]+\.1$" &&
   printf '%s\n' "$probe" | grep -qE "^rank 1 at 10\.77\.[0-9]+\.2$"; then
  ok "rank 0 runs in namespace A (.1), rank 1 in namespace B (.2)"
else
  bad "rank placement (rc $rc)" "$probe"
fi

# nrun LOG -- program args: across the two namespaces, under a time limit
nrun() {
  local log=$1
  shift 2
  timeout -k 5 180 "$H" -- "$@" >"$log" 2>&1
}
nrun "$tmp/coll.log" -- "$TB/test_dist"
n1=$(grep -c "test_dist.c: [0-9]* passed, 0 failed" "$tmp/coll.log")
nrun "$tmp/zcoll.log" -- "$TB/test_dist_zero"
n2=$(grep -c "test_dist_zero.c: [0-9]* passed, 0 failed" "$tmp/zcoll.log")
[ "$n1" -eq 2 ] && [ "$n2" -eq 2 ] && ok "the collectives' tests pass on both ranks across the link" ||
  bad "collectives across the link ($n1 / $n2 ranks passed)" "$(grep -vE '^  ok' "$tmp/coll.log" "$tmp/zcoll.log")"

mnist_subset "$tmp/data" train 640
mnist_subset "$tmp/data" t10k 200
A=(train --data-dir "$tmp/data" --hidden 32 --batch-size 32 --epochs 2 --seed 5 --threads 1 --optimizer adamw --lr 0.003
   --set log_every=10)
M=step-000040/model.safetensors
"$CT" "${A[@]}" --set deterministic=true --save-dir "$tmp/d1" >"$tmp/d1.log" 2>&1 || bad "one process (deterministic)" "$(tail -3 "$tmp/d1.log")"
"$CT" "${A[@]}" --save-dir "$tmp/one" >"$tmp/one.log" 2>&1 || bad "one process" "$(tail -3 "$tmp/one.log")"
nrun "$tmp/d2.log" -- "$(cd "$(dirname "$CT")" && pwd)/$(basename "$CT")" "${A[@]}" --set deterministic=true --save-dir "$tmp/d2"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "data parallel: 2 ranks x 16 rows" "$tmp/d2.log" && cmp -s "$tmp/d1/$M" "$tmp/d2/$M"; then
  ok "deterministic at 2 ranks across the link: one process's weights bit for bit"
else
  bad "deterministic across the link (rc $rc)" "$(tail -5 "$tmp/d2.log"; cmp "$tmp/d1/$M" "$tmp/d2/$M" 2>&1)"
fi
for mode in default zero1; do
  extra=()
  [ "$mode" = zero1 ] && extra=(--set zero_stage=1)
  nrun "$tmp/$mode.log" -- "$(cd "$(dirname "$CT")" && pwd)/$(basename "$CT")" "${A[@]}" "${extra[@]}" --save-dir "$tmp/$mode"
  rc=$?
  out=$("$TB/test_dist" maxdiff "$tmp/one/$M" "$tmp/$mode/$M" 2>&1)
  m=$(printf '%s' "$out" | sed -nE 's/^max abs diff ([^ ]+) over.*/\1/p')
  if [ "$rc" -eq 0 ] && [ -n "$m" ] && awk -v m="$m" 'BEGIN { exit !(m <= 1e-5) }'; then
    ok "$mode at 2 ranks across the link: one process's weights within FP32 tolerance (max abs diff $m)"
  else
    bad "$mode across the link (rc $rc, max abs diff '${m:-?}')" "$(tail -5 "$tmp/$mode.log"; echo "$out")"
  fi
done
ns=$(ip netns list 2>/dev/null | grep -c "^ctns")
[ "$ns" -le "$ns0" ] && ok "the namespaces are gone afterwards" || bad "$((ns - ns0)) ctns* namespaces left behind" "$(ip netns list)"
summary "netns_test.sh"
