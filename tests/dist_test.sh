#!/usr/bin/env bash
# tests/dist_test.sh - data parallel over MPI (docs/distributed.md). Every
# mpirun runs under `timeout -k`, on a 640-image MNIST subset with a small
# MLP (no dropout), 2 epochs of global batch 32 = 40 steps:
#   - the communicator's collectives on 2 and 4 ranks (tests/test_dist);
#   - tensor parallelism's collective ops on 2 and 4 ranks (tests/test_tp_mpi);
#   - 2 and 4 ranks (4 oversubscribed) end with the weights of one process
#     on the same global batch, within FP32 reduction tolerance (test_dist
#     maxdiff), and show the same global loss / accuracy; rank 0 alone prints
#     and writes the metrics log;
#   - accumulation (2 micro-batches) equals the same, with one gradient
#     allreduce per optimizer step and no more collectives than without it;
#   - clipping uses the global norm; the FP16 loss scaler skips the same
#     steps as one process (the ranks agree: the weights are checked equal);
#   - a batch that does not divide, ranks with different recipes, a killed
#     rank: a clear error and a non-zero exit, the killed rank within 30 s;
#   - a run killed and resumed at the same world size ends bit for bit as the
#     uninterrupted one (MLP, and a CNN with batchnorm buffers); resumed at
#     another world size it ends within tolerance;
#   - a small GPT (the text task) equals one process too; a small BERT
#     validates the same windows, its loss close to one process's; GPT on
#     variable-length documents (text_docs) validates the same documents;
#   - gradient buckets (tests/test_bucket at 2 and 4 ranks; then the MLP in 4
#     buckets overlapped with backward by the progress thread and by the
#     hook, at 2 and 4 ranks, the one-bucket baseline, accumulation sending
#     nothing before the last micro-batch, bf16 / fp16 compression close to
#     one process, per-rank traces with the buckets' events, a GPT with
#     activation checkpointing in buckets) equal one process.
# Skipped (a SKIP line, counted neither pass nor fail) only without mpirun.
# usage: tests/dist_test.sh path/to/ctrain [path/to/test_dist]
set -u
CT=${1:-build/ctrain}
TD=${2:-$(dirname "$CT")/tests/test_dist}
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
mpi_preflight dist_test.sh "data parallel tests"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- a small MNIST subset ------------------------------------------------------------------------
mnist_subset "$tmp/data" train 640
mnist_subset "$tmp/data" t10k 200

# ---- the communicator ------------------------------------------------------------------------------
mpi_units collectives "$TD" 60 "the communicator's tests"
# the gradient buckets' tests (tests/test_bucket.c): planning, the sums with a progress thread, from the hook
# and after backward, compression with error feedback, an inf on one rank reaching all
mpi_units buckets "$(dirname "$TD")/test_bucket" 90 "the gradient buckets' tests"
# tensor parallelism's collective ops (tests/test_tp_mpi.c): vocabulary-parallel cross entropy against one
# process (V = 10 over 4 ranks: padding), tp_reduce / tp_copy forward and backward, the vocabulary-parallel embedding
mpi_units tp_ops "$(dirname "$TD")/test_tp_mpi" 90 "tensor parallelism's ops' tests"
# pipeline stages' weights files and checkpoints (tests/test_pp_ckpt.c): the stages write the one-process file
# byte for byte, load a whole-model file and checkpoint (and the whole plan theirs), a tensor no stage has is refused
mpi_units pp_ckpt "$(dirname "$TD")/test_pp_ckpt" 120 "pipeline stages' checkpoints' tests"

# ---- data parallel equals one process ---------------------------------------------------------------
A=(--data-dir "$tmp/data" --hidden 32 --batch-size 32 --epochs 2 --seed 5 --threads 1 --optimizer adamw --lr 0.003
   --set log_every=10)
TOL=1e-5
# within NAME DIR_A DIR_B TOL [STEP]: the weights of two runs' checkpoints (step 40) differ by at most TOL
within() { within_files "$1" "$2/step-${5:-000040}/model.safetensors" "$3/step-${5:-000040}/model.safetensors" "$4"; }
# losses LOG: the last epoch line's train loss, train acc, test loss, test acc
losses() { grep -E "^epoch 2/2  train loss" "$1" | tail -1 | sed -E 's/.*train loss ([0-9.]+)  train acc ([0-9.]+)%  test loss ([0-9.]+)  test acc ([0-9.]+)%.*/\1 \2 \3 \4/'; }

mrun "$tmp/one.log" 120 -- "$CT" train "${A[@]}" --save-dir "$tmp/one"
[ $? -eq 0 ] && ok "reference: one process, 40 steps" || bad "reference run" "$(cat "$tmp/one.log")"

for n in 2 4; do
  mrun "$tmp/dp$n.log" 120 -- "${MPI[@]}" -np $n "$CT" train "${A[@]}" --save-dir "$tmp/dp$n" --report "$tmp/rep$n"
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "data parallel: $n ranks x $((32 / n)) rows (global batch 32)" "$tmp/dp$n.log" &&
     clean "np $n" "$tmp/dp$n.log"; then
    ok "np $n trains; the header shows $n ranks x $((32 / n)) rows per rank"
  else
    bad "np $n run (rc $rc)" "$(cat "$tmp/dp$n.log")"
  fi
  within "np $n ends with the weights of one process" "$tmp/one" "$tmp/dp$n" $TOL
  l1=$(losses "$tmp/one.log") ln=$(losses "$tmp/dp$n.log")
  if [ -n "$l1" ] && [ -n "$ln" ] && awk -v a="$l1" -v b="$ln" 'BEGIN { n = split(a, x, " "); split(b, y, " ");
       for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 0.011) exit 1 } exit n != 4 }'; then
    ok "np $n shows the global train / test loss and accuracy of one process ($ln)"
  else
    bad "np $n shows other losses than one process: '$ln' vs '$l1'"
  fi
  nd=$(grep -c "^done:" "$tmp/dp$n.log")
  ns=$(grep -c '"type":"step"' "$tmp/rep$n/metrics.jsonl" 2>/dev/null)
  if [ "$nd" -eq 1 ] && [ "${ns:-0}" -eq 40 ] && [ -f "$tmp/rep$n/report.html" ]; then
    ok "np $n: rank 0 alone prints the summary and writes the metrics log (40 steps) and the report"
  else
    bad "np $n: $nd summaries, ${ns:-no} metric steps (want 1 and 40)" "$(ls -la "$tmp/rep$n" 2>&1)"
  fi
done

# accumulation: 2 micro-batches of 16 (8 per rank) per step; one gradient allreduce per step, no more traffic
mrun "$tmp/acc.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --batch-size 16 --set accumulate_steps=2 --save-dir "$tmp/acc"
rc=$?
c_plain=$(sed -nE 's/.*gradient allreduces.*, ([0-9]+) collectives in all.*/\1/p' "$tmp/dp2.log")
c_acc=$(sed -nE 's/.*gradient allreduces.*, ([0-9]+) collectives in all.*/\1/p' "$tmp/acc.log")
if [ "$rc" -eq 0 ] && grep -q "communication (rank 0): 40 gradient allreduces" "$tmp/acc.log" && [ -n "$c_acc" ] &&
   [ "$c_acc" = "$c_plain" ]; then
  ok "accumulation: 80 micro-batches, 40 gradient allreduces, $c_acc collectives as without accumulation"
else
  bad "accumulation (rc $rc, collectives '$c_acc' vs '$c_plain')" "$(cat "$tmp/acc.log")"
fi
within "np 2 with 2 micro-batches ends with the weights of one process" "$tmp/one" "$tmp/acc" $TOL

# ---- gradient buckets (bucket_size_mb, overlap_communication, comm_progress, grad_compression) ----------
# 0.001 MiB: the MLP's 4 parameters make 4 buckets (w2 is finalized first, then b2, w1, b1; each over the cap)
BK=(--set bucket_size_mb=0.001)
for v in "2 thread" "4 hook" "2 hook" "4 thread"; do
  set -- $v
  mrun "$tmp/bk_$1_$2.log" 120 -- "${MPI[@]}" -np $1 "$CT" train "${A[@]}" "${BK[@]}" --set comm_progress=$2 \
    --save-dir "$tmp/bk_$1_$2"
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "averaged in 4 buckets (MiB: .*), overlapped with backward by a .*(ready after 25%, 50%, 75%, 100%" \
     "$tmp/bk_$1_$2.log" && clean "buckets $v" "$tmp/bk_$1_$2.log"; then
    ok "np $1, 4 buckets overlapped with backward ($2): the header shows them"
  else
    bad "np $1 with 4 buckets ($2) (rc $rc)" "$(grep -E "data parallel|error" "$tmp/bk_$1_$2.log")"
  fi
  within "np $1, 4 buckets overlapped ($2), ends with the weights of one process" "$tmp/one" "$tmp/bk_$1_$2" $TOL
done
# the baseline: one bucket after backward
mrun "$tmp/bk_base.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --set bucket_size_mb=0 \
  --set overlap_communication=false --save-dir "$tmp/bk_base"
rc=$?
[ "$rc" -eq 0 ] && grep -q "averaged in 1 bucket (MiB: [0-9.]*), after backward" "$tmp/bk_base.log" &&
  ok "np 2, overlap_communication false and bucket_size_mb 0: one allreduce after backward" ||
  bad "np 2 baseline (rc $rc)" "$(grep -E "data parallel|error" "$tmp/bk_base.log")"
within "np 2 baseline (one allreduce after backward) ends with the weights of one process" "$tmp/one" "$tmp/bk_base" $TOL
# accumulation with 4 buckets: the micro-batch before the last sends nothing (else 160 more collectives)
mrun "$tmp/bk_acc.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" "${BK[@]}" --batch-size 16 \
  --set accumulate_steps=2 --save-dir "$tmp/bk_acc"
rc=$?
c_plain=$(sed -nE 's/.*gradient allreduces.*, ([0-9]+) collectives in all.*/\1/p' "$tmp/bk_2_thread.log")
c_acc=$(sed -nE 's/.*gradient allreduces.*, ([0-9]+) collectives in all.*/\1/p' "$tmp/bk_acc.log")
if [ "$rc" -eq 0 ] && [ -n "$c_acc" ] && [ "$c_acc" = "$c_plain" ]; then
  ok "accumulation with 4 buckets: $c_acc collectives, as without accumulation (nothing on the first micro-batch)"
else
  bad "accumulation with 4 buckets (rc $rc, collectives '$c_acc' vs '$c_plain')" "$(tail -3 "$tmp/bk_acc.log")"
fi
within "accumulation with 4 buckets ends with the weights of one process" "$tmp/one" "$tmp/bk_acc" $TOL
# compression: bf16 / fp16 with error feedback trains to about the same place (not the same weights)
for c in bf16 fp16; do
  mrun "$tmp/bk_$c.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" "${BK[@]}" --set grad_compression=$c
  rc=$?
  l1=$(losses "$tmp/one.log") lc=$(losses "$tmp/bk_$c.log")
  if [ "$rc" -eq 0 ] && grep -q "sent as $c with error feedback" "$tmp/bk_$c.log" && [ -n "$lc" ] &&
     awk -v a="$l1" -v b="$lc" 'BEGIN { split(a, x, " "); split(b, y, " "); d = x[3] - y[3]; if (d < 0) d = -d;
       e = x[4] - y[4]; if (e < 0) e = -e; exit !(d < 0.05 * x[3] && e <= 2.0) }'; then
    ok "np 2 with $c gradients: test loss / accuracy close to one process's ($lc vs $l1)"
  else
    bad "np 2 with $c gradients (rc $rc): '$lc' vs '$l1'" "$(grep -E "data parallel|error" "$tmp/bk_$c.log")"
  fi
done
# per-rank traces: the buckets' allreduces on their own track, the wait for them as "comm", the doctor's share
mrun "$tmp/bk_prof.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" "${BK[@]}" --profile "$tmp/prof"
rc=$?
nb0=$(grep -o '"cat": "comm_bucket"' "$tmp/prof/trace.json" 2>/dev/null | wc -l)
nb1=$(grep -o '"cat": "comm_bucket"' "$tmp/prof/trace.rank1.json" 2>/dev/null | wc -l)
nw=$(grep -o '"name": "wait for gradient buckets", "cat": "comm"' "$tmp/prof/trace.json" 2>/dev/null | wc -l)
if [ "$rc" -eq 0 ] && [ "$nb0" -eq 40 ] && [ "$nb1" -eq 40 ] && [ "$nw" -eq 10 ] &&
   grep -qE "communication [0-9.]+% of step time" "$tmp/bk_prof.log"; then
  ok "profile at np 2: a trace per rank, 4 bucket events x 10 recorded steps each, the waits, the doctor's share"
else
  bad "profile at np 2 (rc $rc): $nb0 / $nb1 bucket events, $nw waits (want 40, 40, 10)" "$(ls "$tmp/prof" 2>&1; tail -8 "$tmp/bk_prof.log")"
fi

# clipping: the global norm (the same clipped step as one process)
mrun "$tmp/clip1.log" 120 -- "$CT" train "${A[@]}" --set clip_grad_norm=0.5 --save-dir "$tmp/clip1"
mrun "$tmp/clip2.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --set clip_grad_norm=0.5 --save-dir "$tmp/clip2"
rc=$?
g1=$(grep -oE "grad norm [0-9.e+-]+" "$tmp/clip1.log" | tail -1) g2=$(grep -oE "grad norm [0-9.e+-]+" "$tmp/clip2.log" | tail -1)
if [ "$rc" -eq 0 ] && [ -n "$g1" ] && [ "$g1" = "$g2" ]; then ok "clipping: np 2 shows one process's gradient norm ($g2)"
else bad "clipping (rc $rc): '$g2' vs '$g1'" "$(tail -5 "$tmp/clip2.log")"; fi
within "clipping: np 2 ends with the weights of one process" "$tmp/clip1" "$tmp/clip2" $TOL

# FP16 with a dynamic loss scale that starts far too high: the same steps overflow and are skipped
F=(--precision fp16 --set loss_scale.init_scale=1e9)
mrun "$tmp/fp1.log" 120 -- "$CT" train "${A[@]}" "${F[@]}" --save-dir "$tmp/fp1"
mrun "$tmp/fp2.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" "${F[@]}" --save-dir "$tmp/fp2"
rc=$?
k1=$(grep -oE "loss scaler: [0-9]+ of 40 steps skipped" "$tmp/fp1.log") k2=$(grep -oE "loss scaler: [0-9]+ of 40 steps skipped" "$tmp/fp2.log")
if [ "$rc" -eq 0 ] && [ -n "$k1" ] && [ "$k1" = "$k2" ]; then
  ok "fp16: the ranks skip the steps one process skips ($k2) and end with the same weights on every rank"
else
  bad "fp16 loss scaler (rc $rc): '$k2' vs '$k1'" "$(tail -5 "$tmp/fp2.log")"
fi

# threads 0 (the default): this host's cores shared among its ranks
cores=$(getconf _NPROCESSORS_ONLN); want=$((cores / 2)); [ "$want" -ge 1 ] || want=1
mrun "$tmp/thr.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --threads 0 --max-steps 2
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^  threads $want," "$tmp/thr.log"; then ok "threads 0 at np 2 on $cores cores: $want per rank"
else bad "threads 0 at np 2 (rc $rc, want $want per rank)" "$(grep -E "threads|error" "$tmp/thr.log")"; fi

# ---- errors ------------------------------------------------------------------------------------------
start=$(date +%s)
mrun "$tmp/div.log" 60 -- "${MPI[@]}" -np 4 "$CT" train "${A[@]}" --batch-size 30
rc=$?
if [ "$rc" -ne 0 ] && grep -q "E40010.*batch_size 30 does not divide by the 4 ranks" "$tmp/div.log" && [ $(($(date +%s) - start)) -lt 30 ]; then
  ok "batch 30 on 4 ranks: a clear error, exit $rc"
else
  bad "batch that does not divide (rc $rc)" "$(cat "$tmp/div.log")"
fi

mrun "$tmp/mis.log" 60 -- "${MPI[@]}" -np 1 "$CT" train "${A[@]}" : -np 1 "$CT" train "${A[@]}" --lr 0.004
rc=$?
if [ "$rc" -ne 0 ] && grep -q "E80001.*the recipe differs between the ranks: rank 1 differs from rank 0's" "$tmp/mis.log"; then
  ok "another lr on rank 1: 'the recipe differs between the ranks: rank 1', exit $rc"
else
  bad "different recipes (rc $rc)" "$(cat "$tmp/mis.log")"
fi

job_ends "rank 1 killed (SIGKILL) at step 30, named" "$tmp/kill.log" "rank 1 .*(signal 9|Killed)" -- \
  "${MPI[@]}" -np 1 "$CT" train "${A[@]}" --epochs 100 : \
  -np 1 env CTRAIN_TEST_CRASH=step:30 "$CT" train "${A[@]}" --epochs 100

# a small GPT on Moby-Dick: the text task's shards and its split validation
G=(--model gpt --set dataset=moby-dick --set n_layer=1 --set d_model=32 --set n_head=2 --set context=16 --dropout 0
   --batch-size 8 --max-steps 6 --set eval_every=3 --set eval_batches=2 --seed 2 --threads 1 --save-every 0)
mrun "$tmp/gpt1.log" 120 -- "$CT" train "${G[@]}" --save-dir "$tmp/gpt1"
mrun "$tmp/gpt2.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${G[@]}" --save-dir "$tmp/gpt2"
rc=$?
v1=$(grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ windows" "$tmp/gpt1.log" | tr '\n' ' ')
v2=$(grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ windows" "$tmp/gpt2.log" | tr '\n' ' ')
if [ "$rc" -eq 0 ] && [ -n "$v1" ] && [ "$v1" = "$v2" ]; then
  ok "gpt at np 2: the validations of one process ($v2)"
else
  bad "gpt at np 2 (rc $rc): '$v2' vs '$v1'" "$(tail -5 "$tmp/gpt2.log")"
fi
within "gpt at np 2 ends with the weights of one process" "$tmp/gpt1" "$tmp/gpt2" $TOL 000006
# BERT: each rank's loss is the mean over its masked tokens (as DDP), so only close to one process's; the
# validation covers the same windows
# close_validation TAG UNIT WHAT ARGS...: `ctrain train ARGS` in one process and at np 2; the last validation line
# covers as many UNIT (windows, documents) in both, and its loss is within 1%
close_validation() {
  local tag=$1 unit=$2 what=$3 rc v1 v2
  shift 3
  mrun "$tmp/${tag}1.log" 120 -- "$CT" train "$@"
  mrun "$tmp/${tag}2.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "$@"
  rc=$?
  v1=$(grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ $unit" "$tmp/${tag}1.log" | tail -1)
  v2=$(grep -oE "val loss [0-9.]+  val ppl [0-9.]+  \([0-9]+ $unit" "$tmp/${tag}2.log" | tail -1)
  if [ "$rc" -eq 0 ] && [ -n "$v1" ] && [ "${v1##*(}" = "${v2##*(}" ] &&
     awk -v a="${v1#val loss }" -v b="${v2#val loss }" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 0.01 * a) }'; then
    ok "$what at np 2: the validation of one process's $unit within 1% ($v2 vs $v1)"
  else
    bad "$what at np 2 (rc $rc): '$v2' vs '$v1'" "$(tail -5 "$tmp/${tag}2.log")"
  fi
}
close_validation bert windows bert "${G[@]/gpt/bert}"

# activation checkpointing with buckets: a 2-layer GPT recomputing every layer, 9 buckets overlapped
mrun "$tmp/gptr1.log" 120 -- "$CT" train "${G[@]}" --set n_layer=2 --set recompute_every=1 --save-dir "$tmp/gptr1"
mrun "$tmp/gptr2.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${G[@]}" --set n_layer=2 --set recompute_every=1 \
  --set bucket_size_mb=0.01 --save-dir "$tmp/gptr2"
rc=$?
nbk=$(sed -nE 's/.*averaged in ([0-9]+) buckets.*/\1/p' "$tmp/gptr2.log")
if [ "$rc" -eq 0 ] && [ "${nbk:-0}" -ge 3 ]; then ok "gpt with recompute_every 1 at np 2 in $nbk buckets"
else bad "gpt with recompute and buckets (rc $rc, '${nbk}' buckets)" "$(grep -E "data parallel|error" "$tmp/gptr2.log")"; fi
within "gpt with recompute and $nbk buckets at np 2 ends with the weights of one process" "$tmp/gptr1" "$tmp/gptr2" $TOL 000006

# sync_batchnorm: the CNN's batchnorm statistics over the global batch, so np 2 and np 4 equal one process
# (weights and running statistics); per-rank statistics (the default) do not
S=(--model cnn --channels 4 --data-dir "$tmp/data" --batch-size 32 --epochs 1 --max-steps 12 --seed 3 --threads 1
   --save-every 0)
mrun "$tmp/sbn1.log" 120 -- "$CT" train "${S[@]}" --save-dir "$tmp/sbn1"
for n in 2 4; do
  mrun "$tmp/sbn$n.log" 120 -- "${MPI[@]}" -np $n "$CT" train "${S[@]}" --set sync_batchnorm=true --save-dir "$tmp/sbn$n"
  rc=$?
  [ "$rc" -eq 0 ] && grep -q "sync_batchnorm: batch statistics over the global batch" "$tmp/sbn$n.log" ||
    bad "sync_batchnorm at np $n (rc $rc)" "$(grep -E "data parallel|error" "$tmp/sbn$n.log")"
  within "sync_batchnorm at np $n: the cnn ends with one process's weights and running statistics" "$tmp/sbn1" \
    "$tmp/sbn$n" $TOL 000012
done
mrun "$tmp/lbn2.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${S[@]}" --save-dir "$tmp/lbn2"
out=$("$TD" maxdiff "$tmp/sbn1/step-000012/model.safetensors" "$tmp/lbn2/step-000012/model.safetensors" 2>&1)
m=$(printf '%s' "$out" | sed -nE 's/^max abs diff ([^ ]+) over.*/\1/p')
if [ -n "$m" ] && awk -v m="$m" 'BEGIN { exit !(m > 1e-4) }'; then
  ok "without sync_batchnorm the per-rank statistics give other weights (max abs diff $m): the check can fail"
else
  bad "per-rank batchnorm at np 2 should differ from one process: '$out'"
fi

# GPT on variable-length documents (text_docs, dynamic shapes): every rank runs the global batch's length;
# like BERT each rank's loss is the mean over its own tokens, so close to one process's, over the same documents
D=("${G[@]}" --set text_docs=paragraphs --set pad_to_multiple=4 --set eval_batches=0)
close_validation doc documents "gpt on documents" "${D[@]}"

# ---- killed and resumed -------------------------------------------------------------------------------
# np 2 uninterrupted vs killed after step 25 (checkpoint 20) and resumed at np 2. Both save to $tmp/r (the
# recipe in train_state holds save_dir): the uninterrupted run's directory is moved aside.
mrun "$tmp/r_ref.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --save-every 10 --save-dir "$tmp/r"
mv "$tmp/r" "$tmp/r_ref"
mrun "$tmp/r_k.log" 120 -- env CTRAIN_TEST_CRASH=step:25 "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --save-every 10 --save-dir "$tmp/r"
rc=$?
[ "$rc" -ne 0 ] && [ "$(cat "$tmp/r/latest" 2>/dev/null)" = step-000020 ] && ok "np 2 killed after step 25: latest checkpoint step 20" ||
  bad "kill at step 25 (rc $rc)" "$(tail -5 "$tmp/r_k.log")"
cp -r "$tmp/r" "$tmp/r4"
mrun "$tmp/r_res.log" 120 -- "${MPI[@]}" -np 2 "$CT" train --resume "$tmp/r"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "resumed from .*step-000020: step 20" "$tmp/r_res.log" &&
   cmp -s "$tmp/r_ref/step-000040/model.safetensors" "$tmp/r/step-000040/model.safetensors" &&
   cmp -s "$tmp/r_ref/step-000040/train_state.safetensors" "$tmp/r/step-000040/train_state.safetensors"; then
  ok "resumed at np 2: the final checkpoint is the uninterrupted run's, bit for bit"
else
  bad "resume at np 2 (rc $rc)" "$(tail -5 "$tmp/r_res.log"; cmp "$tmp/r_ref/step-000040/model.safetensors" "$tmp/r/step-000040/model.safetensors" 2>&1)"
fi
mrun "$tmp/r4_res.log" 120 -- "${MPI[@]}" -np 4 "$CT" train --resume "$tmp/r4"
rc=$?
[ "$rc" -eq 0 ] && grep -q "data parallel: 4 ranks x 8 rows" "$tmp/r4_res.log" && ok "a checkpoint of np 2 resumes at np 4" ||
  bad "resume at np 4 (rc $rc)" "$(tail -5 "$tmp/r4_res.log")"
within "resumed at np 4: the weights of the uninterrupted np 2 run" "$tmp/r_ref" "$tmp/r4" $TOL

# bf16 gradient compression: each rank's error-feedback residual is saved with the checkpoint
# (grad_residual.bin) and restored on resume, so the resumed run ends bit for bit as the uninterrupted one
Z=(--set grad_compression=bf16 --set bucket_size_mb=0.1 --save-every 10)
mrun "$tmp/z_ref.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" "${Z[@]}" --save-dir "$tmp/z"
mv "$tmp/z" "$tmp/z_ref"
mrun "$tmp/z_k.log" 120 -- env CTRAIN_TEST_CRASH=step:25 "${MPI[@]}" -np 2 "$CT" train "${A[@]}" "${Z[@]}" --save-dir "$tmp/z"
mrun "$tmp/z_res.log" 120 -- "${MPI[@]}" -np 2 "$CT" train --resume "$tmp/z"
rc=$?
if [ "$rc" -eq 0 ] && [ -s "$tmp/z/step-000020/grad_residual.bin" ] && ! grep -q "note: .*residual" "$tmp/z_res.log" &&
   cmp -s "$tmp/z_ref/step-000040/model.safetensors" "$tmp/z/step-000040/model.safetensors" &&
   cmp -s "$tmp/z_ref/step-000040/grad_residual.bin" "$tmp/z/step-000040/grad_residual.bin"; then
  ok "bf16 compression at np 2: killed, resumed with each rank's residual, the final checkpoint bit for bit"
else
  bad "bf16 compression resume at np 2 (rc $rc)" "$(ls "$tmp/z/step-000020" 2>&1; tail -5 "$tmp/z_res.log")"
fi
mrun "$tmp/z4.log" 120 -- "${MPI[@]}" -np 4 "$CT" train --resume "$tmp/z_ref/step-000020"
rc=$?
[ "$rc" -eq 0 ] && grep -q "note: the gradient compression residual was saved at 2 ranks .* this run has 4 .*: it starts from zero" "$tmp/z4.log" &&
  ok "a bf16 checkpoint of np 2 resumes at np 4 with the residual from zero, and says so" ||
  bad "bf16 resume at np 4 (rc $rc)" "$(grep -E "note|error" "$tmp/z4.log")"

# a CNN: batchnorm's running statistics (buffers) are rank 0's at every checkpoint and evaluation
C=(--model cnn --channels 4 --data-dir "$tmp/data" --batch-size 32 --epochs 1 --max-steps 12 --seed 3 --threads 1
   --save-every 5)
mrun "$tmp/c_ref.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${C[@]}" --save-dir "$tmp/c"
rc1=$?
mv "$tmp/c" "$tmp/c_ref"
mrun "$tmp/c_k.log" 120 -- env CTRAIN_TEST_CRASH=step:7 "${MPI[@]}" -np 2 "$CT" train "${C[@]}" --save-dir "$tmp/c"
mrun "$tmp/c_res.log" 120 -- "${MPI[@]}" -np 2 "$CT" train --resume "$tmp/c"
rc2=$?
if [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ] && grep -q "resumed from .*step-000005" "$tmp/c_res.log" &&
   cmp -s "$tmp/c_ref/step-000012/model.safetensors" "$tmp/c/step-000012/model.safetensors" &&
   cmp -s "$tmp/c_ref/step-000012/train_state.safetensors" "$tmp/c/step-000012/train_state.safetensors"; then
  ok "cnn with batchnorm at np 2: killed, resumed, the final checkpoint (weights, buffers, state) bit for bit"
else
  bad "cnn resume at np 2 (rc $rc1 / $rc2)" "$(tail -5 "$tmp/c_ref.log" "$tmp/c_res.log")"
fi

summary "dist_test.sh"
