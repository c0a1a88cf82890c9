# tests/mpi_lib.sh - what the mpirun suites share (dist_test.sh, dist_zero_test.sh), sourced after lib.sh:
#   mpi_preflight SUITE WHAT   exits with a SKIP line without mpirun, a FAIL without data/mnist
# then sets up the mpirun environment (root, oversubscription, the sanitizer build's LSan suppressions) and
#   MPI=(mpirun --bind-to none)
#   mrun LOG SECS -- command...   runs with a time limit, output to LOG, returns the exit code
#   clean NAME LOG                no sanitizer report in LOG
#   within_files NAME A B TOL     two safetensors files differ by at most TOL ($TD maxdiff)
#   job_ends NAME LOG PATTERN -- command...
#                                 a job with a killed or hung rank: it must fail (not by the 60 s limit) within
#                                 30 s with a line matching the extended regex PATTERN
mpi_preflight() {
  if ! command -v mpirun >/dev/null 2>&1; then
    echo "  SKIP mpirun is not installed (scripts/setup.sh installs openmpi-bin libopenmpi-dev): no $2"
    echo "$1: 0 passed, 0 failed"
    exit 0
  fi
  if [ ! -f data/mnist/train-images-idx3-ubyte ] || [ ! -f data/mnist/t10k-images-idx3-ubyte ]; then
    echo "  FAIL data/mnist is missing: run scripts/setup.sh"
    echo "$1: 0 passed, 1 failed"
    exit 1
  fi
}

[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 # 4 ranks on fewer cores
# the sanitizer build: leaks inside Open MPI's own libraries are not ctrain's (tests/lsan_mpi.supp; a full
# unwind reaches their frames)
export LSAN_OPTIONS="suppressions=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lsan_mpi.supp:print_suppressions=0:fast_unwind_on_malloc=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
MPI=(mpirun --bind-to none)

mrun() {
  local log=$1 secs=$2
  shift 3
  ( timeout -k 5 "$secs" "$@" >"$log" 2>&1; exit $? ) 2>/dev/null
}
clean() {
  if grep -q "Sanitizer" "$2"; then bad "$1: sanitizer report" "$(grep -A8 Sanitizer "$2" | head -20)"; return 1; fi
  return 0
}
within_files() { within_metric abs "$@"; }
# within_rel NAME FILE_A FILE_B TOL: per tensor, the largest difference is at most TOL times the tensor's
# largest |value| (test_dist maxdiff's "max rel diff")
within_rel() { within_metric rel "$@"; }
# within_metric abs|rel NAME A B TOL: test_dist maxdiff's "max abs diff" or "max rel diff" at most TOL
within_metric() {
  local out m
  out=$("$TD" maxdiff "$3" "$4" 2>&1)
  m=$(printf '%s' "$out" | sed -nE "s/.*max $1 diff ([^ ,]+)[ ,].*/\\1/p")
  if [ -n "$m" ] && awk -v m="$m" -v t="$5" 'BEGIN { exit !(m <= t) }'; then
    ok "$2 (max $1 diff $m <= $5)"
  else
    bad "$2 (max $1 diff '${m:-?}', tolerance $5)" "$out"
  fi
}
# mpi_units LABEL BINARY SECS WHAT: a C test binary (tests/test_*.c) under mpirun at 2 and 4 ranks; every
# rank must report "<source>.c: N passed, 0 failed", with no sanitizer report
mpi_units() {
  local label=$1 bin=$2 secs=$3 what=$4 n rc good log src
  src=$(basename "$bin").c
  for n in 2 4; do
    log="$tmp/$label$n.log"
    mrun "$log" "$secs" -- "${MPI[@]}" -np $n "$bin"
    rc=$?
    good=$(grep -c "$src: [0-9]* passed, 0 failed" "$log")
    if [ "$rc" -eq 0 ] && [ "$good" -eq "$n" ] && clean "$label np $n" "$log"; then
      ok "$what: pass on each of $n ranks"
    else
      bad "$label on $n ranks (rc $rc, $good ranks passed)" "$(grep -vE '^  ok' "$log")"
    fi
  done
}

job_ends() {
  local name=$1 log=$2 pat=$3 start rc el
  shift 4
  start=$(date +%s)
  mrun "$log" 60 -- "$@"
  rc=$?
  el=$(($(date +%s) - start))
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$el" -lt 30 ] && grep -qE "$pat" "$log"; then
    ok "$name: the job ends in ${el} s, exit $rc"
  else
    bad "$name (rc $rc after $el s, want a line matching '$pat')" "$(grep -v epoch "$log" | tail -12)"
  fi
}
