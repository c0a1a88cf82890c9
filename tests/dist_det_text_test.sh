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
#   - with accumulate_steps 2 too (micro-batch m keyed by global samples m x batch_size + the rank's rows).
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
losses() { grep -E '"type":"(step|eval)"' "$1" | sed -E 's/,"(samples_per_s|time)":[^,}]*//g'; }

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
