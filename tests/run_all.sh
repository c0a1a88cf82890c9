#!/usr/bin/env bash
# tests/run_all.sh - the whole suite: every test binary in the normal build
# and in the ASan+UBSan build, the CLI tests in both (data parallel over MPI,
# tests/dist_test.sh, included: a SKIP line without mpirun), and the end-to-end
# tests again with the ISA forced lower (CT_ISA=avx2 without oneDNN, and
# CT_ISA=ref) so the fallback kernels run on this machine too, and the
# native-BF16 test with oneDNN held below AVX-512 (its fallback). The layer
# check (tests/check_layers.sh: the layer table; includes point down into
# exported headers, calls point down and no file circles, by nm on the objects
# built here), the function-size check (tests/check_size.sh) and gcc's static
# analyzer (tests/lint_test.sh: make lint-gcc, docs/lint.md) run first.
# Prints per-suite results and a final "N passed, N failed" line.
#
# Sanitizer reports fail the suite whoever printed them: every ASan, LSan and
# UBSan report goes to a file (log_path) instead of stderr, so a report from
# a process whose output a test script never looks at (a ctrain run in a
# pipe, a leak at exit of a run that otherwise passed) is still seen; after
# each suite every report file counts as one failure and is printed.
# CT_SUITES=REGEX runs only the suites whose label matches (e.g. 'asan cli').
set -u
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
total_pass=0
total_fail=0
failed_suites=()
fail_digest=$(mktemp)
san_dir=$(mktemp -d)
trap 'rm -rf "$san_dir" "$fail_digest"' EXIT

run_suite() { # label, command...
  local label=$1
  shift
  if [ -n "${CT_SUITES:-}" ] && ! [[ $label =~ $CT_SUITES ]]; then return 0; fi
  echo "== $label"
  rm -f "$san_dir"/report.*
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
  local r n=0
  for r in "$san_dir"/report.*; do
    [ -s "$r" ] || continue
    n=$((n + 1))
    echo "   FAIL sanitizer report from process ${r##*.} (not necessarily in the output above):"
    head -n 40 "$r" | sed 's/^/       /'
  done
  f=$((f + n))
  total_pass=$((total_pass + p))
  total_fail=$((total_fail + f))
  [ "$f" -eq 0 ] || failed_suites+=("$label")
  # the failing lines (and the 8 indented lines of detail after each), kept for the digest at the end: CI shows
  # only the tail of a long log
  if [ "$f" -ne 0 ]; then
    { echo "== $label"; printf '%s\n' "$out" | grep -A8 -E '^\s*FAIL' | head -n 40 | sed 's/^/   /'
      [ "$rc" -ne 0 ] && [ -z "$line" ] && printf '%s\n' "$out" | tail -n 8 | sed 's/^/   /'; } >>"$fail_digest"
  fi
}

echo "== building (normal and sanitizer builds)"
make -j"$JOBS" BUILD=build >/dev/null || { echo "build failed"; make BUILD=build 2>&1 | tail -30; echo "0 passed, 1 failed"; exit 1; }
make -j"$JOBS" BUILD=build-asan SAN=1 OPT=-O1 >/dev/null || { echo "sanitizer build failed"; echo "0 passed, 1 failed"; exit 1; }

run_suite "layers" bash tests/check_layers.sh
run_suite "size" bash tests/check_size.sh
run_suite "lint" bash tests/lint_test.sh

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:log_path=$san_dir/report
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:log_path=$san_dir/report
for t in build/tests/test_*; do
  run_suite "$(basename "$t")" "$t"
done
run_suite "cli" tests/cli_test.sh build/ctrain
run_suite "cli ux" tests/cli_ux_test.sh build/ctrain
run_suite "text cli" tests/text_cli_test.sh build/ctrain
run_suite "image cli" tests/image_cli_test.sh build/ctrain
run_suite "eval cli" tests/eval_cli_test.sh build/ctrain
run_suite "report" tests/test_report.sh build/ctrain
run_suite "tensorboard" tests/tensorboard_test.sh build/ctrain
run_suite "resume" tests/resume_test.sh build/ctrain
run_suite "fit" tests/fit_test.sh build/ctrain
run_suite "install" bash tests/install_test.sh
run_suite "python" bash tests/python_test.sh
run_suite "fault" tests/fault_test.sh build/ctrain
run_suite "models recipes" tests/models_recipe_test.sh build/ctrain
run_suite "models weights" tests/models_weights_test.sh build/ctrain
run_suite "dist" tests/dist_test.sh build/ctrain
run_suite "dist zero" tests/dist_zero_test.sh build/ctrain
run_suite "zero3" tests/zero3_test.sh build/ctrain
run_suite "tensor parallel" tests/tp_test.sh build/ctrain
run_suite "pipeline parallel" tests/pp_test.sh build/ctrain
run_suite "dist det text" tests/dist_det_text_test.sh build/ctrain
run_suite "netns" tests/netns_test.sh build/ctrain
run_suite "slurm" tests/slurm_test.sh build/ctrain
run_suite "fuzz replay" bash tests/fuzz/replay.sh build
for t in build-asan/tests/test_*; do
  run_suite "asan $(basename "$t")" "$t"
done
run_suite "asan cli" tests/cli_test.sh build-asan/ctrain
run_suite "asan cli ux" tests/cli_ux_test.sh build-asan/ctrain
run_suite "asan text cli" tests/text_cli_test.sh build-asan/ctrain
run_suite "asan image cli" tests/image_cli_test.sh build-asan/ctrain
run_suite "asan eval cli" tests/eval_cli_test.sh build-asan/ctrain
run_suite "asan report" tests/test_report.sh build-asan/ctrain
run_suite "asan tensorboard" tests/tensorboard_test.sh build-asan/ctrain
run_suite "asan resume" tests/resume_test.sh build-asan/ctrain
run_suite "asan fit" tests/fit_test.sh build-asan/ctrain
run_suite "asan fault" tests/fault_test.sh build-asan/ctrain
run_suite "asan models recipes" tests/models_recipe_test.sh build-asan/ctrain
run_suite "asan dist" tests/dist_test.sh build-asan/ctrain
run_suite "asan dist zero" tests/dist_zero_test.sh build-asan/ctrain
run_suite "asan zero3" tests/zero3_test.sh build-asan/ctrain
run_suite "asan tensor parallel" tests/tp_test.sh build-asan/ctrain
run_suite "asan pipeline parallel" tests/pp_test.sh build-asan/ctrain
run_suite "asan dist det text" tests/dist_det_text_test.sh build-asan/ctrain
run_suite "asan slurm" tests/slurm_test.sh build-asan/ctrain
run_suite "asan fuzz replay" bash tests/fuzz/replay.sh build-asan
# fallbacks: the same end-to-end checks with lower ISAs
for isa in avx2 ref; do
  onednn=1; [ "$isa" = avx2 ] && onednn=0
  for t in test_golden test_smoke test_api test_bf16_native; do
    [ -x build/tests/$t ] && run_suite "CT_ISA=$isa CT_ONEDNN=$onednn $t" env CT_ISA=$isa CT_ONEDNN=$onednn build/tests/$t
  done
done
# subnormals kept (flush_subnormals off, PyTorch's default): the golden and PyTorch-parity tests hold both ways
for t in test_golden test_models test_transformer test_optim test_fpenv; do
  [ -x build/tests/$t ] && run_suite "CT_FLUSH_SUBNORMALS=0 $t" env CT_FLUSH_SUBNORMALS=0 build/tests/$t
done
# the oneDNN BF16 attention (BF16 hardware's kernel; oneDNN emulates it on other CPUs) with its fused bias gradient
run_suite "CT_BF16_NATIVE=1 test_fusion attention" env CT_BF16_NATIVE=1 build/tests/test_fusion attention_bias
# native BF16 where oneDNN has no BF16 primitive: every node falls back to FP32 copies
run_suite "ONEDNN_MAX_CPU_ISA=AVX2 test_bf16_native" env ONEDNN_MAX_CPU_ISA=AVX2 build/tests/test_bf16_native

echo
if [ ${#failed_suites[@]} -gt 0 ]; then
  echo "what failed (repeated from above):"
  head -n 200 "$fail_digest"
  echo "failed suites: ${failed_suites[*]}"
fi
echo "all suites: $total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
