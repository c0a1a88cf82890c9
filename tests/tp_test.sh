#!/usr/bin/env bash
# tests/tp_test.sh - tensor parallelism over MPI (docs/distributed.md). Every mpirun runs under `timeout -k`:
#   - GPT and BERT split at 2 and 4 ranks equal one process in the same binary (tests/test_tp_model: initial
#     shards, loss and every gradient within 1e-5, no whole logits, recompute_blocks bit for bit);
#   - a small GPT trained 20 steps (FP32, no dropout) at tensor_parallel 2 and 4 ends with the weights of one
#     process (the checkpoint is the one-process file, gathered from the shards), BERT at 2;
#   - with dropout 0.1, tensor parallel 2 and data 2 x tensor 2 end with one process's weights (the same masks);
#   - data parallel 2 x tensor parallel 2 with ZeRO-1 and accumulation on 4 ranks equals one process over
#     20 steps; the header shows the layout and the per-rank memory;
#   - a tensor_parallel 2 checkpoint resumes at tensor_parallel 1 and at data 2 x tensor 2 and ends with the
#     uninterrupted run's weights;
#   - errors: a tensor_parallel that does not divide the heads or the ranks, an image model, ranks started
#     with different tensor_parallel, a killed rank (the job ends within 30 s naming it), a rank that hangs
#     (comm_timeout ends the job naming the tensor parallel group and the MPI call).
# Skipped (a SKIP line) only without mpirun.
# usage: tests/tp_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
TD=$(dirname "$CT")/tests/test_dist
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/mpi_lib.sh"
mpi_preflight tp_test.sh "tensor parallel tests"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TOL=2e-5
# The no-dropout GPT's weights: one hidden unit (c_fc row 46) is nearly dead at this size, its gradients near
# AdamW's eps, where the update lr * m / (sqrt(v) + eps) turns the split's other summation order into ~1e-5
# absolute at that unit's weights (tensor parallel 2: 1.8e-5 before the table GELU, 2.9e-5 with it, at c_fc
# (46, 3); 3.2e-5 at 4); then that unit's c_proj column (4.6e-6), every other weight within 3.1e-6. A wrong
# shard or a missing reduction moves weights by 1e-3 and more.
WTOL=5e-5

mpi_units tpmodel "$(dirname "$CT")/tests/test_tp_model" 120 "gpt and bert split equal one process (test_tp_model)"

# a small GPT on Moby-Dick (4 heads, so 2 and 4 divide them; vocabulary 85: padded at 2 and 4 ranks)
G=(--model gpt --set dataset=moby-dick --set n_layer=2 --set d_model=32 --set n_head=4 --set context=16 --dropout 0
   --batch-size 8 --max-steps 20 --set eval_every=10 --set eval_batches=2 --set threads=1 --set save_every=10)
mrun "$tmp/g1.log" 120 -- "$CT" train "${G[@]}" --save-dir "$tmp/g1"
[ $? -eq 0 ] && ok "reference: gpt in one process, 20 steps" || bad "gpt reference" "$(tail -5 "$tmp/g1.log")"
val() { grep -oE "val loss [0-9.]+" "$1" | tr '\n' ' '; }
for t in 2 4; do
  mrun "$tmp/gt$t.log" 180 -- "${MPI[@]}" -np $t "$CT" train "${G[@]}" --set tensor_parallel=$t --save-dir "$tmp/gt$t"
  rc=$?
  if [ "$rc" -eq 0 ] && [ "$(val "$tmp/gt$t.log")" = "$(val "$tmp/g1.log")" ] && clean "tp $t" "$tmp/gt$t.log" &&
     grep -q "layout: $t ranks = data parallel 1 x tensor parallel $t" "$tmp/gt$t.log"; then
    ok "gpt at tensor_parallel $t: the validations of one process ($(val "$tmp/gt$t.log"))"
  else
    bad "gpt at tensor_parallel $t (rc $rc): '$(val "$tmp/gt$t.log")' vs '$(val "$tmp/g1.log")'" "$(tail -5 "$tmp/gt$t.log")"
  fi
  within_files "gpt at tensor_parallel $t ends with the weights of one process (one-process checkpoint)" \
    "$tmp/g1/step-000020/model.safetensors" "$tmp/gt$t/step-000020/model.safetensors" $WTOL
  within_files "gpt at tensor_parallel $t: its optimizer state too" \
    "$tmp/g1/step-000020/train_state.safetensors" "$tmp/gt$t/step-000020/train_state.safetensors" $TOL
done

# BERT (4 heads, d_ff 4 x 32)
B=("${G[@]/gpt/bert}")
mrun "$tmp/b1.log" 120 -- "$CT" train "${B[@]}" --save-dir "$tmp/b1"
mrun "$tmp/b2.log" 180 -- "${MPI[@]}" -np 2 "$CT" train "${B[@]}" --set tensor_parallel=2 --save-dir "$tmp/b2"
rc=$?
[ "$rc" -eq 0 ] && clean "bert tp 2" "$tmp/b2.log" && ok "bert at tensor_parallel 2 trains ($(val "$tmp/b2.log"))" ||
  bad "bert at tensor_parallel 2 (rc $rc)" "$(tail -5 "$tmp/b2.log")"
within_files "bert at tensor_parallel 2 ends with the weights of one process" \
  "$tmp/b1/step-000020/model.safetensors" "$tmp/b2/step-000020/model.safetensors" $TOL

# data 2 x tensor 2 on 4 ranks with ZeRO-1, 2 micro-batches per step and clipping (the norm over the shards
# and segments), against one process accumulating alike; then ZeRO-2
A=(--set accumulate_steps=2 --set clip_grad_norm=0.5)
mrun "$tmp/a1.log" 120 -- "$CT" train "${G[@]}" "${A[@]}" --save-dir "$tmp/a1"
mrun "$tmp/a4.log" 180 -- "${MPI[@]}" -np 4 "$CT" train "${G[@]}" "${A[@]}" --set tensor_parallel=2 --set zero_stage=1 \
  --save-dir "$tmp/a4"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "layout: 4 ranks = data parallel 2 x tensor parallel 2" "$tmp/a4.log" &&
   grep -qE "per rank: .* MiB parameters \+ .* MiB gradients \+ .* MiB optimizer state \+ .* MiB activations" "$tmp/a4.log" &&
   grep -q "zero_stage 1: per rank" "$tmp/a4.log" && clean "dp2 x tp2" "$tmp/a4.log"; then
  ok "data 2 x tensor 2 with zero_stage 1: the header shows the layout and the per-rank memory"
else
  bad "data 2 x tensor 2 (rc $rc)" "$(grep -E "layout|tensor parallel|zero_stage|rror" "$tmp/a4.log")"
fi
within_files "data 2 x tensor 2, ZeRO-1, accumulation, clipping: 20 steps end with the weights of one process" \
  "$tmp/a1/step-000020/model.safetensors" "$tmp/a4/step-000020/model.safetensors" $TOL
mrun "$tmp/z4.log" 180 -- "${MPI[@]}" -np 4 "$CT" train "${G[@]}" "${A[@]}" --set tensor_parallel=2 --set zero_stage=2 \
  --save-dir "$tmp/z4"
within_files "data 2 x tensor 2, ZeRO-2 (rc $?): the weights of one process" \
  "$tmp/a1/step-000020/model.safetensors" "$tmp/z4/step-000020/model.safetensors" $TOL
for z in a4 z4; do # the optimizer state: gathered over the data group (ZeRO) and the tensor group
  within_files "data 2 x tensor 2 ($z): the checkpoint's optimizer state is one process's" \
    "$tmp/a1/step-000020/train_state.safetensors" "$tmp/$z/step-000020/train_state.safetensors" $TOL
done

# dropout 0.1: every layout draws one process's masks (keyed by random op, step and global sample, one seed)
D=("${G[@]}" --dropout 0.1)
mrun "$tmp/d1.log" 120 -- "$CT" train "${D[@]}" --save-dir "$tmp/d1"
mrun "$tmp/d2.log" 180 -- "${MPI[@]}" -np 2 "$CT" train "${D[@]}" --set tensor_parallel=2 --save-dir "$tmp/d2"
mrun "$tmp/d4.log" 180 -- "${MPI[@]}" -np 4 "$CT" train "${D[@]}" --set tensor_parallel=2 --save-dir "$tmp/d4"
within_files "gpt with dropout 0.1 at tensor_parallel 2 ends with the weights of one process" \
  "$tmp/d1/step-000020/model.safetensors" "$tmp/d2/step-000020/model.safetensors" $TOL
within_files "gpt with dropout 0.1 at data 2 x tensor 2 ends with the weights of one process" \
  "$tmp/d1/step-000020/model.safetensors" "$tmp/d4/step-000020/model.safetensors" $TOL
m=$("$TD" maxdiff "$tmp/d1/step-000020/model.safetensors" "$tmp/g1/step-000020/model.safetensors" 2>&1 |
  sed -nE 's/^max abs diff ([^ ]+) over.*/\1/p')
awk -v m="${m:-0}" 'BEGIN { exit !(m > 1e-3) }' && ok "(control) dropout changes the weights (max abs diff $m)" ||
  bad "dropout 0.1 changed nothing (max abs diff '$m')"

# a tensor_parallel 2 checkpoint (step 10 of gt2) resumes at tensor_parallel 1 and at data 2 x tensor 2
for how in 1 4; do
  rm -rf "$tmp/rs$how"
  mkdir -p "$tmp/rs$how" && cp -r "$tmp/gt2/step-000010" "$tmp/rs$how/" && echo step-000010 >"$tmp/rs$how/latest"
  if [ "$how" = 1 ]; then
    mrun "$tmp/rs$how.log" 120 -- "$CT" train "${G[@]}" --set tensor_parallel=1 --save-dir "$tmp/rs$how" --resume "$tmp/rs$how"
  else
    mrun "$tmp/rs$how.log" 180 -- "${MPI[@]}" -np 4 "$CT" train "${G[@]}" --set tensor_parallel=2 --save-dir "$tmp/rs$how" \
      --resume "$tmp/rs$how"
  fi
  rc=$?
  [ "$rc" -eq 0 ] && grep -q "resumed from .*step-000010: step 10" "$tmp/rs$how.log" ||
    bad "resume of a tensor_parallel 2 checkpoint on $how rank(s) (rc $rc)" "$(tail -5 "$tmp/rs$how.log")"
  within_files "a tensor_parallel 2 checkpoint resumed on $how rank(s) ends with the uninterrupted run's weights" \
    "$tmp/gt2/step-000020/model.safetensors" "$tmp/rs$how/step-000020/model.safetensors" $TOL
done

# ---- errors ---------------------------------------------------------------------------------------------------
mrun "$tmp/e1.log" 60 -- "${MPI[@]}" -np 3 "$CT" train "${G[@]}" --set tensor_parallel=3
rc=$?
[ "$rc" -ne 0 ] && grep -q "tensor_parallel 3 must divide n_head 4" "$tmp/e1.log" &&
  ok "tensor_parallel 3 with 4 heads: a clear error, exit $rc" || bad "tp 3 with 4 heads (rc $rc)" "$(cat "$tmp/e1.log")"
mrun "$tmp/e2.log" 60 -- "${MPI[@]}" -np 3 "$CT" train "${G[@]}" --set tensor_parallel=2
rc=$?
[ "$rc" -ne 0 ] && grep -q "tensor_parallel 2 does not divide the 3 ranks" "$tmp/e2.log" &&
  ok "tensor_parallel 2 on 3 ranks: a clear error, exit $rc" || bad "tp 2 on 3 ranks (rc $rc)" "$(cat "$tmp/e2.log")"
mrun "$tmp/e3.log" 60 -- "$CT" train --model mlp --set tensor_parallel=2
rc=$?
[ "$rc" -ne 0 ] && grep -q "tensor_parallel" "$tmp/e3.log" && ok "tensor_parallel on an mlp: refused, exit $rc" ||
  bad "tp on an mlp (rc $rc)" "$(cat "$tmp/e3.log")"
mrun "$tmp/e4.log" 60 -- "${MPI[@]}" -np 1 "$CT" train "${G[@]}" --set tensor_parallel=2 : -np 1 "$CT" train "${G[@]}"
rc=$?
[ "$rc" -ne 0 ] && grep -qE "E80001 CT_E_DIST: the (process grid \(tensor and pipeline group sizes\)|recipe) differs between the ranks: rank 1" "$tmp/e4.log" &&
  ok "ranks started with different tensor_parallel: an error at start, exit $rc" ||
  bad "different tensor_parallel (rc $rc)" "$(cat "$tmp/e4.log")"
job_ends "tensor rank 1 killed at step 15, named" "$tmp/kill.log" "rank 1 .*(signal 9|Killed)" -- \
  "${MPI[@]}" -np 1 "$CT" train "${G[@]}" --set tensor_parallel=2 --max-steps 100000 : \
  -np 1 env CTRAIN_TEST_CRASH=step:15 "$CT" train "${G[@]}" --set tensor_parallel=2 --max-steps 100000
# a tensor rank that hangs (SIGSTOP after step 15): the other waits inside a tensor-group collective of the
# forward; comm_timeout 5 ends the job naming the group and the op
job_ends "tensor rank 1 stopped at step 15: comm_timeout 5 names the tensor parallel group" "$tmp/hang.log" \
  "rank 0 of 2 has waited [0-9]+ s in MPI_[A-Za-z_]+[^:]* of the tensor parallel group for the other ranks \(comm_timeout 5 s\)" -- \
  "${MPI[@]}" -np 1 "$CT" train "${G[@]}" --set tensor_parallel=2 --set comm_timeout=5 --max-steps 100000 : \
  -np 1 env CTRAIN_TEST_CRASH=stop:15 "$CT" train "${G[@]}" --set tensor_parallel=2 --set comm_timeout=5 --max-steps 100000
summary tp_test.sh
