#!/usr/bin/env bash
# bench/tp.sh - tensor parallel against data parallel on the same ranks (docs/distributed.md): 2 ranks x 1
# thread (mpirun -np 2), the same recipe and global batch, tensor_parallel 2 (the model split) against
# tensor_parallel 1 (data parallel: the model replicated). For each workload and layout it prints the step time
# (the mean of the steps after the first), the communication share (the tensor group's
# collectives, or the gradient allreduce's blocked time, over the training time) and what one rank holds
# (parameters + gradients + optimizer state + activations, from the run header). Layouts alternate within a
# round; the table shows the median over the rounds. Tensor parallel's model state per rank should be about
# half of data parallel's.
#
#   bench/tp.sh                              # gpt2 (gpt2-124m, GPT-2 BPE) and gpt3 (recipes/gpt3_style.json), 1 round
#   bench/tp.sh --workloads gpt2 --rounds 3
#   bench/tp.sh --netns 10gbit               # the two ranks on two "hosts": network namespaces joined by a
#                                            # veth link limited to 10 Gbit/s (scripts/netns_mpirun.sh; root)
# Options (or the environment variable in brackets):
#   --rounds N [ROUNDS=1]   --workloads "gpt2 gpt3" [WORKLOADS]   --steps N [STEPS=6]
#   --context N [CONTEXT=128] --batch N [BATCH=4] (global batch; gpt3 uses CONTEXT/2 and BATCH/2)
#   --precision fp32|bf16 [PRECISION=fp32]   CT=build/ctrain (built if missing)
#   --netns RATE [NETNS]
# Logs: build/bench-tp/<date>/.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

ROUNDS=${ROUNDS:-1}
WORKLOADS=${WORKLOADS:-"gpt2 gpt3"}
STEPS=${STEPS:-6}
CONTEXT=${CONTEXT:-128}
BATCH=${BATCH:-4}
PRECISION=${PRECISION:-fp32}
CT=${CT:-build/ctrain}
NETNS=${NETNS:-}
BENCH=tp
# shellcheck source=bench/lib.sh
. bench/lib.sh
while [ $# -gt 0 ]; do
  case "$1" in
  --workloads) WORKLOADS=$2; shift ;;
  *) bench_opt "$@" || bench_die "unknown option $1 (--help)"; shift ;;
  esac
  shift
done
bench_setup

recipe_args() { # workload -> ctrain train arguments (without the layout)
  case "$1" in
  gpt2) echo "--model gpt --set preset=gpt2-124m --set dataset=moby-dick --set tokenizer=gpt2 --set context=$CONTEXT
              --batch-size $BATCH --set optimizer.name=adamw --set clip_grad_norm=1 --dropout 0" ;;
  gpt3) echo "--recipe recipes/gpt3_style.json --set context=$((CONTEXT / 2)) --batch-size $((BATCH / 2))
              --set accumulate_steps=1 --set recompute_blocks=4" ;;
  *) echo "bench/tp.sh: unknown workload $1 (gpt2, gpt3)" >&2; exit 2 ;;
  esac
}

# one run: ms/step, comm %, per-rank MiB (model state = params + grads + optimizer), activations MiB
measure() { # workload layout(tp|dp) round
  local w=$1 lay=$2 r=$3 tp=1 log
  [ "$lay" = tp ] && tp=2
  log=$LOG/$w-$lay-$r.log
  # shellcheck disable=SC2046
  bench_launch "$log" 2 "$CT" train $(recipe_args "$w") --set tensor_parallel=$tp --set zero_stage=0 --set precision=$PRECISION \
    --max-steps "$STEPS" --set eval_every=0 --set eval_batches=1 --set threads=1 --set log_every=1 --set save_dir= ||
    { echo "bench/tp.sh: $w $lay failed: $(tail -3 "$log")" >&2; echo "- - - -"; return; }
  local ms comm mem act
  ms=$(bench_ms_mean "$log")  # the steps after the first
  if [ "$tp" = 2 ]; then comm=$(sed -nE 's/^tensor parallel \(rank 0\): .*inside them \(([0-9.]+)%.*/\1/p' "$log")
  else comm=$(sed -nE 's/^communication share \(rank 0\): ([0-9.]+)% .*/\1/p' "$log"); fi
  mem=$(bench_header_state "$log" | awk '{ printf "%.1f", $1 + $2 + $3 }')
  act=$(bench_header_act "$log")
  echo "${ms:--} ${comm:--} ${mem:--} ${act:--}"
}

echo "bench/tp.sh: 2 ranks x 1 thread, $PRECISION, $STEPS steps per run, $ROUNDS round(s)${NETNS:+, two network namespaces at $NETNS}; logs in $LOG"
printf '%-6s %-16s %10s %8s %22s %16s\n' workload layout "ms/step" "comm %" "model state MiB/rank" "activations MiB"
for w in $WORKLOADS; do
  declare -A R=()
  for r in $(seq 1 "$ROUNDS"); do
    for lay in dp tp; do R[$lay-$r]=$(measure "$w" "$lay" "$r"); done
  done
  for lay in dp tp; do
    vals=()
    for c in 1 2 3 4; do
      vals+=("$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$lay-$r]}" | cut -d' ' -f$c; done | bench_median)")
    done
    name=$([ "$lay" = tp ] && echo "tensor_parallel 2" || echo "data parallel 2")
    printf '%-6s %-16s %10s %8s %22s %16s\n' "$w" "$name" "${vals[0]}" "${vals[1]}" "${vals[2]}" "${vals[3]}"
    eval "M_$lay=${vals[2]}"
  done
  awk -v a="$M_tp" -v b="$M_dp" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "       tensor parallel model state per rank: %.2f of data parallel'"'"'s\n", a / b }'
  unset R
done
