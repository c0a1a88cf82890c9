#!/usr/bin/env bash
# tests/resume_test.sh - a crash that costs nothing: a run killed with
# SIGKILL at several points (between checkpoints, in the middle of writing
# one, after an epoch's last step, at a random moment from outside) and
# resumed with --resume until done ends with the very same weights, bit for
# bit (cmp of model.safetensors and train_state.safetensors), as the run that
# was never interrupted. Also: a checkpoint of another model, a truncated, a
# corrupt and a mixed-up checkpoint give a clear error and a non-zero exit.
# Uses a 1200-image MNIST subset (18 full batches of 64 per epoch, and one of 48
# that recipe C trains at its size).
# usage: tests/resume_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
EXPECT_TIMEOUT=120
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


# run OUTFILE -- command... : runs with a time limit, output to OUTFILE, returns the exit code
run() {
  local out=$1
  shift 2
  ( timeout -k 5 120 "$@" >"$out" 2>&1; exit $? ) 2>/dev/null # no "Killed" notice from the shell
}


if [ ! -f data/mnist/train-images-idx3-ubyte ] || [ ! -f data/mnist/t10k-images-idx3-ubyte ]; then
  echo "  FAIL data/mnist is missing: run scripts/setup.sh"
  echo "resume_test.sh: 0 passed, 1 failed"
  exit 1
fi

# ---- a small MNIST subset -----------------------------------------------------------------
mnist_subset "$tmp/data" train 1200
mnist_subset "$tmp/data" t10k 300

# recipe A: AdamW, cosine with warmup, dropout; 60 steps = 3 epochs + 6 steps (the partial
# last batch of each epoch dropped: dynamic_shapes false keeps the epoch boundaries below)
A=(--data-dir "$tmp/data" --hidden 64 --dropout 0.2 --batch-size 64 --epochs 5 --max-steps 60 --seed 7
   --threads 2 --optimizer adamw --lr 0.003 --schedule cosine --set warmup_steps=5 --set log_every=5 --save-every 10
   --set dynamic_shapes=false)
# recipe B: SGD with momentum, plateau schedule, early stopping state
B=(--data-dir "$tmp/data" --hidden 32,32 --dropout 0.1 --batch-size 64 --epochs 4 --seed 3 --threads 2
   --optimizer sgd --lr 0.05 --momentum 0.9 --schedule plateau --set plateau_patience=0 --set plateau_factor=0.5
   --set early_stop_patience=3 --save-every 7)

same_final() { # NAME REF_DIR DIR STEP
  local f ok_all=1
  for f in model.safetensors train_state.safetensors; do
    if ! cmp -s "$2/step-$4/$f" "$3/step-$4/$f"; then
      ok_all=0
      bad "$1: $f differs from the uninterrupted run" "$(cmp "$2/step-$4/$f" "$3/step-$4/$f" 2>&1)"
    fi
  done
  [ "$ok_all" -eq 1 ] && ok "$1: final checkpoint identical to the uninterrupted run (cmp)"
}

latest_is() { # NAME DIR STEPNAME
  local got
  got=$(cat "$2/latest" 2>/dev/null)
  if [ "$got" = "$3" ]; then ok "$1"; else bad "$1 (latest '$got', want '$3')" "$(ls -la "$2")"; fi
}

# Every run saves to the same $tmp/run (the recipe stored in train_state holds
# save_dir): a finished run's directory is moved aside before the next one.
R=$tmp/run

# ---- uninterrupted reference runs -----------------------------------------------------------
run "$tmp/refA.log" -- "$CT" train "${A[@]}" --save-dir "$R"
rc=$?
mv "$R" "$tmp/refA"
if [ "$rc" -eq 0 ] && [ -f "$tmp/refA/step-000060/model.safetensors" ] && grep -q "checkpoint: step 60 .*end of run" "$tmp/refA.log"; then
  ok "reference run A: 60 steps, checkpoints every 10"
else
  bad "reference run A (rc $rc)" "$(cat "$tmp/refA.log")"
fi

# checkpointing does not change the training: other save points, same weights
run "$tmp/refA2.log" -- "$CT" train "${A[@]}" --save-every 7 --save-dir "$tmp/refA2" --keep 0
if cmp -s "$tmp/refA/step-000060/model.safetensors" "$tmp/refA2/step-000060/model.safetensors"; then
  ok "saving checkpoints elsewhere does not change the weights"
else
  bad "a run with other checkpoint points ends with other weights" "$(cat "$tmp/refA2.log")"
fi
n=$(ls -d "$tmp/refA2"/step-* 2>/dev/null | wc -l)
[ "$n" -eq 9 ] && ok "keep 0 keeps all 9 checkpoints" || bad "keep 0 kept $n checkpoints, want 9"

# ---- killed at chosen points, resumed until done ------------------------------------------
D=$R
run "$tmp/k1.log" -- env CTRAIN_TEST_CRASH=step:25 "$CT" train "${A[@]}" --save-dir "$D"
rc=$?
[ "$rc" -eq 137 ] && ok "killed with SIGKILL after step 25" || bad "crash point step:25 (rc $rc)" "$(cat "$tmp/k1.log")"
latest_is "after the kill latest names step 20" "$D" step-000020

run "$tmp/k2.log" -- env CTRAIN_TEST_CRASH=written:40 "$CT" train --resume "$D"
rc=$?
if [ "$rc" -eq 137 ] && grep -q "resumed from .*step-000020: step 20, epoch 2, batch 2" "$tmp/k2.log"; then
  ok "resumed at step 20 (epoch 2, batch 2), killed while writing checkpoint 40"
else
  bad "resume 1 (rc $rc)" "$(cat "$tmp/k2.log")"
fi
latest_is "a checkpoint killed before its rename is invisible: latest names step 30" "$D" step-000030
[ ! -e "$D/step-000040" ] && ok "no step-000040 after the interrupted write" || bad "step-000040 exists"

run "$tmp/k3.log" -- env CTRAIN_TEST_CRASH=renamed:50 "$CT" train --resume "$D"
rc=$?
[ "$rc" -eq 137 ] && ok "resumed at step 30, killed after renaming checkpoint 50" || bad "resume 2 (rc $rc)" "$(cat "$tmp/k3.log")"
latest_is "killed before latest was updated: latest names step 40" "$D" step-000040

run "$tmp/k4.log" -- env CTRAIN_TEST_CRASH=step:54 "$CT" train --resume "$D"
rc=$?
[ "$rc" -eq 137 ] && ok "resumed at step 40 (rewrites step 50), killed after the last step of epoch 3" || bad "resume 3 (rc $rc)" "$(cat "$tmp/k4.log")"
latest_is "latest names step 50" "$D" step-000050

run "$tmp/k5.log" -- "$CT" train --resume "$D"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^done: 60 steps" "$tmp/k5.log"; then ok "resumed to the end"; else bad "resume 4 (rc $rc)" "$(cat "$tmp/k5.log")"; fi
same_final "kill at chosen points" "$tmp/refA" "$D" 000060
n=$(ls -d "$D"/step-* "$D"/.tmp-* 2>/dev/null | wc -l)
[ "$n" -eq 3 ] && ok "keep 3: three checkpoints left, no temporary directories" || bad "$n checkpoint/temporary directories left, want 3" "$(ls -la "$D")"
# the last epoch line after the resume equals the uninterrupted run's
e_ref=$(grep '^epoch 4/4' "$tmp/refA.log" | sed 's/ [0-9.]* s .*//')
if [ -n "$e_ref" ] && [ "$e_ref" = "$(grep '^epoch 4/4' "$tmp/k5.log" | sed 's/ [0-9.]* s .*//')" ]; then
  ok "the resumed epoch reports the same train loss, accuracy and test results"
else
  bad "epoch lines differ" "$(grep '^epoch 4/4' "$tmp/refA.log" "$tmp/k5.log")"
fi
expect resume_finished_run 0 "the run had ended.*done: 60 steps" -- "$CT" train --resume "$D"
mv "$R" "$tmp/killA"

# ---- killed from outside at a moment the script does not choose ---------------------------
D=$R
tries=0
done_ok=0
resume_args=("${A[@]}" --save-dir "$D")
while [ $tries -lt 12 ]; do
  tries=$((tries + 1))
  ( exec "$CT" train "${resume_args[@]}" >"$tmp/ext$tries.log" 2>&1 ) &
  pid=$!
  # wait for a checkpoint line (or the end), then kill -9 at once
  for _ in $(seq 1 600); do
    grep -qE "checkpoint: step|^done:" "$tmp/ext$tries.log" 2>/dev/null && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.05
  done
  kill -9 $pid 2>/dev/null
  wait $pid 2>/dev/null
  if grep -q "^done:" "$tmp/ext$tries.log" && [ -f "$D/step-000060/model.safetensors" ]; then done_ok=1; break; fi
  [ -f "$D/latest" ] && resume_args=(--resume "$D")
done
if [ $done_ok -eq 1 ]; then ok "kill -9 from outside after each checkpoint line: finished after $tries runs"; else bad "external kills: not finished after $tries runs" "$(tail -n 3 "$tmp"/ext*.log)"; fi
[ $done_ok -eq 1 ] && same_final "kill -9 from outside" "$tmp/refA" "$D" 000060
mv "$R" "$tmp/extA"

# ---- recipe B: SGD momentum, plateau, early stopping ------------------------------------------
run "$tmp/refB.log" -- "$CT" train "${B[@]}" --save-dir "$R"
rc=$?
mv "$R" "$tmp/refB"
last=$(cat "$tmp/refB/latest" 2>/dev/null)
[ "$rc" -eq 0 ] && [ -n "$last" ] && ok "reference run B ($last)" || bad "reference run B (rc $rc)" "$(cat "$tmp/refB.log")"
D=$R
run "$tmp/b1.log" -- env CTRAIN_TEST_CRASH=step:20 "$CT" train "${B[@]}" --save-dir "$D"
run "$tmp/b2.log" -- env CTRAIN_TEST_CRASH=step:40 "$CT" train --resume "$D"
run "$tmp/b3.log" -- env CTRAIN_TEST_CRASH=latest:63 "$CT" train --resume "$D"
run "$tmp/b4.log" -- "$CT" train --resume "$D"
rc=$?
[ "$rc" -eq 0 ] && ok "run B killed three times and resumed" || bad "run B resume (rc $rc)" "$(cat "$tmp/b4.log")"
same_final "run B (plateau lr, early stopping state)" "$tmp/refB" "$D" "${last#step-}"

# ---- recipe P: augmentation on 2 prefetch threads, killed mid-epoch (batch 7 of epoch 2) ----------------
P=(--data-dir "$tmp/data" --hidden 32 --batch-size 64 --epochs 2 --seed 11 --threads 2 --save-every 10
   --set augment=true --set prefetch=3 --set prefetch_threads=2)
run "$tmp/refP.log" -- "$CT" train "${P[@]}" --save-dir "$R"
rc=$?
mv "$R" "$tmp/refP"
last=$(cat "$tmp/refP/latest" 2>/dev/null)
[ "$rc" -eq 0 ] && [ -n "$last" ] && ok "reference run P ($last)" || bad "reference run P (rc $rc)" "$(cat "$tmp/refP.log")"
D=$R
run "$tmp/p1.log" -- env CTRAIN_TEST_CRASH=step:25 "$CT" train "${P[@]}" --save-dir "$D"
run "$tmp/p2.log" -- "$CT" train --resume "$D"
rc=$?
[ "$rc" -eq 0 ] && ok "run P (augment, prefetch) killed mid-epoch and resumed" || bad "run P resume (rc $rc)" "$(cat "$tmp/p2.log")"
same_final "run P (augment, prefetch threads)" "$tmp/refP" "$D" "${last#step-}"
rm -rf "$tmp/refP" "$D"

# ---- recipe C: a CNN (batchnorm running statistics are buffers); dynamic shapes: 19 steps an
# epoch, the last of 48 images at its size (1200 = 18 x 64 + 48), 57 steps ------------------------
C=(--model cnn --channels 4,8 --data-dir "$tmp/data" --batch-size 64 --epochs 3 --seed 5 --threads 2 --save-every 10)
run "$tmp/refC.log" -- "$CT" train "${C[@]}" --save-dir "$R"
rc=$?
mv "$R" "$tmp/refC"
[ "$rc" -eq 0 ] && [ "$(cat "$tmp/refC/latest" 2>/dev/null)" = step-000057 ] && ok "reference run C (CNN, 57 steps)" || bad "reference run C (rc $rc)" "$(cat "$tmp/refC.log")"
run "$tmp/c1.log" -- env CTRAIN_TEST_CRASH=step:23 "$CT" train "${C[@]}" --save-dir "$R"
run "$tmp/c2.log" -- "$CT" train --resume "$R"
rc=$?
[ "$rc" -eq 0 ] && ok "run C killed at step 23 and resumed" || bad "run C resume (rc $rc)" "$(cat "$tmp/c2.log")"
same_final "run C (CNN with batchnorm buffers, partial batches)" "$tmp/refC" "$R" 000057
mv "$R" "$tmp/killC"

# ---- recipe E: gradient accumulation (3 micro-batches a step), clipping, no decay on
# biases, activation checkpointing: 18 batches an epoch = 6 steps, 3 epochs = 18 steps
E=(--data-dir "$tmp/data" --hidden 64,32 --dropout 0.2 --batch-size 64 --epochs 3 --seed 11 --threads 2
   --set accumulate_steps=3 --set clip_grad_norm=0.5 --set optimizer.no_decay_bias_norm=true
   --set recompute_every=1 --set log_every=2 --save-every 4)
run "$tmp/refE.log" -- "$CT" train "${E[@]}" --save-dir "$R"
rc=$?
mv "$R" "$tmp/refE"
if [ "$rc" -eq 0 ] && [ "$(cat "$tmp/refE/latest" 2>/dev/null)" = step-000018 ] && grep -q "grad norm" "$tmp/refE.log"; then
  ok "reference run E (accumulation x3, clipping, recompute: 18 steps, grad norm shown)"
else
  bad "reference run E (rc $rc)" "$(cat "$tmp/refE.log")"
fi
run "$tmp/e1.log" -- env CTRAIN_TEST_CRASH=step:10 "$CT" train "${E[@]}" --save-dir "$R"
run "$tmp/e2.log" -- "$CT" train --resume "$R"
rc=$?
[ "$rc" -eq 0 ] && grep -q "resumed from .*step-000008" "$tmp/e2.log" && ok "run E killed at step 10, resumed from step 8" ||
  bad "run E resume (rc $rc)" "$(cat "$tmp/e2.log")"
same_final "run E (accumulation, clipping, recompute)" "$tmp/refE" "$R" 000018
mv "$R" "$tmp/killE"

# ---- recipe F: FP16 with the dynamic loss scaler (growth every 4 steps, so the scale moves) -------
F=(--data-dir "$tmp/data" --hidden 32 --batch-size 64 --epochs 2 --seed 9 --threads 2 --save-every 10
   --precision fp16 --set loss_scale.growth_interval=4 --set accumulate_steps=2)
run "$tmp/refF.log" -- "$CT" train "${F[@]}" --save-dir "$R"
rc=$?
mv "$R" "$tmp/refF"
last=$(cat "$tmp/refF/latest" 2>/dev/null)
[ "$rc" -eq 0 ] && [ -n "$last" ] && ok "reference run F (fp16, $last)" || bad "reference run F (rc $rc)" "$(cat "$tmp/refF.log")"
run "$tmp/f1.log" -- env CTRAIN_TEST_CRASH=step:13 "$CT" train "${F[@]}" --save-dir "$R"
run "$tmp/f2.log" -- "$CT" train --resume "$R"
rc=$?
[ "$rc" -eq 0 ] && ok "run F (fp16, loss scaler) killed at step 13 and resumed" || bad "run F resume (rc $rc)" "$(cat "$tmp/f2.log")"
same_final "run F (fp16: scale sequence and skipped steps continue)" "$tmp/refF" "$R" "${last#step-}"
rm -rf "$tmp/refF" "$R"

# ---- a checkpoint is data, not instructions ------------------------------------------------------
# A checkpoint whose stored recipe names other paths (save_dir, metrics_file, profile_dir: here a
# "victim" directory with a shell rc file), resumed from a copy, touches nothing outside the
# directory given on the command line: checkpoints continue in the copy, no log is appended,
# no trace written, nothing of the original pruned.
V=$tmp/victim
mkdir -p "$V"
run "$tmp/v1.log" -- "$CT" train "${A[@]}" --max-steps 30 --keep 0 --save-dir "$V/save" --metrics "$V/rc.sh" --profile "$V/prof"
rc=$?
[ "$rc" -eq 0 ] && [ -f "$V/save/step-000030/model.safetensors" ] && [ -s "$V/rc.sh" ] && ok "victim run: checkpoints, metrics and trace written" ||
  bad "victim run (rc $rc)" "$(cat "$tmp/v1.log")"
cp -r "$V/save" "$tmp/given"
snap() { (cd "$V" && find . -printf '%p %y %s %T@\n' | sort && find . -type f -exec md5sum {} + | sort); }
before=$(snap)
run "$tmp/v2.log" -- "$CT" train --resume "$tmp/given/step-000010" --max-steps 40
rc=$?
run "$tmp/v3.log" -- "$CT" train --resume "$tmp/given" --max-steps 50
rc3=$?
after=$(snap)
if [ "$rc" -eq 0 ] && [ "$rc3" -eq 0 ]; then ok "resumed a copied checkpoint twice (from a step dir, then the save dir)"; else
  bad "resume of the copy (rc $rc, $rc3)" "$(cat "$tmp/v2.log" "$tmp/v3.log")"; fi
[ "$before" = "$after" ] && ok "nothing in the directories the checkpoint names was written, appended or pruned" ||
  bad "the resume touched paths stored in the checkpoint" "$(diff <(echo "$before") <(echo "$after"))"
latest_is "checkpoints continued in the copy (latest step 50)" "$tmp/given" step-000050
n=$(ls -d "$tmp/given"/step-* 2>/dev/null | wc -l)
[ "$n" -eq 5 ] && ok "the copy holds steps 10..50 (keep 0 from the stored recipe still applies)" || bad "$n step dirs in the copy, want 5" "$(ls -la "$tmp/given")"
if grep -q "save_dir '$V/save', which is not used" "$tmp/v2.log" && grep -q "metrics_file '$V/rc.sh', which is not used" "$tmp/v2.log" &&
   grep -q "profile_dir '$V/prof', which is not used" "$tmp/v2.log"; then
  ok "the resume says which stored paths it did not follow"
else
  bad "no note about the stored paths" "$(cat "$tmp/v2.log")"
fi
# the command line may still name paths
run "$tmp/v4.log" -- "$CT" train --resume "$tmp/given" --max-steps 60 --save-dir "$tmp/elsewhere" --metrics "$tmp/m.jsonl"
rc=$?
[ "$rc" -eq 0 ] && [ -f "$tmp/elsewhere/step-000060/model.safetensors" ] && [ -s "$tmp/m.jsonl" ] && ok "--save-dir and --metrics on the command line apply to a resume" ||
  bad "command-line paths on resume (rc $rc)" "$(cat "$tmp/v4.log"; ls -la "$tmp/elsewhere")"
rm -rf "$V" "$tmp/given" "$tmp/elsewhere"

# ---- bad checkpoints ----------------------------------------------------------------------------
expect other_model 1 "E40010.*hidden 128.*differs from the checkpoint.*hidden 64" -- "$CT" train --resume "$tmp/refA" --hidden 128
expect other_optimizer 1 "E40010.*saved with optimizer 'adamw' but this run uses 'sgd'" -- "$CT" train --resume "$tmp/refA" --optimizer sgd
mkdir -p "$tmp/trunc" && cp -r "$tmp/refA/step-000040" "$tmp/trunc/"
truncate -s 5000 "$tmp/trunc/step-000040/model.safetensors"
expect truncated_checkpoint 1 "E70002.*truncated" -- "$CT" train --resume "$tmp/trunc/step-000040"
mkdir -p "$tmp/flip" && cp -r "$tmp/refA/step-000040" "$tmp/flip/"
printf '\x41' | dd of="$tmp/flip/step-000040/train_state.safetensors" bs=1 seek=3000 count=1 conv=notrunc 2>/dev/null
expect corrupt_checkpoint 1 "E70002.*corrupt" -- "$CT" train --resume "$tmp/flip/step-000040"
mkdir -p "$tmp/mixed" && cp -r "$tmp/refA/step-000040" "$tmp/mixed/"
cp "$tmp/refA/step-000050/model.safetensors" "$tmp/mixed/step-000040/"
expect mixed_checkpoint 1 "E70002.*does not belong" -- "$CT" train --resume "$tmp/mixed/step-000040"
expect missing_checkpoint 1 "E70001.*no checkpoint" -- "$CT" train --resume "$tmp/nothing"
expect resume_needs_dir 2 "needs a checkpoint directory" -- "$CT" train --resume
if grep -l "Sanitizer" "$tmp"/*.log >/dev/null 2>&1; then
  bad "a sanitizer report in the run logs" "$(grep -h -A5 "Sanitizer" "$tmp"/*.log | head -20)"
else
  ok "no sanitizer report in any run"
fi
summary resume_test.sh
