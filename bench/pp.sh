#!/usr/bin/env bash
# bench/pp.sh - pipeline parallel (GPipe, 1F1B, interleaved 1F1B) against tensor parallel and data parallel on
# the same 2 ranks x 1 thread (mpirun -np 2; docs/distributed.md, "Choosing a layout"). Workload: gpt2-124m
# (GPT-2 BPE, moby-dick), the same recipe and the same tokens per step for every layout: M micro-batches
# (accumulate_steps = micro_batches = M) of BATCH rows x CONTEXT tokens each. Rows, for each M:
#   pp gpipe | pp 1f1b | pp interleaved (virtual_stages 2)   pipeline_stages 2
#   tp 2                                                     tensor_parallel 2
#   dp 2                                                     data parallel (BATCH rows split over the 2 ranks)
# For each row: the step time (the mean of the steps after the first), the bubble measured and ideal (the
# "pipeline (rank 0)" summary line; "-" for tp/dp), MiB sent per step (pipeline: the summary's "MiB sent" /
# steps, which includes the tied embedding's gradient between the first and last stage; tp: the tensor group's
# collectives' MiB / steps; dp: the gradient allreduce's payload, n_params x 4 bytes, once a step), what one
# rank holds (parameters + gradients + optimizer state + activations in flight, from the header; pipeline:
# rank 0 = stage 0) and the done line's peak memory. Layouts alternate within a round; the table shows the
# median over the rounds.
#
#   bench/pp.sh                              # M = 4 8 16, 1 round: 15 runs
#   bench/pp.sh --micro "4 8" --rounds 3
#   bench/pp.sh --micro 8 --layouts "1f1b 1f1b@9"   # the default split against stage 1 starting at block 9
#   bench/pp.sh --netns 1gbit                # the two ranks on two "hosts": network namespaces joined by a
#                                            # veth link limited to 1 Gbit/s (scripts/netns_mpirun.sh; root)
# Time (2-core Zen 3 shared with other jobs, load 3-5, 2026-12-03): each run spends ~25-30 s starting (GPT-2
# BPE over moby-dick, 124M parameters initialised) plus STEPS steps; with the defaults (context 32, batch 2,
# 3 steps) one run of M = 4 takes ~55 s, M = 16 ~70 s: the default 15 rows ~15 minutes (M = 4: 4.5 min,
# M = 8: 4.6 min with 6 layouts, M = 16: 7 min with 6 layouts); over --netns ~20% less (the ranks start in
# parallel).
# Options (or the environment variable in brackets):
#   --rounds N [ROUNDS=1]   --micro "4 8 16" [MICRO]   --steps N [STEPS=3]
#   --context N [CONTEXT=32] --batch N [BATCH=2] (rows per micro-batch; even: data parallel splits it)
#   --layouts "gpipe 1f1b interleaved tp dp" [LAYOUTS]; SCHEDULE@N: that schedule with pipeline_split N (stage 1
#     starts at block N), e.g. 1f1b@9: stage 0 gets 9 blocks, stage 1 3 blocks + the LM head
#   --precision fp32|bf16 [PRECISION=fp32]
#   CT=build/ctrain (built if missing)   --netns RATE [NETNS]
# Logs: build/bench-pp/<date>/ (one log per run, and table.txt).
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

ROUNDS=${ROUNDS:-1}
MICRO=${MICRO:-"4 8 16"}
STEPS=${STEPS:-3}
CONTEXT=${CONTEXT:-32}
BATCH=${BATCH:-2}
LAYOUTS=${LAYOUTS:-"gpipe 1f1b interleaved tp dp"}
PRECISION=${PRECISION:-fp32}
CT=${CT:-build/ctrain}
NETNS=${NETNS:-}
BENCH=pp
# shellcheck source=bench/lib.sh
. bench/lib.sh
while [ $# -gt 0 ]; do
  case "$1" in
  --micro) MICRO=$2; shift ;;
  --layouts) LAYOUTS=$2; shift ;;
  *) bench_opt "$@" || bench_die "unknown option $1 (--help)"; shift ;;
  esac
  shift
done
[ "$STEPS" -ge 2 ] || bench_die "--steps must be >= 2 (the first step is not timed)"
[ $((BATCH % 2)) = 0 ] || bench_die "--batch must be even (data parallel splits it over 2 ranks)"
bench_setup

recipe_args() { # M -> ctrain train arguments (without the layout)
  echo "--model gpt --set preset=gpt2-124m --set dataset=moby-dick --set tokenizer=gpt2 --set context=$CONTEXT
        --batch-size $BATCH --set accumulate_steps=$1 --set optimizer.name=adamw --set clip_grad_norm=1 --dropout 0
        --set zero_stage=0 --set precision=$PRECISION --max-steps $STEPS --set eval_every=0 --set eval_batches=1
        --set threads=1 --set log_every=1 --set save_dir="
}

layout_args() {
  case "$1" in
  gpipe | 1f1b | interleaved) echo "--set pipeline_stages=2 --set pipeline_schedule=$1" ;;
  *@*) echo "--set pipeline_stages=2 --set pipeline_schedule=${1%@*} --set pipeline_split=${1#*@}" ;;
  tp) echo "--set tensor_parallel=2" ;;
  dp) echo "" ;;
  *) echo "bench/pp.sh: unknown layout $1 (gpipe 1f1b interleaved tp dp)" >&2; exit 2 ;;
  esac
}

layout_name() {
  case "$1" in
  gpipe | 1f1b | interleaved) echo "pipeline 2, $1" ;;
  *@*) echo "pipeline 2, ${1%@*} split ${1#*@}" ;;
  tp) echo "tensor parallel 2" ;;
  dp) echo "data parallel 2" ;;
  esac
}

# one run -> "ms/step bubble-measured bubble-ideal MiB-sent/step state-MiB/rank activations-MiB/rank peak-MiB"
measure() { # layout M round
  local lay=$1 m=$2 r=$3 log
  log=$LOG/$lay-m$m-$r.log
  # shellcheck disable=SC2046
  bench_launch "$log" 2 "$CT" train $(recipe_args "$m") $(layout_args "$lay") ||
    { echo "bench/pp.sh: $lay M=$m failed: $(tail -3 "$log" | tr '\n' ' ')" >&2; echo "- - - - - - -"; return; }
  local ms bm bi sent st act peak
  ms=$(bench_ms_mean "$log")  # the steps after the first
  bm=- bi=-
  case "$lay" in
  gpipe | 1f1b | interleaved | *@*)
    read -r sent bm bi < <(sed -nE 's/^pipeline \(rank 0\): ([0-9.]+) MiB sent.*bubble ([0-9.]+)% measured.*, ([0-9.]+)% ideal.*/\1 \2 \3/p' "$log" |
      awk -v s="$STEPS" '{ printf "%.1f %s %s\n", $1 / s, $2, $3 }') || true ;;
  tp)
    sent=$(sed -nE 's/^tensor parallel \(rank 0\): [0-9]+ collectives in the tensor group \(([0-9.]+) MiB\).*/\1/p' "$log" |
      awk -v s="$STEPS" '{ printf "%.1f", $1 / s }') ;;
  dp) # one allreduce of all the gradients per optimizer step (the header's payload)
    sent=$(sed -nE 's/^  data parallel: .*gradients \(([0-9.]+) MiB\) averaged.*/\1/p; s/^  data parallel: .* of ([0-9.]+) MiB per step.*/\1/p' "$log" | head -1) ;;
  esac
  st=$(bench_header_state "$log" | awk '{ printf "%.1f", $1 + $2 + $3 }')
  act=$(bench_header_act "$log")
  # pipeline: stage 0's activations times the micro-batches it holds in flight
  case "$lay" in gpipe | 1f1b | interleaved | *@*)
    act=$(sed -nE 's/^  stage 0: .* = ([0-9.]+) MiB$/\1/p' "$log" | head -1) ;;
  esac
  peak=$(sed -nE 's/^done: .*peak memory ([0-9.]+) MiB.*/\1/p' "$log")
  echo "${ms:--} ${bm:--} ${bi:--} ${sent:--} ${st:--} ${act:--} ${peak:--}"
}

{
  echo "bench/pp.sh: gpt2-124m, 2 ranks x 1 thread, $PRECISION, M micro-batches of $BATCH x $CONTEXT tokens per step," \
    "$STEPS steps per run, $ROUNDS round(s)${NETNS:+, two network namespaces at $NETNS}; logs in $LOG"
  printf '%-3s %-26s %9s %16s %11s %15s %15s %9s\n' M layout "ms/step" "bubble meas/ideal" "MiB sent/step" \
    "state MiB/rank" "activ MiB/rank" "peak MiB"
} | tee "$LOG/table.txt"
for m in $MICRO; do
  declare -A R=()
  for r in $(seq 1 "$ROUNDS"); do
    for lay in $LAYOUTS; do R[$lay-$r]=$(measure "$lay" "$m" "$r"); done
  done
  for lay in $LAYOUTS; do
    vals=()
    for c in 1 2 3 4 5 6 7; do
      vals+=("$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$lay-$r]}" | cut -d' ' -f$c; done | bench_median)")
    done
    bub=-
    [ "${vals[1]}" != - ] && bub="${vals[1]}% / ${vals[2]}%"
    printf '%-3s %-26s %9s %16s %11s %15s %15s %9s\n' "$m" "$(layout_name "$lay")" "${vals[0]}" "$bub" "${vals[3]}" \
      "${vals[4]}" "${vals[5]}" "${vals[6]}" | tee -a "$LOG/table.txt"
  done
  unset R
done
