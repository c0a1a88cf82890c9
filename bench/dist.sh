#!/usr/bin/env bash
# bench/dist.sh - data parallel communication (docs/distributed.md): the
# seeds' table of issue 13 on this machine. For each workload, 2 ranks x 1
# thread (mpirun -np 2), four settings of the gradient reduction:
#   baseline       bucket_size_mb 0, overlap_communication false: one
#                  allreduce of every gradient after backward
#   buckets        bucket_size_mb 25 (a 1 MiB first bucket), after backward
#   + overlap      each bucket's allreduce started as soon as its gradients
#                  are final, progressed by the communication thread
#                  (comm_progress thread; "+ overlap (hook)": by MPI_Test at
#                  each gradient instead, no thread)
#   + bf16         the same, gradients sent as bf16 with error feedback
# Each run profiles steps 4-13 (gptchar: 4-7; profile_dir): samples/s (tokens/s for GPT)
# from the recorded steps' mean time, and the communication share = the
# time the step was blocked waiting for the gradients ("comm" events) over
# the step time, as `ctrain doctor` computes it. Settings alternate within a
# round; the table shows the median over the rounds.
#
#   bench/dist.sh                       # mlp and gptchar, 3 rounds
#   bench/dist.sh --rounds 5 --workloads mlp
# Options (or the environment variable in brackets):
#   --rounds N [ROUNDS=3]   --workloads "mlp gptchar" [WORKLOADS]   --ranks N [RANKS=2]
#   --bucket-mb X [BUCKET_MB=25]        CT=build/ctrain (built if missing)
#   --no-torch [TORCH=0]    skip PyTorch DDP on the MLP (bench/dist_torch.py, /usr/bin/python3, gloo)
#   --netns RATE [NETNS]    the ranks on two "hosts": half in each of two network namespaces joined by a
#                           veth link limited to RATE (e.g. 1gbit, 10gbit), over TCP (scripts/netns_mpirun.sh;
#                           root; PyTorch DDP is skipped there)
# Logs: build/bench-dist/<date>/.
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

ROUNDS=${ROUNDS:-3}
WORKLOADS=${WORKLOADS:-"mlp gptchar"}
RANKS=${RANKS:-2}
BUCKET_MB=${BUCKET_MB:-25}
CT=${CT:-build/ctrain}
TORCH=${TORCH:-1}
NETNS=${NETNS:-}
while [ $# -gt 0 ]; do
  case "$1" in
  --rounds) ROUNDS=$2; shift ;;
  --workloads) WORKLOADS=$2; shift ;;
  --ranks) RANKS=$2; shift ;;
  --bucket-mb) BUCKET_MB=$2; shift ;;
  --no-torch) TORCH=0 ;;
  --netns) NETNS=$2; TORCH=0; shift ;;
  -h | --help) sed -n '2,/^# Logs/p' "$SELF"; exit 0 ;;
  *) echo "bench/dist.sh: unknown option $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
command -v mpirun >/dev/null || { echo "bench/dist.sh: mpirun is not installed (scripts/setup.sh)" >&2; exit 2; }
[ -x "$CT" ] || nice make -j2 "$CT" >/dev/null
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
LOG=build/bench-dist/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$LOG"

SETTINGS=("baseline" "buckets" "+ overlap" "+ overlap (hook)" "+ bf16")
setting_args() {
  case "$1" in
  0) echo "--set bucket_size_mb=0 --set overlap_communication=false" ;;
  1) echo "--set bucket_size_mb=$BUCKET_MB --set overlap_communication=false" ;;
  2) echo "--set bucket_size_mb=$BUCKET_MB --set comm_progress=thread" ;;
  3) echo "--set bucket_size_mb=$BUCKET_MB --set comm_progress=hook" ;;
  4) echo "--set bucket_size_mb=$BUCKET_MB --set comm_progress=thread --set grad_compression=bf16" ;;
  esac
}
workload_args() {
  case "$1" in
  mlp) echo "--recipe recipes/mnist_mlp.json --max-steps 16" ;;
  gptchar) echo "--recipe recipes/gpt_char_small.json --max-steps 7 --set eval_every=0 --set eval_batches=1 --save-every 0 --save-dir $LOG/ck" ;;
  *) echo "bench/dist.sh: unknown workload $1 (mlp, gptchar)" >&2; exit 2 ;;
  esac
}

# one run -> "samples_per_s comm_share_percent step_ms"
run_one() { # workload setting round
  local w=$1 k=$2 r=$3 dir="$LOG/$1-s$2-r$3"
  # shellcheck disable=SC2046
  local launch=(mpirun --bind-to none -np "$RANKS")
  [ -n "$NETNS" ] && launch=(scripts/netns_mpirun.sh -n $((RANKS / 2)) --rate "$NETNS" --)
  timeout -k 5 900 "${launch[@]}" "$CT" train $(workload_args "$w") $(setting_args "$k") \
    --threads 1 --set log_every=1000 --profile "$dir" >"$dir.log" 2>&1 || { echo "nan nan nan"; return; }
  /usr/bin/python3 - "$dir/trace.json" "$dir.log" <<'EOF'
import json, re, sys
t = json.load(open(sys.argv[1]))
ev = [e for e in t["traceEvents"] if e.get("ph") == "X"]
steps = [e["dur"] for e in ev if e.get("cat") == "step"]
comm = sum(e["dur"] for e in ev if e.get("cat") == "comm")
log = open(sys.argv[2]).read()
m = re.search(r"global batch (\d+)", log)
rows = int(m.group(1))
m = re.search(r"(\d+) params", log)
unit = 1
m = re.search(r'"context":(\d+)', log)
if '"model":"gpt"' in log and m: unit = int(m.group(1))
ms = sum(steps) / len(steps) / 1e3
print("%.1f %.1f %.1f" % (rows * unit / (ms / 1e3), 100.0 * comm / sum(steps), ms))
EOF
}

declare -A RES
for r in $(seq 1 "$ROUNDS"); do
  for w in $WORKLOADS; do
    for k in 0 1 2 3 4; do
      v=$(run_one "$w" "$k" "$r")
      RES[$w,$k]="${RES[$w,$k]:-} $v"
      echo "  round $r $w ${SETTINGS[$k]}: $v (samples/s, comm %, ms/step)" >&2
    done
    # PyTorch DDP on the same MLP in the same round (bench/dist_torch.py; gloo, its own 25 MiB buckets)
    if [ "$w" = mlp ] && [ "$TORCH" = 1 ]; then
      CT_BENCH_PORT=$((29500 + r)) timeout -k 5 900 /usr/bin/python3 bench/dist_torch.py "$RANKS" >"$LOG/torch-r$r.log" 2>&1 || true
      for t in ddp ddp+fp16; do
        v=$(awk -v t="$t" '$1 == "torch-ddp" && $2 == t { print $3, "-", $4 }' "$LOG/torch-r$r.log")
        RES[$w,$t]="${RES[$w,$t]:-} ${v:-nan - nan}"
        echo "  round $r $w torch $t: ${v:-failed, see $LOG/torch-r$r.log}" >&2
      done
    fi
  done
done

median() { tr ' ' '\n' | awk '$1 != "" && $1 != "-"' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else print a[int((NR + 1) / 2)] }'; }
{
  echo
  echo "data parallel, $RANKS ranks x 1 thread on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), median of $ROUNDS rounds${NETNS:+, across two network namespaces at $NETNS (scripts/netns_mpirun.sh)}"
  echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '| %-8s | %-18s | %12s | %9s | %11s |\n' workload setting "samples/s*" "ms/step" "comm share"
  printf '|----------|--------------------|-------------:|----------:|------------:|\n'
  for w in $WORKLOADS; do
    keys="0 1 2 3 4"; [ "$w" = mlp ] && [ "$TORCH" = 1 ] && keys="$keys ddp ddp+fp16"
    for k in $keys; do
      vals=${RES[$w,$k]:-}
      case "$k" in
      ddp) name="PyTorch DDP (gloo)" ;;
      ddp+fp16) name="PyTorch DDP + fp16" ;;
      *) name=${SETTINGS[$k]} ;;
      esac
      sps=$(echo "$vals" | awk '{ for (i = 1; i <= NF; i += 3) printf "%s ", $i }' | median)
      com=$(echo "$vals" | awk '{ for (i = 2; i <= NF; i += 3) printf "%s ", $i }' | median)
      ms=$(echo "$vals" | awk '{ for (i = 3; i <= NF; i += 3) printf "%s ", $i }' | median)
      [ "$com" = nan ] && com="n/a " || com="$com%"
      printf '| %-8s | %-18s | %12s | %9s | %11s |\n' "$w" "$name" "$sps" "$ms" "$com"
    done
  done
  echo "* samples/s; gptchar: tokens/s. comm share: the step's wait for its gradients over the step time"
  echo "  (the doctor's KPI), from each run's trace; PyTorch's is not measured (n/a)."
  echo "(logs and traces: $LOG)"
} | tee "$LOG/table.md"
