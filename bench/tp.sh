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
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift ;;
  --workloads) WORKLOADS=$2; shift ;;
  --steps) STEPS=$2; shift ;;
  --context) CONTEXT=$2; shift ;;
  --batch) BATCH=$2; shift ;;
  --precision) PRECISION=$2; shift ;;
  --netns) NETNS=$2; shift ;;
  -h | --help) sed -n '2,/^# Logs/p' "$SELF"; exit 0 ;;
  *) echo "bench/tp.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
command -v mpirun >/dev/null || { echo "bench/tp.sh: mpirun is not installed (scripts/setup.sh)" >&2; exit 2; }
[ -x "$CT" ] || nice make -j2 "$CT" >/dev/null
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
LOG=build/bench-tp/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$LOG"

recipe_args() { # workload -> ctrain train arguments (without the layout)
  case "$1" in
  gpt2) echo "--model gpt --set preset=gpt2-124m --set dataset=moby-dick --set tokenizer=gpt2 --set context=$CONTEXT
              --batch-size $BATCH --set optimizer.name=adamw --set clip_grad_norm=1 --dropout 0" ;;
  gpt3) echo "--recipe recipes/gpt3_style.json --set context=$((CONTEXT / 2)) --batch-size $((BATCH / 2))
              --set accumulate_steps=1 --set recompute_blocks=4" ;;
  *) echo "bench/tp.sh: unknown workload $1 (gpt2, gpt3)" >&2; exit 2 ;;
  esac
}

launch() { # log, args...: 2 ranks, on one host or two network namespaces
  local log=$1
  shift
  if [ -n "$NETNS" ]; then
    CT_NETNS_RATE=$NETNS timeout -k 10 3600 scripts/netns_mpirun.sh -n 1 -- --bind-to none "$@" >"$log" 2>&1
  else
    timeout -k 10 3600 mpirun --bind-to none -np 2 "$@" >"$log" 2>&1
  fi
}

# one run: ms/step, comm %, per-rank MiB (model state = params + grads + optimizer), activations MiB
measure() { # workload layout(tp|dp) round
  local w=$1 lay=$2 r=$3 tp=1 log
  [ "$lay" = tp ] && tp=2
  log=$LOG/$w-$lay-$r.log
  # shellcheck disable=SC2046
  launch "$log" "$CT" train $(recipe_args "$w") --set tensor_parallel=$tp --set zero_stage=0 --set precision=$PRECISION \
    --max-steps "$STEPS" --set eval_every=0 --set eval_batches=1 --set threads=1 --set log_every=1 --set save_dir= ||
    { echo "bench/tp.sh: $w $lay failed: $(tail -3 "$log")" >&2; echo "- - - -"; return; }
  local ms comm mem act
  # the progress lines' ms/step is the mean since the start: the steps after the first (warm-up: first-use
  # allocations, oneDNN primitives) are (N x last - first) / (N - 1)
  ms=$(sed -nE 's/^  step ([0-9]+)\/[0-9]+ .* ([0-9.]+) ms\/step.*/\1 \2/p' "$log" |
    awk 'NR == 1 { f = $2 } { n = $1; l = $2 } END { if (n > 1) printf "%.0f", (n * l - f) / (n - 1) }')
  if [ "$tp" = 2 ]; then comm=$(sed -nE 's/^tensor parallel \(rank 0\): .*inside them \(([0-9.]+)%.*/\1/p' "$log")
  else comm=$(sed -nE 's/^communication share \(rank 0\): ([0-9.]+)% .*/\1/p' "$log"); fi
  mem=$(sed -nE 's/.*per rank: ([0-9.]+) MiB parameters \+ ([0-9.]+) MiB gradients \+ ([0-9.]+) MiB optimizer state.*/\1 \2 \3/p' "$log" |
    awk '{ printf "%.1f", $1 + $2 + $3 }')
  act=$(sed -nE 's/.*MiB optimizer state \+ ([0-9.]+) MiB activations.*/\1/p' "$log")
  echo "${ms:--} ${comm:--} ${mem:--} ${act:--}"
}

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0 || a[1] == "-") print "-"; else print a[int((NR + 1) / 2)] }'; }

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
      vals+=("$(for r in $(seq 1 "$ROUNDS"); do echo "${R[$lay-$r]}" | cut -d' ' -f$c; done | median)")
    done
    name=$([ "$lay" = tp ] && echo "tensor_parallel 2" || echo "data parallel 2")
    printf '%-6s %-16s %10s %8s %22s %16s\n' "$w" "$name" "${vals[0]}" "${vals[1]}" "${vals[2]}" "${vals[3]}"
    eval "M_$lay=${vals[2]}"
  done
  awk -v a="$M_tp" -v b="$M_dp" 'BEGIN { if (a != "-" && b != "-" && b > 0) printf "       tensor parallel model state per rank: %.2f of data parallel'"'"'s\n", a / b }'
  unset R
done
