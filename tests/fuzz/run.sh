#!/usr/bin/env bash
# tests/fuzz/run.sh - runs the libFuzzer targets (`make fuzz`, clang), one
# at a time in one process each, starting from the seeds in
# tests/fuzz/corpus/<name>/ (read only) and the inputs earlier runs found in
# build-fuzz/corpus/<name>/ (where new ones go). A crash, a sanitizer
# report, a broken invariant, an input slower than 10 s or an RSS above
# 2.5 GiB fails the target; the input is saved in build-fuzz/crashes/<name>/
# and the command to reproduce it is printed. The JSON-reading targets get
# the dictionary tests/fuzz/json.dict. Prints per target the
# executions, executions per second and ok/FAIL, then "N passed, N failed".
# Without clang and libFuzzer (Debian packages clang, libclang-rt-14-dev
# and libomp-dev) it says so and passes (0 passed, 0 failed).
#   CT_FUZZ_SECONDS   seconds per target (default 10)
#   CT_FUZZ_RUNS      executions per target instead of a time budget
#   CT_FUZZ_FLAGS     more libFuzzer flags (e.g. -max_len=8192)
# usage: tests/fuzz/run.sh [TARGET...]   (default: every tests/fuzz/fuzz_*.c)
set -u
cd "$(dirname "$0")/../.."
FB=${FUZZ_BUILD:-build-fuzz}
SECONDS_PER=${CT_FUZZ_SECONDS:-10}
RUNS=${CT_FUZZ_RUNS:-}
pass=0
fail=0

cc=${FUZZ_CC:-clang}
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' \
  > "$probe/p.c"
if ! command -v "$cc" > /dev/null 2>&1 ||
   ! "$cc" -fsanitize=fuzzer,address,undefined -fopenmp "$probe/p.c" -o "$probe/p" > /dev/null 2>&1; then
  echo "  skipped: $cc with libFuzzer and OpenMP is not installed (Debian: clang libclang-rt-14-dev libomp-dev);"
  echo "  the corpus replays (tests/fuzz/replay.sh) still run in the suite"
  echo "fuzz run: 0 passed, 0 failed"
  exit 0
fi

echo "  building the libFuzzer targets (make fuzz)"
if ! make -j"${JOBS:-2}" fuzz > "$probe/build.log" 2>&1; then
  tail -n 30 "$probe/build.log"
  echo "fuzz run: 0 passed, 1 failed"
  exit 1
fi

if [ $# -gt 0 ]; then names=("$@"); else
  names=()
  for src in tests/fuzz/fuzz_*.c; do n=$(basename "$src" .c); names+=("${n#fuzz_}"); done
fi
for name in "${names[@]}"; do
  bin=$FB/fuzz/fuzz_$name
  if [ ! -x "$bin" ]; then
    echo "  FAIL $name: no target $bin"
    fail=$((fail + 1))
    continue
  fi
  work=$FB/corpus/$name
  crashes=$FB/crashes/$name
  mkdir -p "$work" "$crashes"
  dict=(-dict=tests/fuzz/json.dict)
  case $name in idx | text | image) dict=() ;; esac
  budget=(-max_total_time="$SECONDS_PER")
  [ -n "$RUNS" ] && budget=(-runs="$RUNS")
  log=$FB/fuzz-$name.log
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$bin" "${budget[@]}" "${dict[@]}" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 -artifact_prefix="$crashes/" \
    ${CT_FUZZ_FLAGS:-} "$work" "tests/fuzz/corpus/$name" > "$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)
  if [ "$rc" -eq 0 ] && ! grep -qE 'ERROR: (libFuzzer|AddressSanitizer)|runtime error:|invariant broken' "$log"; then
    echo "  ok   $name: ${execs:-?} executions in ${secs} s (${rate:-?}/s), ${cov:-?}, corpus $(ls "$work" | wc -l) files"
    pass=$((pass + 1))
  else
    echo "  FAIL $name (exit $rc after ${execs:-?} executions): see $log"
    grep -E 'ERROR:|runtime error:|invariant broken|SUMMARY|Test unit written' "$log" | head -n 8 | sed 's/^/       /'
    art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
    [ -n "$art" ] && echo "       reproduce: $bin $art   (gcc build: build/fuzz/replay_$name $art)"
    fail=$((fail + 1))
  fi
done
echo "fuzz run: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
