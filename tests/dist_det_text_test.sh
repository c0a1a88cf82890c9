#!/usr/bin/env bash
# tests/dist_det_text_test.sh - dropout keyed by global sample and the deterministic mode of the text tasks
# (docs/distributed.md, "Deterministic mode"). Every mpirun runs under `timeout -k`:
#   - a small GPT and a small BERT (text task, Moby-Dick) with dropout 0.1, deterministic: true,
#     deterministic_chunks 4, 10 steps at 1, 2 and 4 ranks: model.safetensors byte for byte the same, and
#     the metrics logs' losses (training and validation) the same;
#   - the same for GPT on variable-length documents (text_docs, dynamic shapes) at 1 and 4 ranks;
#   - the dropout is real: the same GPT with dropout 0 ends with other weights;
#   - plain data parallel (not deterministic) GPT with dropout 0.1 at 2 ranks ends with one process's
#     weights within FP32 tolerance and the same validations: the masks no longer depend on the rank;
#   - with accumulate_steps 2 too (micro-batch m keyed by global samples m x batch_size + the rank's rows);
#   - deterministic with accumulate_steps 2 (gpt-char-small cut small, dropout 0.2, clip_grad_norm 1) under
#     zero_stage 0, 1, 2 and 3 at 1, 2 and 4 ranks: model.safetensors byte for byte the same as one process
#     with zero_stage 0, and the metrics logs' losses and grad norms the same; it trains on the data and the
#     dropout masks of plain accumulation (one process, not deterministic: within FP32 tolerance, the same
#     grad norms printed); saved at 2 ranks (zero_stage 1) and resumed in one process it ends bit for bit as
#     the uninterrupted run; accumulate_steps 3 is refused with a clear error.
# Skipped (a SKIP line, counted neither pass nor fail) only without mpirun.
# usage: tests/dist_det_text_test.sh path/to/ctrain [path/to/test_dist]
set -u
CT=${1:-build/ctrain}
TD=${2:-$(dirname "$CT")/tests/test_dist}
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mpi_lib.sh"
mpi_preflight dist_det_text_test.sh "deterministic text tests"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TOL=1e-5

# run NAME NP LOG -- ctrain args...: NP 1 is one process without mpirun
run() {
  local name=$1 np=$2 log=$3
  shift 4
  if [ "$np" = 1 ]; then mrun "$log" 120 -- "$CT" train "$@"; else mrun "$log" 120 -- "${MPI[@]}" -np "$np" "$CT" train "$@"; fi
  local rc=$?
  if [ "$rc" -ne 0 ] || ! clean "$name" "$log"; then bad "$name (rc $rc)" "$(tail -6 "$log")"; return 1; fi
  return 0
}
same() { # NAME FILE_A FILE_B: byte for byte
  if [ -s "$2" ] && cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "$(cmp "$2" "$3" 2>&1)"; fi
}
# losses FILE: the metrics log's step and eval lines without rates and times
losses() { grep -E '"type":"(step|eval)"' "$1" | sed -E 's/,"(samples_per_s|mfu|peak_mib|comm_share|time)":[^,}]*//g'; }

G=(--model gpt --set dataset=moby-dick --set n_layer=1 --set d_model=32 --set n_head=2 --set context=16
   --dropout 0.1 --batch-size 8 --max-steps 10 --set eval_every=5 --set eval_batches=2 --seed 2 --threads 1
   --save-every 0 --set log_every=1)
DET=(--set deterministic=true --set deterministic_chunks=4)
M=step-000010/model.safetensors

# ---- deterministic GPT and BERT with dropout: bit-identical at 1, 2, 4 ranks ---------------------------------
for model in gpt bert; do
  for n in 1 2 4; do
    run "deterministic $model np $n" $n "$tmp/$model$n.log" -- "${G[@]/gpt/$model}" "${DET[@]}" \
      --save-dir "$tmp/$model$n" --metrics "$tmp/$model$n.jsonl"
  done
  l1=$(losses "$tmp/${model}1.jsonl")
  for n in 2 4; do
    same "deterministic $model with dropout 0.1: np $n ends with one process's weights bit for bit" \
      "$tmp/${model}1/$M" "$tmp/$model$n/$M"
    ln=$(losses "$tmp/$model$n.jsonl")
    [ "$(printf '%s\n' "$l1" | grep -c '"type":"step"')" = 10 ] && [ "$l1" = "$ln" ] &&
      ok "deterministic $model np $n: the metrics log's 10 step losses and validations are one process's" ||
      bad "deterministic $model np $n: the losses differ" "$(diff <(echo "$l1") <(echo "$ln") | head -6)"
  done
done
grep -q "deterministic: 4 chunks of 2 rows per global batch, 1 on each rank" "$tmp/gpt4.log" &&
  ok "the header names the chunks (gpt np 4)" || bad "deterministic header" "$(grep determ "$tmp/gpt4.log")"

# GPT on variable-length documents (text_docs, dynamic shapes): the global batch's documents and length on
# every rank, the chunks cut from them; the validation covers every document on every rank
DOCS=("${G[@]}" "${DET[@]}" --set text_docs=paragraphs --set pad_to_multiple=4 --set eval_batches=0
      --set dynamic_shapes=true)
run "deterministic gpt on documents np 1" 1 "$tmp/doc1.log" -- "${DOCS[@]}" --save-dir "$tmp/doc1" &&
  run "deterministic gpt on documents np 4" 4 "$tmp/doc4.log" -- "${DOCS[@]}" --save-dir "$tmp/doc4" && {
  same "deterministic gpt on documents (text_docs, dynamic shapes): np 4 ends with one process's weights" \
    "$tmp/doc1/$M" "$tmp/doc4/$M"
  v1=$(grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ documents" "$tmp/doc1.log" | tr '\n' ' ')
  v4=$(grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ documents" "$tmp/doc4.log" | tr '\n' ' ')
  [ -n "$v1" ] && [ "$v1" = "$v4" ] && ok "... and one process's validations ($v4)" || bad "documents: '$v4' vs '$v1'"
}

# the dropout is real: without it the same run ends elsewhere
run "deterministic gpt dropout 0" 1 "$tmp/nodrop.log" -- "${G[@]}" "${DET[@]}" --dropout 0 --save-dir "$tmp/nodrop" && {
  if [ -s "$tmp/nodrop/$M" ] && ! cmp -s "$tmp/nodrop/$M" "$tmp/gpt1/$M"; then
    ok "dropout 0.1 changes the deterministic run's weights (the masks are drawn)"
  else bad "dropout 0 and 0.1 end with the same weights: the check above is void"; fi; }

# ---- deterministic with accumulate_steps 2, with ZeRO: bit-identical at 1, 2, 4 ranks --------------------------
# the step's 2 global batches x 4 chunks are the 8 leaves of one tree (leaf k x 2 + a: chunk k of batch a)
t0=$(date +%s)
GA=(--model gpt --set preset=gpt-char-small --set dataset=moby-dick --set n_layer=1 --set d_model=32 --set n_head=2
    --set context=16 --dropout 0.2 --batch-size 8 --max-steps 4 --set eval_every=4 --set eval_batches=2 --seed 2
    --threads 1 --save-every 0 --set log_every=1 --set accumulate_steps=2 --set clip_grad_norm=1 --optimizer adamw)
DA=("${GA[@]}" "${DET[@]}")
MA=step-000004/model.safetensors
# the metrics log's step lines with their grad norms (clipping: the whole gradient's norm, as zero_stage 0)
for z in 0 1 2 3; do
  for n in 1 2 4; do
    run "deterministic accumulate_steps 2 zero_stage $z np $n" $n "$tmp/da$z$n.log" -- "${DA[@]}" \
      --set zero_stage=$z --save-dir "$tmp/da$z$n" --metrics "$tmp/da$z$n.jsonl"
  done
done
la=$(losses "$tmp/da01.jsonl")
for z in 0 1 2 3; do
  for n in 1 2 4; do
    [ "$z$n" = 01 ] && continue
    same "deterministic, accumulate_steps 2, dropout 0.2, zero_stage $z at np $n: one process's weights bit for bit" \
      "$tmp/da01/$MA" "$tmp/da$z$n/$MA"
    ln=$(losses "$tmp/da$z$n.jsonl")
    [ "$(printf '%s\n' "$la" | grep -c '"grad_norm"')" = 4 ] && [ "$la" = "$ln" ] &&
      ok "... and the metrics log's 4 step losses, grad norms and validation" ||
      bad "deterministic accumulate_steps 2 zero_stage $z np $n: the losses differ" \
        "$(diff <(echo "$la") <(echo "$ln") | head -6)"
  done
done
grep -q "deterministic: 4 chunks of 2 rows per global batch, 1 on each rank of each of the step's accumulate_steps" \
  "$tmp/da24.log" && grep -q "zero_stage 2 with deterministic: whole gradients summed by the fixed-tree allreduce" "$tmp/da24.log" &&
  ok "the header names the chunks of each global batch and ZeRO's fixed-tree allreduce (np 4, zero_stage 2)" ||
  bad "deterministic accumulation header" "$(grep -E 'determ|zero_stage' "$tmp/da24.log")"
# the same data and dropout masks as plain accumulation: one process without deterministic ends within FP32
# rounding of it, printing the same grad norms (the whole step's mean gradient: scaled by 1 / (chunks x 2))
run "gpt accumulate_steps 2 dropout 0.2 not deterministic" 1 "$tmp/pa.log" -- "${GA[@]}" --save-dir "$tmp/pa" && {
  within_files "deterministic accumulation trains on plain accumulation's batches and masks" \
    "$tmp/pa/$MA" "$tmp/da01/$MA" $TOL
  n1=$(grep -oE "grad norm [0-9.]+" "$tmp/pa.log" | tr '\n' ' ') n2=$(grep -oE "grad norm [0-9.]+" "$tmp/da01.log" | tr '\n' ' ')
  [ -n "$n1" ] && [ "$n1" = "$n2" ] && ok "... and shows its grad norms ($n2)" || bad "grad norms: '$n2' vs '$n1'"
}
# saved at 2 ranks (zero_stage 1) after step 2, killed after step 3, resumed in one process: the same bits
mrun "$tmp/dak.log" 120 -- env CTRAIN_TEST_CRASH=step:3 "${MPI[@]}" -np 2 "$CT" train "${DA[@]}" --set zero_stage=1 \
  --save-every 2 --save-dir "$tmp/dak"
if [ "$(cat "$tmp/dak/latest" 2>/dev/null)" != step-000002 ]; then
  bad "deterministic accumulation np 2 killed after step 3: no checkpoint 2" "$(tail -5 "$tmp/dak.log")"
else
  run "deterministic accumulation resume 2 -> 1" 1 "$tmp/dakr.log" -- --resume "$tmp/dak" &&
    same "deterministic accumulation: saved at np 2 (zero_stage 1), resumed in one process: the uninterrupted weights" \
      "$tmp/da01/$MA" "$tmp/dak/$MA"
fi
mrun "$tmp/da3.log" 60 -- "$CT" train "${DA[@]}" --set accumulate_steps=3
rc=$?
[ "$rc" -ne 0 ] && grep -q "deterministic: true with accumulate_steps 3 needs a power of two" "$tmp/da3.log" &&
  ok "deterministic with accumulate_steps 3: a clear error" || bad "accumulate_steps 3 (rc $rc)" "$(tail -3 "$tmp/da3.log")"
echo "  (deterministic accumulation checks: $(($(date +%s) - t0)) s)"

# ---- data parallel without deterministic: the masks of one process ------------------------------------------
# validations: the same windows, losses of weights within FP32 rounding (printed with 4 decimals)
vals() { grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ windows" "$1" | tr '\n' ' '; }
for acc in 1 2; do
  run "gpt dropout accumulate_steps $acc np 1" 1 "$tmp/dp1a$acc.log" -- "${G[@]}" --set accumulate_steps=$acc \
    --save-dir "$tmp/dp1a$acc" &&
    run "gpt dropout accumulate_steps $acc np 2" 2 "$tmp/dp2a$acc.log" -- "${G[@]}" --set accumulate_steps=$acc \
      --save-dir "$tmp/dp2a$acc" && {
    within_files "gpt with dropout 0.1, accumulate_steps $acc, at np 2 ends with one process's weights" \
      "$tmp/dp1a$acc/$M" "$tmp/dp2a$acc/$M" $TOL
    v1=$(vals "$tmp/dp1a$acc.log") v2=$(vals "$tmp/dp2a$acc.log")
    [ -n "$v1" ] && [ "$v1" = "$v2" ] && ok "... and its validations ($v2)" || bad "validations: '$v2' vs '$v1'"
  }
done
summary dist_det_text_test.sh
