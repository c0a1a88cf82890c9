#!/usr/bin/env bash
# bench/ab.sh - one change's before / after on this machine: bench_step of A and B alternated round by round
# (a neighbour's load hits both sides alike), medians and the ratio side by side.
#   bench/ab.sh REV                          A = REV (built in a worktree), B = the working tree
#   bench/ab.sh . --env-b CT_X=1             A and B the same build (the working tree), B with CT_X=1
#   bench/ab.sh REV --env-a K=V --env-b K=V  both
# Options:
#   --workloads "mlp gptchar"   bench_step workloads (mlp cnn gptchar gpt2 resnet50)
#   --precision "fp32 bf16"     precisions
#   --rounds 3 --steps 5 --warmup 2 --threads 2
#   --args "..."                more bench_step arguments for both sides (e.g. "--eval-only", "--fusion-level 2")
#   --env-a "K=V ..." / --env-b "K=V ..."   environment of one side only
# Prints per workload and precision: A's and B's step_ms_median of every round, the medians and B / A (below 1:
# B is faster), and the loss of the last step on each side (a change that should not move the numbers shows the
# same loss). The worktree of REV is build-ab/<rev> (kept; `git worktree remove --force build-ab/<rev>` drops it).
# Logs: build-ab/logs/<date>/.
set -euo pipefail
cd "$(dirname "$0")/.."
REV='' WORKLOADS="mlp gptchar" PRECISIONS="fp32 bf16" ROUNDS=3 STEPS=5 WARMUP=2 THREADS=2 ARGS='' ENV_A='' ENV_B=''
die() { echo "bench/ab.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
  -h | --help) sed -n '2,/^# Logs/p' "$0"; exit 0 ;;
  --workloads | --precision | --rounds | --steps | --warmup | --threads | --args | --env-a | --env-b)
    [ $# -ge 2 ] || die "$1 needs a value (--help)"
    case "$1" in
    --workloads) WORKLOADS=$2 ;; --precision) PRECISIONS=$2 ;; --rounds) ROUNDS=$2 ;; --steps) STEPS=$2 ;;
    --warmup) WARMUP=$2 ;; --threads) THREADS=$2 ;; --args) ARGS=$2 ;; --env-a) ENV_A=$2 ;; --env-b) ENV_B=$2 ;;
    esac
    shift 2 ;;
  -*) die "unknown option $1 (--help)" ;;
  *) [ -z "$REV" ] || die "one revision only (--help)"; REV=$1; shift ;;
  esac
done
[ -n "$REV" ] || die "name the revision to compare with (a commit, or . for the working tree; --help)"
for n in "$ROUNDS" "$STEPS" "$WARMUP" "$THREADS"; do [[ $n =~ ^[0-9]+$ ]] || die "not a count: $n"; done

# B: the working tree's bench_step
make -j2 BUILD=build build/libctrain.a >/dev/null
make -C bench BUILD=build >/dev/null
B_BIN=build/bench/bench_step
A_BIN=$B_BIN A_NAME=working-tree
if [ "$REV" != . ]; then
  sha=$(git rev-parse --verify --quiet "$REV^{commit}") || die "no such commit: $REV"
  short=$(git rev-parse --short "$sha")
  wt=build-ab/$short
  if [ ! -d "$wt" ]; then
    mkdir -p build-ab
    git worktree add --detach "$wt" "$sha" >/dev/null 2>&1 || die "git worktree add $wt $sha failed"
  fi
  echo "building $short in $wt ..." >&2
  make -C "$wt" -j2 BUILD=build build/libctrain.a >/dev/null
  make -C "$wt/bench" BUILD=build >/dev/null
  A_BIN=$wt/build/bench/bench_step A_NAME=$short
fi
LOG=build-ab/logs/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$LOG"
echo "A: $A_NAME ${ENV_A:+($ENV_A)}   B: working tree $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo +changes) ${ENV_B:+($ENV_B)}"
echo "bench_step --steps $STEPS --warmup $WARMUP --threads $THREADS $ARGS; $ROUNDS rounds, A then B; logs: $LOG"

field() { sed -nE "s/^RESULT .*$1=([^ ]+).*/\1/p" "$2"; }
median() { tr ' ' '\n' | awk '$1 != ""' | sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)]; else print "-" }'; }
run_side() { # side bin env wl prec round
  local log=$LOG/$4-$5-$1-$6.txt
  # shellcheck disable=SC2086 # the env and args lists split on spaces
  env $3 "$2" --workload "$4" --precision "$5" --steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS" --quiet \
    --mfu-steps 0 $ARGS >"$log" 2>&1 || { echo "bench/ab.sh: side $1 failed ($log):" >&2; tail -3 "$log" >&2; return 1; }
  echo "$log"
}

printf '%-10s %-5s | %-30s | %-30s | %8s %8s %6s | %s\n' workload prec "A ms per step" "B ms per step" "A med" "B med" "B/A" \
  "last loss A / B"
for wl in $WORKLOADS; do
  for prec in $PRECISIONS; do
    a_ms='' b_ms='' a_loss='' b_loss=''
    for r in $(seq 1 "$ROUNDS"); do
      la=$(run_side A "$A_BIN" "$ENV_A" "$wl" "$prec" "$r") || exit 1
      lb=$(run_side B "$B_BIN" "$ENV_B" "$wl" "$prec" "$r") || exit 1
      a_ms+=" $(field step_ms_median "$la")" b_ms+=" $(field step_ms_median "$lb")"
      a_loss=$(field loss_last "$la") b_loss=$(field loss_last "$lb")
    done
    am=$(echo "$a_ms" | median) bm=$(echo "$b_ms" | median)
    ratio=$(awk -v a="$am" -v b="$bm" 'BEGIN { if (a > 0 && b > 0) printf "%.3f", b / a; else print "-" }')
    printf '%-10s %-5s | %-30s | %-30s | %8s %8s %6s | %s / %s\n' "$wl" "$prec" "${a_ms# }" "${b_ms# }" "$am" "$bm" \
      "$ratio" "$a_loss" "$b_loss"
  done
done
