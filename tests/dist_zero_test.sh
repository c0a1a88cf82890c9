#!/usr/bin/env bash
# tests/dist_zero_test.sh - ZeRO and the deterministic mode (docs/distributed.md).
# Every mpirun runs under `timeout -k`, on a 640-image MNIST subset:
#   - the collectives of src/comm/zero_collectives.c and the sharded optimizer on 2 and 4
#     ranks (tests/test_dist_zero);
#   - zero_stage 1 and 2 end with the weights of zero_stage 0 (DDP) within FP32
#     tolerance at 2 and 4 ranks for AdamW and SGD with momentum, and at 2 ranks
#     for LAMB (its trust ratios from per-tensor sums allreduced over the
#     shards); stage 2 is stage 1 bit for bit; LAMB with zero_stage 1 in one
#     process ends with zero_stage 0's weights; the header reports the memory per rank; clipping by
#     the global norm over the shards shows DDP's norm and ends with its weights;
#     the FP16 loss scaler skips DDP's steps;
#   - a ZeRO checkpoint holds the whole optimizer state (rank 0 gathered it): the
#     same state as DDP's checkpoint, and it resumes at another world size;
#   - deterministic: true: the MLP and a CNN with batchnorm end bit for bit the
#     same (model.safetensors compared byte for byte) at 1, 2 and 4 ranks, with
#     the same losses printed; a run killed and resumed at another world size
#     (2 -> 1, 1 -> 2, 4 -> 2) ends bit for bit as the uninterrupted one; the CNN with accumulate_steps 8
#     (an epoch of 20 batches: 2 steps, the last 4 batches dropped) and zero_stage 2 at 1, 2 and 4 ranks the
#     same bits as zero_stage 0 in one process;
#   - the errors: a world size that does not divide deterministic_chunks; a rank killed in a ZeRO run ends the job within 30 s,
#     mpirun naming the rank; a rank that hangs (stopped) ends the job after
#     comm_timeout seconds, the waiting rank saying why.
# Skipped (a SKIP line, counted neither pass nor fail) only without mpirun.
# usage: tests/dist_zero_test.sh path/to/ctrain [path/to/test_dist_zero]
set -u
CT=${1:-build/ctrain}
TZ=${2:-$(dirname "$CT")/tests/test_dist_zero}
TD=$(dirname "$TZ")/test_dist
. "$(dirname "$0")/lib.sh"

. "$(dirname "$0")/mpi_lib.sh"
mpi_preflight dist_zero_test.sh "ZeRO tests"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME NP LOG -- ctrain args...: NP 1 is one process without mpirun
run() {
  local name=$1 np=$2 log=$3
  shift 4
  if [ "$np" = 1 ]; then mrun "$log" 120 -- "$CT" train "$@"; else mrun "$log" 120 -- "${MPI[@]}" -np "$np" "$CT" train "$@"; fi
  local rc=$?
  if [ "$rc" -ne 0 ] || ! clean "$name" "$log"; then bad "$name (rc $rc)" "$(tail -6 "$log")"; return 1; fi
  return 0
}
# within NAME FILE_A FILE_B TOL: the tensors of two safetensors files differ by at most TOL
within() { within_files "$@"; }
same() { # NAME FILE_A FILE_B: byte for byte
  if cmp -s "$2" "$3"; then ok "$1"; else bad "$1" "$(cmp "$2" "$3" 2>&1)"; fi
}
lastline() { grep -E "^epoch [0-9]+/[0-9]+  train loss" "$1" | tail -1 | sed -E 's/  [0-9.]+ s .*//'; }

mnist_subset "$tmp/data" train 640
mnist_subset "$tmp/data" t10k 200

# ---- the collectives ---------------------------------------------------------------------------------
mpi_units collectives "$TZ" 60 "tree allreduce, reduce-scatter (MPI and ring), allgatherv, gatherv, optimizer shards"

# ---- ZeRO equals DDP -------------------------------------------------------------------------------------
A=(--data-dir "$tmp/data" --hidden 32 --batch-size 32 --epochs 2 --seed 5 --threads 1 --set log_every=10)
TOL=1e-5
M=step-000040/model.safetensors
# sgd runs its reduce-scatters through the ring (CT_RS_RING_FROM=0), adamw and lamb through MPI (0.1 MiB < 1 MiB);
# lamb at 2 ranks only (its shards' trust ratios are checked at 2 and 4 ranks by test_dist_zero)
for opt in adamw sgd lamb; do
  O=(--optimizer "$opt" --lr 0.003)
  [ "$opt" = sgd ] && O=(--optimizer sgd --lr 0.05 --momentum 0.9)
  if [ "$opt" = sgd ]; then export CT_RS_RING_FROM=0; else unset CT_RS_RING_FROM; fi
  NPS="2 4"
  [ "$opt" = lamb ] && NPS=2
  for n in $NPS; do
    run "$opt np $n zero_stage 0" $n "$tmp/$opt$n-0.log" -- "${A[@]}" "${O[@]}" --save-dir "$tmp/$opt$n-0" || continue
    for st in 1 2; do
      run "$opt np $n zero_stage $st" $n "$tmp/$opt$n-$st.log" -- "${A[@]}" "${O[@]}" --set zero_stage=$st \
        --save-dir "$tmp/$opt$n-$st" || continue
      within "$opt np $n: zero_stage $st ends with DDP's weights" "$tmp/$opt$n-0/$M" "$tmp/$opt$n-$st/$M" $TOL
    done
    same "$opt np $n: zero_stage 2 is zero_stage 1 bit for bit" "$tmp/$opt$n-1/$M" "$tmp/$opt$n-2/$M"
  done
done
unset CT_RS_RING_FROM
# the header: memory per rank (AdamW: 2 state floats per parameter, 25450 parameters, 4 ranks)
if grep -qE "zero_stage 2: per rank 0.05 MiB optimizer state \(1/4 of 0.19 MiB\); gradients 0.02 MiB between steps" "$tmp/adamw4-2.log" &&
   grep -qE "zero_stage 1: per rank .* gradients 0.10 MiB between steps" "$tmp/adamw4-1.log" &&
   grep -qE "communication \(rank 0\): 40 gradient reduce-scatters .*40 reduce-scatter" "$tmp/adamw4-1.log"; then
  ok "the header reports the memory per rank (state 1/4, stage 2's gradients 1/4) and the summary 40 reduce-scatters"
else
  bad "zero header / summary" "$(grep -E "zero_stage|communication" "$tmp/adamw4-2.log" "$tmp/adamw4-1.log")"
fi

# clipping: the global norm over the shards
CL=(--optimizer adamw --lr 0.003 --set clip_grad_norm=0.5)
run "clip np 4 zero_stage 0" 4 "$tmp/cl0.log" -- "${A[@]}" "${CL[@]}" --save-dir "$tmp/cl0" &&
  run "clip np 4 zero_stage 1" 4 "$tmp/cl1.log" -- "${A[@]}" "${CL[@]}" --set zero_stage=1 --save-dir "$tmp/cl1" && {
  n0=$(grep -oE "grad norm [0-9.e+-]+" "$tmp/cl0.log" | tr '\n' ' ')
  n1=$(grep -oE "grad norm [0-9.e+-]+" "$tmp/cl1.log" | tr '\n' ' ')
  if [ -n "$n0" ] && [ "$n0" = "$n1" ] && awk -v a="${n0#grad norm }" 'BEGIN { exit !(a + 0 > 0.5) }'; then
    ok "clip_grad_norm 0.5 at np 4: zero_stage 1 shows DDP's global norms ($n1), which clip"
  else
    bad "clip norms: zero '$n1' vs DDP '$n0'"
  fi
  within "clip np 4: zero_stage 1 ends with DDP's weights" "$tmp/cl0/$M" "$tmp/cl1/$M" $TOL
}

# the FP16 loss scaler: a scale far too high overflows; the ranks agree on each overflow (any rank's segment)
F=(--optimizer adamw --lr 0.003 --precision fp16 --set loss_scale.init_scale=1e9)
run "fp16 np 4 zero_stage 0" 4 "$tmp/fp0.log" -- "${A[@]}" "${F[@]}" --save-dir "$tmp/fp0" &&
  run "fp16 np 4 zero_stage 1" 4 "$tmp/fp1.log" -- "${A[@]}" "${F[@]}" --set zero_stage=1 --save-dir "$tmp/fp1" && {
  k0=$(grep -oE "loss scaler: [0-9]+ of 40 steps skipped" "$tmp/fp0.log") k1=$(grep -oE "loss scaler: [0-9]+ of 40 steps skipped" "$tmp/fp1.log")
  [ -n "$k0" ] && [ "$k0" = "$k1" ] && ok "fp16 np 4: zero_stage 1 skips DDP's steps ($k1)" || bad "fp16 skips: zero '$k1' vs DDP '$k0'"
  within "fp16 np 4: zero_stage 1 ends with DDP's weights" "$tmp/fp0/$M" "$tmp/fp1/$M" $TOL
}

# every rank's segment all zero (an FP16 scale so small the gradients underflow): the run says nothing trained
mrun "$tmp/uf.log" 120 -- "${MPI[@]}" -np 2 "$CT" train "${A[@]}" --max-steps 12 --precision fp16 --set zero_stage=1 \
  --set loss_scale.mode=static --set loss_scale.init_scale=1e-9 --set loss_scale.min_scale=1e-9
rc=$?
[ "$rc" -ne 0 ] && grep -q "gradients were all exactly zero in every step that ran (12 of 12)" "$tmp/uf.log" &&
  ok "zero_stage 1: gradients underflowing on every rank's segment are reported (nothing trained)" ||
  bad "zero_stage 1 underflow (rc $rc)" "$(tail -4 "$tmp/uf.log")"

# ---- ZeRO checkpoints are whole, and resume at another world size ------------------------------------------
S=step-000020/train_state.safetensors
run "adamw np 2 zero_stage 1, checkpoints" 2 "$tmp/zc1.log" -- "${A[@]}" --optimizer adamw --lr 0.003 --set zero_stage=1 \
  --save-every 20 --save-dir "$tmp/zc1" &&
  run "adamw np 2 zero_stage 0, checkpoints" 2 "$tmp/zc0.log" -- "${A[@]}" --optimizer adamw --lr 0.003 \
    --save-every 20 --save-dir "$tmp/zc0" && {
  within "the zero_stage 1 checkpoint holds DDP's whole optimizer state (gathered by rank 0)" "$tmp/zc0/$S" "$tmp/zc1/$S" $TOL
  rm -rf "$tmp/zc1/step-000040"
  echo step-000020 >"$tmp/zc1/latest"
  cp -r "$tmp/zc1" "$tmp/zc1b"
  run "zero_stage 1 np 2 checkpoint resumed at np 4 (zero_stage 1)" 4 "$tmp/zr4.log" -- --resume "$tmp/zc1" &&
    within "a zero_stage 1 checkpoint of np 2 resumes at np 4 and ends with the uninterrupted run's weights" \
      "$tmp/zc0/$M" "$tmp/zc1/$M" $TOL
  run "zero_stage 1 np 2 checkpoint resumed in one process" 1 "$tmp/zr1.log" -- --resume "$tmp/zc1b" &&
    within "... and in one process" "$tmp/zc0/$M" "$tmp/zc1b/$M" $TOL
}

# ---- deterministic: bit-identical at 1, 2, 4 ranks ------------------------------------------------------------
D=("${A[@]}" --optimizer adamw --lr 0.003 --set deterministic=true)
C=(--model cnn --channels 4 --data-dir "$tmp/data" --batch-size 32 --epochs 1 --max-steps 12 --seed 3 --threads 1
   --set deterministic=true --set log_every=4)
for n in 1 2 4; do
  run "deterministic mlp np $n" $n "$tmp/dm$n.log" -- "${D[@]}" --save-dir "$tmp/dm$n"
  run "deterministic cnn np $n" $n "$tmp/dc$n.log" -- "${C[@]}" --save-dir "$tmp/dc$n"
done
for n in 2 4; do
  same "deterministic mlp: np $n ends with one process's weights bit for bit" "$tmp/dm1/$M" "$tmp/dm$n/$M"
  same "deterministic cnn (batchnorm): np $n ends with one process's weights and buffers bit for bit" \
    "$tmp/dc1/step-000012/model.safetensors" "$tmp/dc$n/step-000012/model.safetensors"
  l1=$(lastline "$tmp/dm1.log") ln=$(lastline "$tmp/dm$n.log")
  [ -n "$l1" ] && [ "$l1" = "$ln" ] && ok "deterministic mlp np $n prints one process's losses ($ln)" ||
    bad "deterministic losses np $n: '$ln' vs '$l1'"
done
grep -q "deterministic: 4 chunks of 8 rows per global batch, 2 on each rank" "$tmp/dm2.log" &&
  ok "the header names the chunks" || bad "deterministic header" "$(grep determ "$tmp/dm2.log")"
# the default reduction is not world-size independent: one process (a 32-row batch in one matmul) ends with
# other bits than 2 ranks, so the equalities above are the deterministic mode's doing
run "default np 1" 1 "$tmp/nd1.log" -- "${A[@]}" --optimizer adamw --lr 0.003 --save-dir "$tmp/nd1" &&
  run "default np 2" 2 "$tmp/nd2.log" -- "${A[@]}" --optimizer adamw --lr 0.003 --save-dir "$tmp/nd2" && {
  if cmp -s "$tmp/nd1/$M" "$tmp/nd2/$M"; then bad "default np 1 and np 2 are the same bits: the check is void"
  else ok "without deterministic, np 1 and np 2 differ in the last bits (the mode is what makes them equal)"; fi; }

# killed after step 25 (checkpoint 20) at one world size, resumed at another: bit for bit the uninterrupted run
for pair in "2 1" "1 2" "4 2"; do
  set -- $pair
  from=$1 to=$2 d="$tmp/dk$1$2"
  if [ "$from" = 1 ]; then
    mrun "$d.k.log" 120 -- env CTRAIN_TEST_CRASH=step:25 "$CT" train "${D[@]}" --save-every 10 --save-dir "$d"
  else
    mrun "$d.k.log" 120 -- env CTRAIN_TEST_CRASH=step:25 "${MPI[@]}" -np "$from" "$CT" train "${D[@]}" --save-every 10 --save-dir "$d"
  fi
  if [ "$(cat "$d/latest" 2>/dev/null)" != step-000020 ]; then
    bad "deterministic np $from killed after step 25: no checkpoint 20" "$(tail -5 "$d.k.log")"
    continue
  fi
  run "deterministic resume $from -> $to" "$to" "$d.r.log" -- --resume "$d" &&
    same "deterministic: saved at np $from, resumed at np $to: the uninterrupted run's weights bit for bit" \
      "$tmp/dm1/$M" "$d/$M"
done

# deterministic with accumulate_steps 8 and ZeRO (the image task reads the step's 8 global batches at its first
# micro-batch, all or none: 20 batches an epoch are 2 steps and 4 dropped), batchnorm: the same bits at 1, 2, 4
t0=$(date +%s)
CA=("${C[@]}" --epochs 2 --max-steps 0 --set accumulate_steps=8 --optimizer adamw)
run "deterministic cnn accumulate_steps 8 np 1" 1 "$tmp/ca01.log" -- "${CA[@]}" --save-dir "$tmp/ca01"
for n in 1 2 4; do
  run "deterministic cnn accumulate_steps 8 zero_stage 2 np $n" $n "$tmp/ca2$n.log" -- "${CA[@]}" --set zero_stage=2 \
    --save-dir "$tmp/ca2$n" &&
    same "deterministic cnn, accumulate_steps 8, zero_stage 2 at np $n: zero_stage 0's weights and buffers bit for bit" \
      "$tmp/ca01/step-000004/model.safetensors" "$tmp/ca2$n/step-000004/model.safetensors"
done
l1=$(lastline "$tmp/ca01.log") ln=$(lastline "$tmp/ca24.log")
[ -n "$l1" ] && [ "$l1" = "$ln" ] && grep -q "epoch 2/2 \[.*\] 16/20 " "$tmp/ca01.log" &&
  ok "... the same losses printed at np 4 ($ln), 16 of the epoch's 20 batches trained" ||
  bad "deterministic cnn accumulation: '$ln' vs '$l1'" "$(grep 'epoch 2/2' "$tmp/ca01.log")"
echo "  (deterministic accumulation with ZeRO: $(($(date +%s) - t0)) s)"

# ---- errors ------------------------------------------------------------------------------------------------
mrun "$tmp/e1.log" 60 -- "${MPI[@]}" -np 2 "$CT" train "${D[@]}" --set deterministic_chunks=3
grep -q "deterministic_chunks 3 needs a power-of-two number of ranks that divides it" "$tmp/e1.log" &&
  ok "deterministic_chunks 3 at np 2: a clear error" || bad "deterministic_chunks 3" "$(tail -3 "$tmp/e1.log")"
# lamb with zero_stage 1 is no longer refused: in one process (one shard, the whole arena) it is zero_stage 0
run "lamb np 1 zero_stage 0" 1 "$tmp/e2-0.log" -- "${A[@]}" --optimizer lamb --lr 0.003 --max-steps 12 --save-dir "$tmp/e2-0" &&
  run "lamb np 1 zero_stage 1 (no longer an error)" 1 "$tmp/e2-1.log" -- "${A[@]}" --optimizer lamb --lr 0.003 --max-steps 12 \
    --set zero_stage=1 --save-dir "$tmp/e2-1" &&
  same "lamb with zero_stage 1 in one process runs and ends with zero_stage 0's weights bit for bit" \
    "$tmp/e2-0/step-000012/model.safetensors" "$tmp/e2-1/step-000012/model.safetensors"

# a rank killed in a ZeRO run (between reduce-scatters and allgathers): the job ends, naming it
job_ends "zero_stage 2: rank 1 killed (SIGKILL) at step 30, named" "$tmp/kill.log" "rank 1 .*(signal 9|Killed)" -- \
  "${MPI[@]}" -np 1 "$CT" train "${A[@]}" --set zero_stage=2 --epochs 100 : \
  -np 1 env CTRAIN_TEST_CRASH=step:30 "$CT" train "${A[@]}" --set zero_stage=2 --epochs 100

# a rank that hangs (SIGSTOP after step 30): with comm_timeout 5 the waiting rank ends the job, saying why
job_ends "rank 1 stopped (SIGSTOP) at step 30: comm_timeout 5 ends the job, rank 0 saying why" "$tmp/hang.log" \
  "rank 0 of 2 has waited [0-9]+ s in MPI_[A-Za-z_]+.* for the other ranks \(comm_timeout 5 s\): another rank hangs" -- \
  "${MPI[@]}" -np 1 "$CT" train "${A[@]}" --set comm_timeout=5 --epochs 100 : \
  -np 1 env CTRAIN_TEST_CRASH=stop:30 "$CT" train "${A[@]}" --set comm_timeout=5 --epochs 100

summary "dist_zero_test.sh"
