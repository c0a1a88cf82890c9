#!/usr/bin/env bash
# bench/zero.sh - ZeRO memory and step time (docs/distributed.md, ZeRO): gpt2-124m (GPT-2 BPE, moby-dick), AdamW,
# clip_grad_norm 1, FP32, BATCH rows x CONTEXT tokens per rank (global batch BATCH x ranks), 1 thread per rank,
# against PyTorch on the same ranks in the same round (bench/zero_torch.py, Debian's python3-torch over gloo,
# launched by the same mpirun). Layouts, each at 2 and 4 ranks:
#   dp  zero_stage 0   | PyTorch DDP
#   z1  zero_stage 1   | DDP + ZeroRedundancyOptimizer
#   z2  zero_stage 2   | FSDP SHARD_GRAD_OP
#   z3  zero_stage 3   | FSDP FULL_SHARD    (run when ctrain accepts zero_stage 3, else "not supported")
# When FSDP cannot run (torch 1.13 under Python 3.11: its import fails), the error is printed verbatim and the
# z2 / z3 rows compare with the round's DDP run ("DDP*").
# Per row: the peak RSS per rank (VmHWM: /usr/bin/time's maximum resident set of every rank's process; the
# table shows the largest rank, the log every rank), the median step time of the steps after the first two
# (ctrain: the metrics log's step times; PyTorch: its own), ctrain's model state per rank (parameters +
# gradients + optimizer state, the header's "per rank:" line) and the ratios ctrain / PyTorch. Then ZeRO-2's
# gradient peak as a share of DP's (the header's gradients per rank; issue 31's target: <= 60% at 2 ranks) and
# ZeRO-3's model state per rank against DP's (target about 1/N + one block). Runs with more ranks than cores
# (4 ranks on 2 cores) do MEMSTEPS steps: memory only, their times are marked * (not meaningful).
#
#   bench/zero.sh                          # dp z1 z2 z3 at 2 and 4 ranks, 1 round: ~10 min on 2 cores
#   bench/zero.sh --ranks 2 --layouts "dp z2" --steps 8
#   bench/zero.sh --no-torch               # ctrain only
# Options (or the environment variable in brackets):
#   --rounds N [ROUNDS=1]   --steps N [STEPS=6] (>= 3; the median of steps 3..N)   --memsteps N [MEMSTEPS=2]
#   --context N [CONTEXT=64] --batch N [BATCH=2] (rows per rank)   --ranks "2 4" [RANKS]
#   --layouts "dp z1 z2 z3" [LAYOUTS]   --precision fp32|bf16 [PRECISION=fp32] (ctrain only)
#   --no-torch [TORCH=0]   CT=build/ctrain (built if missing)
#   --netns RATE [NETNS]   the ranks in two network namespaces (scripts/netns_mpirun.sh; root); PyTorch skipped
# Logs: build/bench-zero/<date>/ (one log per run, per-rank RSS files, table.txt).
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."

ROUNDS=${ROUNDS:-1}
STEPS=${STEPS:-6}
MEMSTEPS=${MEMSTEPS:-2}
CONTEXT=${CONTEXT:-64}
BATCH=${BATCH:-2}
RANKS=${RANKS:-"2 4"}
LAYOUTS=${LAYOUTS:-"dp z1 z2 z3"}
PRECISION=${PRECISION:-fp32}
TORCH=${TORCH:-1}
CT=${CT:-build/ctrain}
NETNS=${NETNS:-}
BENCH=zero
# shellcheck source=bench/lib.sh
. bench/lib.sh
while [ $# -gt 0 ]; do
  case "$1" in
  --memsteps) MEMSTEPS=$2; shift ;;
  --ranks) RANKS=$2; shift ;;
  --layouts) LAYOUTS=$2; shift ;;
  --no-torch) TORCH=0 ;;
  *) bench_opt "$@" || bench_die "unknown option $1 (--help)"; shift ;;
  esac
  shift
done
[ "$STEPS" -ge 3 ] || bench_die "--steps must be >= 3 (the first two steps are not timed)"
[ "$MEMSTEPS" -ge 1 ] || bench_die "--memsteps must be >= 1"
[ -x /usr/bin/time ] || bench_die "/usr/bin/time is missing (Debian package time): it measures each rank's peak RSS"
[ -n "$NETNS" ] && TORCH=0
for lay in $LAYOUTS; do case "$lay" in dp | z1 | z2 | z3) ;; *) bench_die "unknown layout $lay (dp z1 z2 z3)" ;; esac; done
bench_setup
if [ "$TORCH" = 1 ]; then bench_torch_env || TORCH=0; fi
CORES=$(nproc)

stage() { case "$1" in dp) echo 0 ;; z1) echo 1 ;; z2) echo 2 ;; z3) echo 3 ;; esac; }
torch_mode() { case "$1" in dp) echo ddp ;; z1) echo ddp-zero1 ;; z2) echo fsdp-grad-op ;; z3) echo fsdp-full ;; esac; }
torch_name() {
  case "$1" in
  ddp) echo "DDP" ;; ddp-zero1) echo "DDP+ZeroRedundancyOpt" ;; fsdp-grad-op) echo "FSDP SHARD_GRAD_OP" ;;
  fsdp-full) echo "FSDP FULL_SHARD" ;; ddp*) echo "DDP*" ;;
  esac
}
steps_for() { if [ "$1" -gt "$CORES" ]; then echo "$MEMSTEPS"; else echo "$STEPS"; fi; }

# every rank runs under /usr/bin/time, which writes its maximum resident set (KiB) into PREFIX.rank<R>
# shellcheck disable=SC2016 # expanded by the rank's bash
RSS_WRAP=(bash -c 'exec /usr/bin/time -f %M -o "$0.rank$OMPI_COMM_WORLD_RANK" "$@"')
# (a rank that failed has "Command exited with non-zero status N" before the number)
rss_max() { cat "$1".rank* 2>/dev/null | awk '/^[0-9]+$/ { k = $1 / 1024; if (k > m) m = k; c++ } END { if (c) printf "%.0f", m; else print "-" }'; }
rss_all() { for f in "$1".rank*; do [ -e "$f" ] && printf '%.0f ' "$(awk '/^[0-9]+$/ { print $1 / 1024 }' "$f")"; done; }
# the median of the step times after the first two (seconds, one per line on stdin), 2 decimals
median_tail() { tail -n +3 | bench_median | awk '{ if ($1 == "-") print; else printf "%.2f\n", $1 }'; }

Z3_MSG=""
FSDP_ERR=""
# ctrain: one run -> "s/step peak-MiB-max P G O grads-between-steps"; "unsupported" when zero_stage 3 is refused
# (the caller reads Z3_MSG from the log: a command substitution cannot set the caller's variables)
run_ctrain() { # layout ranks round
  local lay=$1 n=$2 r=$3 st base steps
  st=$(stage "$lay")
  base=$LOG/ct-$lay-n$n-r$r
  steps=$(steps_for "$n")
  rm -f "$base".rank*
  # shellcheck disable=SC2046 # the recipe's and the wrapper's words are split on purpose
  if ! bench_launch "$base.log" "$n" "${RSS_WRAP[@]}" "$base" \
    "$CT" train --model gpt --set preset=gpt2-124m --set dataset=moby-dick --set tokenizer=gpt2 \
    --set context="$CONTEXT" --batch-size $((BATCH * n)) --set optimizer.name=adamw --set clip_grad_norm=1 --dropout 0 \
    --set zero_stage="$st" --set precision="$PRECISION" --max-steps "$steps" --set eval_every=0 --set eval_batches=1 \
    --set threads=1 --set log_every=1 --set save_dir= --metrics "$base.jsonl"; then
    if [ "$st" = 3 ] && grep -qE "zero_stage'?:? .*(out of range|not supported|unsupported|not built)" "$base.log"; then
      echo unsupported
      return
    fi
    echo "bench/zero.sh: ctrain $lay at $n ranks failed: $(tail -3 "$base.log" | tr '\n' ' ')" >&2
    echo "- - - - - -"
    return
  fi
  local s pgo btw
  s=$(sed -nE 's/.*"type":"step".*"time":([0-9.e+-]+).*/\1/p' "$base.jsonl" |
    awk 'NR > 1 { printf "%.4f\n", $1 - p } { p = $1 }' | awk 'BEGIN { print 0 } { print }' | median_tail)
  [ "$steps" -lt 3 ] && s=-
  pgo=$(bench_header_state "$base.log")
  btw=$(sed -nE 's/.* ([0-9.]+) MiB gradients between steps.*/\1/p' "$base.log" | head -1)
  echo "${s:--} $(rss_max "$base") ${pgo:-- - -} ${btw:--}"
}

# PyTorch: one run -> "s/step peak-MiB-max state-MiB"; a TORCH_ERROR line in its log when the mode cannot run
run_torch() { # mode ranks round
  local mode=$1 n=$2 r=$3 base steps
  base=$LOG/pt-$mode-n$n-r$r
  steps=$(steps_for "$n")
  rm -f "$base".rank*
  if ! bench_launch "$base.log" "$n" "${RSS_WRAP[@]}" "$base" \
    env OMP_NUM_THREADS=1 CT_BENCH_PORT=$((29540 + RANDOM % 400)) "${BENCH_TORCH_ENV[@]}" "$BENCH_PY" bench/zero_torch.py --mode "$mode" --steps "$steps" \
    --seq "$CONTEXT" --batch "$BATCH"; then
    grep -q '^TORCH_ERROR' "$base.log" || echo "bench/zero.sh: PyTorch $mode at $n ranks failed: $(tail -3 "$base.log" | tr '\n' ' ')" >&2
    echo "- - -"
    return
  fi
  local s st
  s=$(sed -nE 's/^TORCH .*step_s=([0-9.,]+).*/\1/p' "$base.log" | tr ',' '\n' | median_tail)
  [ "$steps" -lt 3 ] && s=-
  st=$(sed -nE 's/^TORCH .*state_mib=([0-9.]+).*/\1/p' "$base.log")
  echo "${s:--} $(rss_max "$base") ${st:--}"
}

echo "bench/zero.sh: gpt2-124m, $PRECISION, $BATCH x $CONTEXT tokens per rank, 1 thread per rank, ranks {$RANKS} on $CORES cores," \
  "$STEPS steps (median of steps 3..$STEPS; $MEMSTEPS steps when ranks > cores), $ROUNDS round(s); logs in $LOG"
echo "date $(date -u '+%Y-%m-%d %H:%M UTC'), cpu $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$TORCH" = 1 ] && echo "PyTorch $("$BENCH_PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) (${BENCH_TORCH_ENV[*]}), gloo"
declare -A C=() T=() TN=()
for r in $(seq 1 "$ROUNDS"); do
  for n in $RANKS; do
    for lay in $LAYOUTS; do
      mode=$(torch_mode "$lay")
      if [ "$lay" = z3 ] && [ -n "$Z3_MSG" ]; then continue; fi
      # alternate: ctrain first in odd rounds, PyTorch first in even ones
      for side in $([ $((r % 2)) = 1 ] && echo "ct pt" || echo "pt ct"); do
        if [ "$side" = ct ]; then
          v=$(run_ctrain "$lay" "$n" "$r")
          if [ "$v" = unsupported ]; then
            Z3_MSG=$(grep -m1 -E "zero_stage" "$LOG/ct-$lay-n$n-r$r.log")
            echo "zero_stage 3: not supported by this build ($Z3_MSG)"
            break
          fi
          C[$lay-$n-$r]=$v
          echo "  round $r, $n ranks, $lay ctrain: $v (s/step peak-MiB P G O grads-between-steps; ranks' peaks: $(rss_all "$LOG/ct-$lay-n$n-r$r"))" >&2
        elif [ "$TORCH" = 1 ]; then
          case "$mode" in fsdp-*) [ -n "$FSDP_ERR" ] && mode="ddp*" ;; esac
          if [ "$mode" = "ddp*" ]; then
            v=${T[dp-$n-$r]:-}
            [ -n "$v" ] || v=$(run_torch ddp "$n" "$r")
          else
            v=$(run_torch "$mode" "$n" "$r")
            case "$mode" in fsdp-*)
              FSDP_ERR=$(grep -m1 '^TORCH_ERROR' "$LOG/pt-$mode-n$n-r$r.log" || true)
              if [ -n "$FSDP_ERR" ]; then
                echo "PyTorch FSDP cannot run here, compared with DDP only: $FSDP_ERR"
                mode="ddp*"
                v=${T[dp-$n-$r]:-}
                [ -n "$v" ] || v=$(run_torch ddp "$n" "$r")
              fi ;;
            esac
          fi
          T[$lay-$n-$r]=$v
          TN[$lay-$n]=$mode
          echo "  round $r, $n ranks, $lay torch $mode: $v (s/step peak-MiB state-MiB)" >&2
        fi
      done
    done
  done
done

col() { # array-name key-prefix field -> the median over the rounds
  local -n A=$1
  for r in $(seq 1 "$ROUNDS"); do echo "${A[$2-$r]:-}" | cut -d' ' -f"$3"; done | bench_median
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "-" && b != "-" && a != "" && b != "" && b > 0) printf "%.2f", a / b; else print "-" }'; }
name() { case "$1" in dp) echo "DP (zero_stage 0)" ;; z1) echo "ZeRO-1" ;; z2) echo "ZeRO-2" ;; z3) echo "ZeRO-3" ;; esac; }

{
  echo
  echo "| layout | ranks | ctrain peak MiB/rank | ctrain s/step | ctrain model state MiB/rank | PyTorch | PyTorch peak MiB/rank | PyTorch s/step | peak ctrain/PyTorch | step ctrain/PyTorch |"
  echo "|---|---:|---:|---:|---:|---|---:|---:|---:|---:|"
  for n in $RANKS; do
    for lay in $LAYOUTS; do
      if [ "$lay" = z3 ] && [ -n "$Z3_MSG" ]; then
        echo "| $(name z3) | $n | pending | pending | pending | - | - | - | - | - |"
        continue
      fi
      cs=$(col C "$lay-$n" 1) cp=$(col C "$lay-$n" 2)
      state=$(for r in $(seq 1 "$ROUNDS"); do echo "${C[$lay-$n-$r]:-}" | awk 'NF >= 5 && $3 != "-" { printf "%.1f\n", $3 + $4 + $5 }'; done | bench_median)
      ts=- tp=- tn=-
      if [ "$TORCH" = 1 ]; then ts=$(col T "$lay-$n" 1) tp=$(col T "$lay-$n" 2) tn=$(torch_name "${TN[$lay-$n]:-}"); fi
      mark=""
      [ "$n" -gt "$CORES" ] && mark="*"
      [ "$cs" != - ] && cs="$cs$mark"
      [ "$ts" != - ] && ts="$ts$mark"
      sr=$(ratio "${cs%\*}" "${ts%\*}")
      [ "$sr" != - ] && sr="$sr$mark"
      echo "| $(name "$lay") | $n | $cp | $cs | $state | $tn | $tp | $ts | $(ratio "$cp" "$tp") | $sr |"
    done
  done
  echo
  [ -n "$FSDP_ERR" ] && echo "DDP*: PyTorch's FSDP did not run ($FSDP_ERR); the row shows the same round's DDP."
  for n in $RANKS; do [ "$n" -gt "$CORES" ] && { echo "* more ranks than the $CORES cores: $MEMSTEPS steps, memory only (no step time)."; break; }; done
  echo "Peak: VmHWM (maximum resident set) of the largest rank; model state: the header's parameters + gradients +"
  echo "optimizer state per rank; s/step: the median of steps 3..$STEPS (the round median when --rounds > 1)."
  for n in $RANKS; do
    g0=$(col C "dp-$n" 4) g2=$(col C "z2-$n" 4) b2=$(col C "z2-$n" 6)
    case " $LAYOUTS " in *" dp "*) ;; *) continue ;; esac
    case " $LAYOUTS " in *" z2 "*)
      echo "ZeRO-2 gradient peak per rank at $n ranks: $g2 MiB = $(ratio "$g2" "$g0" | awk '{ if ($1 == "-") print "-"; else printf "%.0f%%", 100 * $1 }') of DP's $g0 MiB (target <= 60% at 2 ranks); between steps $b2 MiB" ;;
    esac
    case " $LAYOUTS " in *" z3 "*)
      if [ -n "$Z3_MSG" ]; then echo "ZeRO-3 model state per rank at $n ranks: pending (zero_stage 3: not supported by this build)"
      else
        s0=$(for r in $(seq 1 "$ROUNDS"); do echo "${C[dp-$n-$r]:-}" | awk 'NF >= 5 && $3 != "-" { printf "%.1f\n", $3 + $4 + $5 }'; done | bench_median)
        s3=$(for r in $(seq 1 "$ROUNDS"); do echo "${C[z3-$n-$r]:-}" | awk 'NF >= 5 && $3 != "-" { printf "%.1f\n", $3 + $4 + $5 }'; done | bench_median)
        # one block of gpt2-124m: 12 d^2 + 13 d parameters (d 768), of 123,702,528 at context 64
        echo "ZeRO-3 model state per rank at $n ranks: $s3 MiB = $(ratio "$s3" "$s0") of DP's $s0 MiB (target about 1/$n + one block = $(awk -v n="$n" 'BEGIN { printf "%.2f", 1 / n + 7087872 / 123702528 }'))"
      fi ;;
    esac
  done
} | tee "$LOG/table.txt"
