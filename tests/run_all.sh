#!/usr/bin/env bash
# tests/run_all.sh - the whole suite: every test binary in the normal build
# and in the ASan+UBSan build, the CLI tests in both, and the end-to-end
# tests again with the ISA forced lower (CT_ISA=avx2 without oneDNN, and
# CT_ISA=ref) so the fallback kernels run on this machine too. The layer
# check (tests/check_layers.sh: includes point down only) runs first.
# Prints per-suite results and a final "N passed, N failed" line.
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
total_pass=0
total_fail=0
failed_suites=()

run_suite() { # label, command...
  local label=$1
  shift
  echo "== $label"
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | grep -vE '^\s+ok ' | sed 's/^/   /' | tail -n 60
  local line p f
  line=$(printf '%s\n' "$out" | grep -E '[0-9]+ passed, [0-9]+ failed' | tail -n 1)
  p=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) passed.*/\1/')
  f=$(printf '%s' "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  [ -n "$line" ] || { p=0; f=1; }
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  [ "$f" -eq 0 ] || failed_suites+=("$label")
}

echo "== building (normal and sanitizer builds)"
make -j"$JOBS" BUILD=build >/dev/null || { echo "build failed"; make BUILD=build 2>&1 | tail -30; echo "0 passed, 1 failed"; exit 1; }
make -j"$JOBS" BUILD=build-asan SAN=1 OPT=-O1 >/dev/null || { echo "sanitizer build failed"; echo "0 passed, 1 failed"; exit 1; }

run_suite "layers" bash tests/check_layers.sh

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in build/tests/test_*; do
  run_suite "$(basename "$t")" "$t"
done
run_suite "cli" tests/cli_test.sh build/ctrain
run_suite "text cli" tests/text_cli_test.sh build/ctrain
run_suite "report" tests/test_report.sh build/ctrain
run_suite "resume" tests/resume_test.sh build/ctrain
run_suite "fuzz replay" bash tests/fuzz/replay.sh build
for t in build-asan/tests/test_*; do
  run_suite "asan $(basename "$t")" "$t"
done
run_suite "asan cli" tests/cli_test.sh build-asan/ctrain
run_suite "asan text cli" tests/text_cli_test.sh build-asan/ctrain
run_suite "asan report" tests/test_report.sh build-asan/ctrain
run_suite "asan resume" tests/resume_test.sh build-asan/ctrain
run_suite "asan fuzz replay" bash tests/fuzz/replay.sh build-asan
# fallbacks: the same end-to-end checks with lower ISAs
for isa in avx2 ref; do
  onednn=1; [ "$isa" = avx2 ] && onednn=0
  for t in test_golden test_smoke test_api; do
    [ -x build/tests/$t ] && run_suite "CT_ISA=$isa CT_ONEDNN=$onednn $t" env CT_ISA=$isa CT_ONEDNN=$onednn build/tests/$t
  done
done

echo
if [ ${#failed_suites[@]} -gt 0 ]; then echo "failed suites: ${failed_suites[*]}"; fi
echo "all suites: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
