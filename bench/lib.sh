# shellcheck shell=bash disable=SC2034 # the variables are the sourcing script's
# bench/lib.sh - what the mpirun benchmarks share (bench/tp.sh, bench/pp.sh, bench/zero.sh); sourced after the
# script has set its defaults (ROUNDS STEPS CONTEXT BATCH PRECISION NETNS CT) and BENCH (its name: tp, pp, zero):
#   bench_opt "$@"           one common option (--rounds --steps --context --batch --precision --netns N,
#                            -h/--help); returns 1 for any other option, so the script's own case can go first
#   bench_die MESSAGE        "bench/$BENCH.sh: MESSAGE" on stderr, exit 2
#   bench_setup              checks mpirun, builds $CT if missing, the mpirun environment (root,
#                            oversubscription), LOG=build/bench-$BENCH/<date> (created)
#   bench_launch LOG NP args...
#                            NP ranks (mpirun --bind-to none), or over two network namespaces when NETNS is set
#                            (NP/2 per namespace, scripts/netns_mpirun.sh); output to LOG, 3600 s limit
#   bench_ms_mean LOG        ms/step of the steps after the first, from the progress lines
#   bench_header_state LOG   "params grads optimizer" MiB per rank, from the header's "per rank:" line
#   bench_header_act LOG     activations MiB per rank, from the same line
#   bench_median             the median of the numbers on stdin ("-" when there are none)
#   bench_torch_env          PyTorch at its best (bench/run.sh's setup): BENCH_PY (Debian's /usr/bin/python3),
#                            BENCH_TORCH_ENV (env arguments: the OpenMP OpenBLAS first on LD_LIBRARY_PATH and
#                            OPENBLAS_CORETYPE: SkylakeX where the CPU has AVX-512F, else Haswell); returns 1
#                            with a line on stderr when python3-torch or libopenblas0-openmp is missing
BENCH_SELF=${BENCH_SELF:-$(readlink -f "$0")}

bench_die() { echo "bench/$BENCH.sh: $*" >&2; exit 2; }

bench_opt() {
  case "$1" in
  -h | --help) sed -n '2,/^# Logs/p' "$BENCH_SELF"; exit 0 ;;
  --rounds | --steps | --context | --batch | --precision | --netns) [ $# -ge 2 ] || bench_die "$1 needs a value (--help)" ;;
  *) return 1 ;;
  esac
  case "$1" in
  --rounds) ROUNDS=$2 ;;
  --steps) STEPS=$2 ;;
  --context) CONTEXT=$2 ;;
  --batch) BATCH=$2 ;;
  --precision) PRECISION=$2 ;;
  --netns) NETNS=$2 ;;
  esac
}

bench_setup() {
  command -v mpirun >/dev/null || bench_die "mpirun is not installed (scripts/setup.sh)"
  [ -x "$CT" ] || nice make -j2 "$CT" >/dev/null
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export OMPI_MCA_rmaps_base_oversubscribe=1
  LOG=build/bench-$BENCH/$(date -u +%Y%m%d-%H%M%S)
  mkdir -p "$LOG"
}

bench_launch() { # log np args...
  local log=$1 np=$2
  shift 2
  if [ -n "${NETNS:-}" ]; then
    CT_NETNS_RATE=$NETNS timeout -k 10 3600 scripts/netns_mpirun.sh -n $((np / 2)) -- --bind-to none "$@" >"$log" 2>&1
  else
    timeout -k 10 3600 mpirun --bind-to none -np "$np" "$@" >"$log" 2>&1
  fi
}

# the progress lines' ms/step is the mean since the start: the steps after the first (warm-up: first-use
# allocations, oneDNN primitives) are (N x last - first) / (N - 1)
bench_ms_mean() {
  sed -nE 's/^  step ([0-9]+)\/[0-9]+ .* ([0-9.]+) ms\/step.*/\1 \2/p' "$1" |
    awk 'NR == 1 { f = $2 } { n = $1; l = $2 } END { if (n > 1) printf "%.0f", (n * l - f) / (n - 1) }'
}

bench_header_state() {
  sed -nE 's/.*per rank: ([0-9.]+) MiB parameters \+ ([0-9.]+) MiB gradients \+ ([0-9.]+) MiB optimizer state.*/\1 \2 \3/p' "$1" | head -1
}

bench_header_act() { sed -nE 's/.*MiB optimizer state \+ ([0-9.]+) MiB activations.*/\1/p' "$1" | head -1; }

bench_median() {
  awk '$1 != "" && $1 != "-"' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "-"; else print a[int((NR + 1) / 2)] }'
}

bench_torch_env() {
  BENCH_PY=/usr/bin/python3
  local ob=/usr/lib/x86_64-linux-gnu/openblas-openmp ct=Haswell
  "$BENCH_PY" -c 'import torch' 2>/dev/null ||
    { echo "bench/$BENCH.sh: $BENCH_PY cannot import torch (Debian python3-torch; scripts/setup.sh --reference)" >&2; return 1; }
  [ -e "$ob/libopenblas.so.0" ] ||
    { echo "bench/$BENCH.sh: $ob/libopenblas.so.0 missing (libopenblas0-openmp; scripts/setup.sh --reference)" >&2; return 1; }
  grep -qw avx512f /proc/cpuinfo && ct=SkylakeX
  BENCH_TORCH_ENV=("LD_LIBRARY_PATH=$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "OPENBLAS_CORETYPE=$ct")
}
