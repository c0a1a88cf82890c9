#!/usr/bin/env bash
# bench/e2e.sh - end to end: the full recipes trained to the end in ctrain
# (`ctrain train --recipe R`) and in PyTorch (bench/e2e_torch.py, the same
# recipe: model, init family, optimizer, schedule, batch, data, augmentation),
# same threads, alternating per workload; prints per-epoch (GPT: per eval
# interval) times side by side, training time, process wall time, the final
# test accuracy (GPT: val loss) and the ratio PyTorch time / ctrain time.
#
#   bench/e2e.sh                                 # mlp cnn gpt resnet18, 1 round (hours on 2 cores)
#   bench/e2e.sh --workloads "mlp cnn" --rounds 3
#   bench/e2e.sh --quick                         # a short variant of each, to check the script
#
# Workloads:
#   mlp       recipes/mnist_mlp.json (the demo, scripts/demo.sh): 6 epochs
#   cnn       recipes/fashion_cnn.json: 10 epochs
#   gpt       recipes/gpt_char_small.json with max_steps 500 (--gpt-steps), save_dir "" (no checkpoint)
#   resnet18  recipes/fashion_resnet18.json with epochs 1 on the Fashion-MNIST PNG folder
#             (scripts/export_imagefolder.py, made once into $BUILD/bench/fashion-mnist-png)
# Options:
#   --rounds N [1]          ctrain then PyTorch per workload (PyTorch first in even rounds); medians over rounds
#   --workloads "..."       [mlp cnn gpt resnet18]
#   --threads N [2]         ctrain threads=N; torch.set_num_threads(N); OMP_NUM_THREADS=N for both
#   --gpt-steps N [500]     the GPT's max_steps
#   --quick                 mlp, cnn: 1 epoch of 50 steps; gpt: 50 steps, eval every 25;
#                           resnet18: 1 epoch of a 2048 / 1000 image subset of the folder
#   --set KEY=VALUE         one more recipe key for both sides (repeatable); precision=bf16: ctrain's BF16
#                           autocast policy against PyTorch's CPU autocast (torch.autocast("cpu", bfloat16))
#   --no-torch / --no-ctrain  one side only
#   CT=build/ctrain (built when missing), BUILD=build-bench (logs, the PNG folders)
# PyTorch at its best: Debian's torch 1.13 (/usr/bin/python3) on the OpenMP OpenBLAS
# (LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp), OPENBLAS_CORETYPE=Haswell
# (SkylakeX on AVX-512 CPUs), torch.set_flush_denormal(True) (ctrain flushes subnormals by default).
# Logs: $BUILD/bench/logs/e2e-<date>/; bench/e2e_report.py DIR prints the tables again.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

ROUNDS=1 THREADS=2 WORKLOADS="mlp cnn gpt resnet18" GPT_STEPS=500 QUICK=0 DO_TORCH=1 DO_CT=1
EXTRA=()
BUILD=${BUILD:-build-bench}
CT=${CT:-build/ctrain}
PY=/usr/bin/python3
ARGS="$*"
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) ROUNDS=$2; shift ;;
    --threads) THREADS=$2; shift ;;
    --workloads) WORKLOADS=$2; shift ;;
    --gpt-steps) GPT_STEPS=$2; shift ;;
    --quick) QUICK=1 ;;
    --set) EXTRA+=("--set" "$2"); shift ;;
    --no-torch) DO_TORCH=0 ;;
    --no-ctrain) DO_CT=0 ;;
    -h | --help) sed -n '2,/^# Logs/p' "$SELF"; exit 0 ;;
    *) echo "e2e.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
    shift
done

# shellcheck disable=SC2034 # read by bench/lib.sh
BENCH=e2e
# shellcheck source=bench/lib.sh
. bench/lib.sh
bench_torch_env || exit 1
[ -x "$CT" ] || nice make -j2 "$CT" >/dev/null
LOG=$BUILD/bench/logs/e2e-$(date +%Y%m%d-%H%M%S)
mkdir -p "$LOG"
export OMP_NUM_THREADS=$THREADS

png_dir() { # the Fashion-MNIST PNG folder (quick: a subset), made once
    local d=$BUILD/bench/fashion-mnist-png
    local args=()
    [ "$QUICK" = 1 ] && d=$d-quick && args=(--train-count 2048 --val-count 1000)
    [ -d "$d/train" ] || "$PY" scripts/export_imagefolder.py --out "$d" "${args[@]}" >&2
    echo "$d"
}

wl_recipe() {
    case "$1" in
    mlp) echo recipes/mnist_mlp.json ;;
    cnn) echo recipes/fashion_cnn.json ;;
    gpt) echo recipes/gpt_char_small.json ;;
    resnet18) echo recipes/fashion_resnet18.json ;;
    *) echo "e2e.sh: unknown workload $1 (mlp cnn gpt resnet18)" >&2; return 1 ;;
    esac
}

wl_sets() { # the recipe keys e2e.sh sets for a workload, one --set KEY=VALUE per line pair
    local s=("threads=$THREADS")
    case "$1" in
    mlp | cnn) [ "$QUICK" = 1 ] && s+=(epochs=1 max_steps=50) ;;
    gpt)
        s+=("save_dir=")
        if [ "$QUICK" = 1 ]; then s+=(max_steps=50 eval_every=25); else s+=("max_steps=$GPT_STEPS"); fi ;;
    resnet18) s+=(epochs=1 "data_dir=$(png_dir)") ;;
    esac
    for kv in "${s[@]}"; do printf -- '--set\n%s\n' "$kv"; done
}

proc_busy() { awk '/^cpu / { printf "%d", $2 + $3 + $4 + $7 + $8 + $9 }' /proc/stat; }

# run LABEL OUTFILE cmd...: the command under /usr/bin/time, its wall time, own CPU time and the CPU the
# machine's other processes used meanwhile (cores) into OUTFILE.wall
timed_run() {
    local out=$1; shift
    local b0 t0 t1 b1 hz
    hz=$(getconf CLK_TCK)
    b0=$(proc_busy); t0=$(date +%s.%N)
    /usr/bin/time -f "TIME user=%U sys=%S" -o "$out.time" "$@" >"$out" 2>&1 || {
        tail -20 "$out"; echo "e2e.sh: failed: $*" >&2; return 1; }
    t1=$(date +%s.%N); b1=$(proc_busy)
    awk -v t0="$t0" -v t1="$t1" -v b0="$b0" -v b1="$b1" -v hz="$hz" -v load="$(cut -d' ' -f1 /proc/loadavg)" '
        /^TIME/ { split($2, u, "="); split($3, s, "="); own = u[2] + s[2] }
        END { w = t1 - t0; o = ((b1 - b0) / hz - own) / w; if (o < 0) o = 0
              printf "WALL wall=%.3f cpu=%.3f others_cores=%.2f load_end=%s\n", w, own, o, load }' "$out.time" >"$out.wall"
}

echo "== environment"
echo "date:     $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "cpu:      $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus online, avx512f=$(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)"
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at start"
echo "threads:  $THREADS per framework (ctrain threads=$THREADS, torch.set_num_threads($THREADS), OMP_NUM_THREADS)"
echo "ctrain:   $CT (subnormals flushed: its default)"
echo "pytorch:  $PY, ${BENCH_TORCH_ENV[*]}, torch.set_flush_denormal(True)"
echo "plan:     $ROUNDS round(s) of: $WORKLOADS$([ "$QUICK" = 1 ] && echo ' (--quick: short variants)')"
echo "logs:     $LOG"
{
    echo "cmd: bench/e2e.sh $ARGS"
    echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus"
    echo "threads: $THREADS quick: $QUICK gpt_steps: $GPT_STEPS rounds: $ROUNDS"
    echo "pytorch_env: ${BENCH_TORCH_ENV[*]}"
} >"$LOG/info.txt"

run_ct() { # workload round
    local r sets
    r=$(wl_recipe "$1")
    mapfile -t sets < <(wl_sets "$1")
    echo "ctrain train --recipe $r ${sets[*]} ${EXTRA[*]}" >"$LOG/$1.cmd"
    timed_run "$LOG/$1_ctrain_r$2.log" "$CT" train --recipe "$r" "${sets[@]}" "${EXTRA[@]}" \
        --set "metrics_file=$LOG/$1_ctrain_r$2.jsonl"
}
run_torch() { # workload round
    local r sets
    r=$(wl_recipe "$1")
    mapfile -t sets < <(wl_sets "$1")
    timed_run "$LOG/$1_torch_r$2.log" env "${BENCH_TORCH_ENV[@]}" "OMP_NUM_THREADS=$THREADS" "$PY" bench/e2e_torch.py \
        --recipe "$r" --threads "$THREADS" "${sets[@]}" "${EXTRA[@]}"
}
for wl in $WORKLOADS; do wl_recipe "$wl" >/dev/null; done
[ "$QUICK" = 1 ] || case " $WORKLOADS " in *" resnet18 "*) png_dir >/dev/null ;; esac
for r in $(seq 1 "$ROUNDS"); do
    for wl in $WORKLOADS; do
        if [ $((r % 2)) = 1 ]; then
            [ "$DO_CT" = 0 ] || { echo "   round $r: $wl ctrain ..."; run_ct "$wl" "$r"; }
            [ "$DO_TORCH" = 0 ] || { echo "   round $r: $wl pytorch ..."; run_torch "$wl" "$r"; }
        else
            [ "$DO_TORCH" = 0 ] || { echo "   round $r: $wl pytorch ..."; run_torch "$wl" "$r"; }
            [ "$DO_CT" = 0 ] || { echo "   round $r: $wl ctrain ..."; run_ct "$wl" "$r"; }
        fi
    done
done
echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min) at end"
"$PY" bench/e2e_report.py "$LOG" | tee "$LOG/report.txt"
