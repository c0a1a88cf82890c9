#!/usr/bin/env bash
# bench/run.sh - one training step (forward + backward + optimizer update),
# ctrain vs PyTorch, same workloads, same thread count, alternating rounds.
#
#   bench/run.sh                 # 5 rounds x (ctrain, PyTorch's configurations) x (mlp, cnn):
#                                # PyTorch runs every configuration below in every round and is
#                                # compared at its fastest per workload (the report says which)
#   bench/run.sh --rounds 3 --steps 5 --workloads mlp
#   bench/run.sh --tune          # PyTorch variants only (OpenBLAS core type,
#                                # foreach optimizers, channels_last) to pick its best
# Options (or the environment variable in brackets):
#   --rounds N [ROUNDS=5]     --steps N [STEPS=10]     --warmup N [WARMUP=3]
#   --threads N [THREADS=2]   --workloads "mlp cnn" [WORKLOADS] (also gptchar, gpt2); add -bf16 for mixed
#                             precision: "mlp-bf16 cnn-bf16" (PyTorch: torch.autocast bfloat16);
#                             -bf16native / -bf16copies: ctrain's BF16 with CT_BF16_NATIVE=1 / =0
#                             (matmul/linear/conv on oneDNN's BF16 primitives, or on FP32 copies)
#   --table                   the whole table of ../shared/perf-amx.md in one command: every workload in FP32
#                             and BF16 (mlp cnn gptchar gpt2 resnet50), 3 rounds x 5 steps after 2 warm-up,
#                             PyTorch at its best, no perf/oneDNN breakdowns (options after it override)
#   --bf16-compare            WORKLOADS="mlp mlp-bf16copies mlp-bf16native cnn cnn-bf16copies cnn-bf16native":
#                             FP32 vs BF16 on FP32 copies vs native BF16 (the AMX / AVX512-BF16 check)
#   PyTorch's configurations [TORCH_BEST=1]: OpenBLAS core types Haswell and (on AVX-512 CPUs)
#                             SkylakeX x optimizer foreach 0/1 x (cnn) channels_last 0/1
#   --coretype NAME --foreach 0|1 --channels-last 0|1: one fixed PyTorch configuration instead
#                             [CORETYPE=Haswell TORCH_FOREACH=0 TORCH_CHANNELS_LAST=0, TORCH_BEST=0]
#   --ctrain-budget S [CTRAIN_BUDGET_S=30]  cap on ctrain's timed seconds per round
#                                           (slow reference kernels: >= 3 steps still run)
#   --no-perf [PERF=0]       skip the perf-based ctrain per-kernel breakdown
#   --no-dnnl [DNNL_BREAKDOWN=0]  skip the ONEDNN_VERBOSE per-primitive runs (both frameworks)
#   --neighbour [NEIGHBOUR=1]  keep a 2-thread ctrain MLP training in the background
#                            the whole time (a controlled noisy neighbour, like a
#                            colleague's test run): how both frameworks degrade
#   --nice N [NICE=0]        run both frameworks under `nice -n N` (negative N needs
#                            root and takes CPU from everyone else on the machine: off
#                            by default, mention it when you publish numbers)
#   --dist [OPTIONS]          data parallel instead: bench/dist.sh OPTIONS (baseline / buckets /
#                             overlap / bf16 compression at 2 ranks; its --help)
#   --e2e [OPTIONS]           end to end instead: bench/e2e.sh OPTIONS (the full recipes trained to the end in
#                             ctrain and PyTorch: per-epoch and wall time, final accuracy / val loss; its --help)
#   --zero [OPTIONS]          ZeRO instead: bench/zero.sh OPTIONS (peak RSS per rank and step time of DP,
#                             ZeRO-1/2/3 at 2 and 4 ranks against PyTorch DDP / FSDP; its --help)
#   --subnormals [OPTIONS]    the demo trained to the end with subnormals flushed (default) and kept,
#                             alternating: per-epoch times and the ratio (bench/subnormals.sh --help)
#   --gemm [OPTIONS]          the workloads' GEMMs inside the step vs oneDNN alone: builds and runs
#                             $BUILD/bench/bench_gemm OPTIONS (--workloads, --rounds, --precision; its --help)
#   --scale [ARGS]            scaling beyond this machine by simulation instead: bench/scale.py ARGS (the link's
#                             latency/bandwidth, compute per op, DP/ZeRO/TP/PP projected to 8/16/64 ranks; its --help)
#   BUILD=build-bench         build folder (the library and bench_step go there)
# Logs of every run: $BUILD/bench/logs/<date>/.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
WORKLOADS=${WORKLOADS:-"mlp cnn"}
CORETYPE=${CORETYPE:-Haswell}
TORCH_FOREACH=${TORCH_FOREACH:-0}
TORCH_CHANNELS_LAST=${TORCH_CHANNELS_LAST:-0}
TORCH_BEST=${TORCH_BEST:-1}
CTRAIN_BUDGET_S=${CTRAIN_BUDGET_S:-30}
PERF=${PERF:-1}
NICE=${NICE:-0}
DNNL_BREAKDOWN=${DNNL_BREAKDOWN:-1}
NEIGHBOUR=${NEIGHBOUR:-0}
BUILD=${BUILD:-build-bench}
TUNE=0
PY=/usr/bin/python3                        # Debian's python3-torch (not the pyenv python3)
OB_DIR=/usr/lib/x86_64-linux-gnu/openblas-openmp

while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift ;;
    --steps) STEPS=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --workloads) WORKLOADS=$2; shift ;;
    --bf16-compare) WORKLOADS="mlp mlp-bf16copies mlp-bf16native cnn cnn-bf16copies cnn-bf16native" ;;
    --table) WORKLOADS="mlp mlp-bf16 cnn cnn-bf16 gptchar gptchar-bf16 gpt2 gpt2-bf16 resnet50 resnet50-bf16"
             ROUNDS=3; STEPS=5; WARMUP=2; PERF=0; DNNL_BREAKDOWN=0 ;;
    --coretype) CORETYPE=$2; TORCH_BEST=0; shift ;;
    --foreach) TORCH_FOREACH=$2; TORCH_BEST=0; shift ;;
    --channels-last) TORCH_CHANNELS_LAST=$2; TORCH_BEST=0; shift ;;
    --ctrain-budget) CTRAIN_BUDGET_S=$2; shift ;;
    --no-perf) PERF=0 ;;
    --no-dnnl) DNNL_BREAKDOWN=0 ;;
    --nice) NICE=$2; shift ;;
    --neighbour) NEIGHBOUR=1 ;;
    --tune) TUNE=1 ;;
    --dist) shift; exec bash "$(dirname "$SELF")/dist.sh" "$@" ;;
    --zero) shift; exec bash "$(dirname "$SELF")/zero.sh" "$@" ;;
    --subnormals) shift; exec bash "$(dirname "$SELF")/subnormals.sh" "$@" ;;
    --gemm) shift; b=$BUILD; root=$(dirname "$(dirname "$SELF")")
        nice make -s -C "$root/bench" BUILD="$b" bench_gemm >&2
        exec nice "$root/$b/bench/bench_gemm" "$@" ;;
    --e2e) shift; exec bash "$(dirname "$SELF")/e2e.sh" "$@" ;;
    --scale) shift; exec /usr/bin/python3 "$(dirname "$SELF")/scale.py" "$@" ;;
    -h | --help) sed -n '2,/^# Logs/p' "$SELF"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
    shift
done

[ -x "$PY" ] || { echo "run.sh: $PY not found (Debian python3-torch is needed)" >&2; exit 1; }
[ -e "$OB_DIR/libopenblas.so.0" ] || { echo "run.sh: $OB_DIR/libopenblas.so.0 missing (install libopenblas0-openmp)" >&2; exit 1; }

LOGDIR=$BUILD/bench/logs/$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOGDIR"
BIN=$BUILD/bench/bench_step

if [ "$TUNE" = 0 ]; then
    echo "== building ctrain ($BUILD) and bench_step"
    make --no-print-directory -C bench BUILD="$BUILD" >"$LOGDIR/build.log" 2>&1 ||
        { tail -30 "$LOGDIR/build.log"; echo "run.sh: build failed" >&2; exit 1; }
    grep "bench:" "$LOGDIR/build.log" || true
fi

export OMP_NUM_THREADS=$THREADS
# PyTorch: OpenMP OpenBLAS first on the loader path, explicit core type.
torch_env=(nice -n "$NICE" env "LD_LIBRARY_PATH=$OB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "OMP_NUM_THREADS=$THREADS")

# A workload is mlp, cnn, or either with a precision suffix: mlp-bf16, cnn-bf16
# (ctrain --precision bf16, PyTorch torch.autocast("cpu", dtype=torch.bfloat16)).
# -bf16native / -bf16copies are -bf16 with ctrain's CT_BF16_NATIVE=1 / =0
# (docs/mixed-precision.md); PyTorch runs its bf16 autocast for both.
wl_base() { echo "${1%%-*}"; }
wl_suffix() { case "$1" in *-*) echo "${1#*-}" ;; *) echo fp32 ;; esac; }
wl_prec() { case "$(wl_suffix "$1")" in bf16native | bf16copies) echo bf16 ;; *) wl_suffix "$1" ;; esac; }
wl_env() { # what ctrain's environment adds for a workload (env arguments, no spaces; may be none)
    case "$(wl_suffix "$1")" in
    bf16native) echo CT_BF16_NATIVE=1 ;;
    bf16copies) echo CT_BF16_NATIVE=0 ;;
    esac
}
# shellcheck disable=SC2046 # wl_env's words are split on purpose
run_ctrain() { # workload round
    nice -n "$NICE" env $(wl_env "$1") "$BIN" --workload "$(wl_base "$1")" --precision "$(wl_prec "$1")" --threads "$THREADS" --warmup "$WARMUP" --steps "$STEPS" \
        --budget-s "$CTRAIN_BUDGET_S" --seed "$2" >"$LOGDIR/$1_ctrain_r$2.log" 2>&1 ||
        { cat "$LOGDIR/$1_ctrain_r$2.log"; echo "run.sh: ctrain $1 failed" >&2; exit 1; }
}
run_torch() { # workload round label [extra env/args...]
    local wl=$1 r=$2 label=$3 ct=$4; shift 4
    "${torch_env[@]}" "OPENBLAS_CORETYPE=$ct" "$PY" bench/torch_step.py --workload "$(wl_base "$wl")" \
        --precision "$(wl_prec "$wl")" \
        --threads "$THREADS" --warmup "$WARMUP" --steps "$STEPS" --seed "$r" "$@" \
        >"$LOGDIR/${wl}_${label}_r$r.log" 2>&1 ||
        { cat "$LOGDIR/${wl}_${label}_r$r.log"; echo "run.sh: PyTorch $wl failed" >&2; exit 1; }
}

echo "== environment"
echo "date:        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpu:         $(lscpu | sed -n 's/^Model name: *//p') (family $(lscpu | sed -n 's/^CPU family: *//p'), model $(lscpu | sed -n 's/^Model: *//p')), $(nproc) cpus online"
echo "isa flags:   avx2=$(grep -qw avx2 /proc/cpuinfo && echo yes || echo no) fma=$(grep -qw fma /proc/cpuinfo && echo yes || echo no) avx512f=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
echo "load:        $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
echo "threads:     $THREADS per framework (ctrain ct_context_opts.num_threads, torch.set_num_threads, OMP_NUM_THREADS)"
[ "$NICE" != 0 ] && echo "nice:        both frameworks run under nice -n $NICE"
echo "plan:        $ROUNDS rounds; each round and workload runs ctrain and PyTorch in fresh processes"
echo "             (order alternates by round), $WARMUP warmup + $STEPS timed steps each"

if [ "$TUNE" = 1 ]; then
    # label|coretype|args ; all run for each workload in every round
    variants=("auto||--foreach 0" "Haswell|Haswell|--foreach 0" "Zen|Zen|--foreach 0"
              "Haswell+foreach|Haswell|--foreach 1")
    for wl in $WORKLOADS; do [ "$wl" = cnn ] && variants+=("Haswell+channels_last|Haswell|--foreach 0 --channels-last 1"); done
    for r in $(seq 1 "$ROUNDS"); do
        for wl in $WORKLOADS; do
            for v in "${variants[@]}"; do
                IFS='|' read -r label ct args <<<"$v"
                [ "$wl" = mlp ] && [[ "$label" == *channels_last* ]] && continue
                # shellcheck disable=SC2086
                run_torch "$wl" "$r" "pt-$label" "$ct" $args
            done
        done
        echo "   round $r/$ROUNDS done"
    done
    "$PY" bench/report.py tune "$LOGDIR"
    echo "logs: $LOGDIR"
    exit 0
fi

if [ "$NEIGHBOUR" = 1 ]; then
    "$BIN" --workload mlp --threads "$THREADS" --warmup 0 --steps 1000000 --budget-s 1000000 --quiet \
        >/dev/null 2>&1 &
    NB_PID=$!
    trap 'kill "$NB_PID" 2>/dev/null && wait "$NB_PID" 2>/dev/null; true' EXIT
    echo "neighbour:   bench_step --workload mlp with $THREADS threads runs in the background (pid $NB_PID)"
fi

torch_args=(--foreach "$TORCH_FOREACH" --channels-last "$TORCH_CHANNELS_LAST")
# PyTorch's configurations (TORCH_BEST=1): label|coretype|args, per workload
coretypes="Haswell"
grep -qw avx512f /proc/cpuinfo && coretypes="Haswell SkylakeX"
torch_variants() { # workload -> lines label|coretype|args
    local cl ct fe
    for ct in $coretypes; do
        for fe in 0 1; do
            for cl in 0 1; do
                [ "$cl" = 1 ] && [ "$(wl_base "$1")" != cnn ] && continue
                echo "pt-$ct-foreach$fe$([ "$cl" = 1 ] && echo -channels_last)|$ct|--foreach $fe --channels-last $cl"
            done
        done
    done
}
run_torch_all() { # workload round
    if [ "$TORCH_BEST" = 1 ]; then
        local v label ct args
        while IFS= read -r v; do
            IFS='|' read -r label ct args <<<"$v"
            # shellcheck disable=SC2086 # args are split on purpose
            run_torch "$1" "$2" "$label" "$ct" $args
        done < <(torch_variants "$1")
    else
        run_torch "$1" "$2" pytorch "$CORETYPE" "${torch_args[@]}"
    fi
}
if [ "$TORCH_BEST" = 1 ]; then
    echo "pytorch:     LD_LIBRARY_PATH=$OB_DIR; every configuration of OPENBLAS_CORETYPE {$coretypes} x foreach {0,1}"
    echo "             x channels_last {0,1} (cnn) in every round; compared at its fastest per workload"
else
    echo "pytorch:     OPENBLAS_CORETYPE=$CORETYPE LD_LIBRARY_PATH=$OB_DIR ${torch_args[*]}"
fi
for r in $(seq 1 "$ROUNDS"); do
    for wl in $WORKLOADS; do
        if [ $((r % 2)) = 1 ]; then
            run_ctrain "$wl" "$r"; run_torch_all "$wl" "$r"
        else
            run_torch_all "$wl" "$r"; run_ctrain "$wl" "$r"
        fi
    done
    echo "   round $r/$ROUNDS done (load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load:        $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end"

# shellcheck disable=SC2046 # wl_env's words are split on purpose
if [ "$PERF" = 1 ] && command -v perf >/dev/null 2>&1; then
    for wl in $WORKLOADS; do
        perf record -q -F 499 -o "$LOGDIR/$wl.perf.data" -- env $(wl_env "$wl") "$BIN" --workload "$(wl_base "$wl")" \
            --precision "$(wl_prec "$wl")" --threads "$THREADS" \
            --warmup 1 --steps "$STEPS" --budget-s "$CTRAIN_BUDGET_S" --quiet >"$LOGDIR/${wl}_perf_run.log" 2>&1 &&
            perf report -i "$LOGDIR/$wl.perf.data" --stdio --no-children --sort dso,sym -t '|' \
                >"$LOGDIR/${wl}_perf.txt" 2>/dev/null ||
            echo "   (perf record failed for $wl: see $LOGDIR/${wl}_perf_run.log)"
    done
fi

# shellcheck disable=SC2046 # wl_env's words are split on purpose
if [ "$DNNL_BREAKDOWN" = 1 ]; then
    # oneDNN's own per-primitive timings (both frameworks call the same libdnnl)
    for wl in $WORKLOADS; do
        ONEDNN_VERBOSE=1 env $(wl_env "$wl") "$BIN" --workload "$(wl_base "$wl")" --precision "$(wl_prec "$wl")" --threads "$THREADS" --warmup 1 --steps 3 \
            --budget-s "$CTRAIN_BUDGET_S" >"$LOGDIR/${wl}_ctrain_dnnl.txt" 2>&1 || true
        ONEDNN_VERBOSE=1 "${torch_env[@]}" "OPENBLAS_CORETYPE=$CORETYPE" "$PY" bench/torch_step.py --workload "$(wl_base "$wl")" \
            --precision "$(wl_prec "$wl")" --threads "$THREADS" --warmup 1 --steps 3 "${torch_args[@]}" >"$LOGDIR/${wl}_pytorch_dnnl.txt" 2>&1 || true
    done
fi

"$PY" bench/report.py main "$LOGDIR"
echo "logs: $LOGDIR"
