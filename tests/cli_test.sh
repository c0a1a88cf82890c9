#!/usr/bin/env bash
# tests/cli_test.sh - the ctrain CLI end to end: --help, a short real run on
# MNIST, and bad input (missing / truncated / corrupt IDX files, malformed
# recipe, unknown keys and flags): each must exit non-zero with a clear
# message and never crash (exit code < 128, no sanitizer report).
# usage: tests/cli_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT


expect help 0 "usage: ctrain train.*optimizer.lr .*\[--lr\].*memory_budget" -- "$CT" train --help
# the key table of docs/recipes.md is generated from the library's table: it cannot drift
gen=$("$CT" train --help-keys markdown 2>&1)
doc=$(sed -n '/<!-- keys:begin/,/<!-- keys:end/p' docs/recipes.md | sed '1d;$d')
[ -n "$gen" ] && [ "$gen" = "$doc" ] && ok docs_key_table_generated ||
  bad "docs/recipes.md's key table differs from 'ctrain train --help-keys markdown' (regenerate it)" "$(diff <(echo "$gen") <(echo "$doc") | head -5)"
# ctrain graph --model: every model and preset name that recipes/, the README and docs/ use, and every
# name of the model table (graph --help lists them), builds; an unknown one lists them all
names=$( (grep -ohE '"(model|type|preset)": *"[^"]+"' recipes/*.json | sed -E 's/.*: *"([^"]+)"/\1/'
          grep -ohE -- '--model [a-z][a-z0-9_-]*' README.md docs/*.md | sed 's/--model //'
          "$CT" graph --help | sed -n 's/.*print the parameter count of a built-in model: *//p' | tr ',' '\n') |
        tr -d ' ' | sort -u)
for m in $names; do expect "graph_model_$m" 0 "^$m: [0-9]+ parameters" -- "$CT" graph --model "$m"; done
expect graph_model_unknown 1 "model 'resnet-1000' is unknown; built-in models: mlp, cnn, gpt, gpt-char-small.*bert-large" \
  -- "$CT" graph --model resnet-1000
expect unknown_command 2 "unknown command" -- "$CT" frobnicate
# versions: the CLI's, the library's and the headers' agree (include/ctrain/version.h is the one source)
ver=$(sed -n 's/^#define CT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/ctrain/version.h | paste -sd.)
expect version 0 "^ctrain $ver \(libctrain $ver, checkpoint format 1\)$" -- "$CT" --version
# ctrain help CMD is CMD's help, not the top-level one
expect help_cmd_train 0 "^usage: ctrain train" -- "$CT" help train
expect help_cmd_sample 0 "^usage: ctrain sample" -- "$CT" help sample
expect help_cmd_unknown 2 "unknown command 'frobnicate'" -- "$CT" help frobnicate
expect unknown_flag 2 "unknown option '--epoch'" -- "$CT" train --epoch 3
expect missing_value 2 "needs a value" -- "$CT" train --lr

printf '{"epochs": 2,\n  "batch_size": }\n' > "$tmp/bad.json"
expect malformed_recipe 1 "not valid JSON.*line 2" -- "$CT" train --recipe "$tmp/bad.json"
printf '{"epochs": 2, "learning_rate": 0.1}\n' > "$tmp/unknown.json"
expect unknown_recipe_key 1 "unknown recipe key 'learning_rate' \(ctrain calls it 'optimizer.lr'\).*--help-keys" -- "$CT" train --recipe "$tmp/unknown.json"
# a misspelt key: the closest keys, never the list of every key cut off mid-word
printf '{"n_laye": 2}\n' > "$tmp/typo.json"
expect unknown_key_suggests 1 "unknown recipe key 'n_laye' \(did you mean 'n_layer'\)" -- "$CT" train --recipe "$tmp/typo.json"
"$CT" train --recipe "$tmp/typo.json" 2>"$tmp/typo.err" >/dev/null
if grep -q "valid keys" "$tmp/typo.err" || [ "$(head -n 1 "$tmp/typo.err" | wc -c)" -gt 300 ]; then
  bad unknown_key_short "$(head -c 400 "$tmp/typo.err")"
else ok unknown_key_short; fi
printf '{"accumulation_steps": 4}\n' > "$tmp/seed_key.json"
expect seed_spelling 1 "ctrain calls it 'accumulate_steps'" -- "$CT" train --recipe "$tmp/seed_key.json"
printf '{"epochs": 1,\n "batch_size": 8,\n "epochs": 2}\n' > "$tmp/dup.json"
expect duplicate_key 1 "recipe key 'epochs' is given twice" -- "$CT" train --recipe "$tmp/dup.json"
printf '{"optimizer": "sgd", "epochs": 1}\n' > "$tmp/shorthand.json"
expect optimizer_shorthand 0 "model mlp" -- "$CT" graph --recipe "$tmp/shorthand.json"
expect optimizer_shorthand_set 0 "model mlp" -- "$CT" graph --recipe "$tmp/shorthand.json" --set optimizer=lamb
expect bad_env_value 1 "CT_FLUSH_SUBNORMALS='on' is not valid: use 0 or 1" -- env CT_FLUSH_SUBNORMALS=on "$CT" info
expect bad_env_bwd_data 1 "CT_ONEDNN_BWD_DATA='forward' is not valid: use fwd, bwd or auto" -- env CT_ONEDNN_BWD_DATA=forward "$CT" info
expect out_of_range 1 "optimizer.lr.*out of range" -- "$CT" train --lr -1
expect bad_beta 1 "beta1" -- "$CT" train --set optimizer.beta1=1.5
expect missing_recipe 1 "cannot open recipe" -- "$CT" train --recipe "$tmp/nope.json"
printf 'not a trace\n' > "$tmp/notjson.json"
expect doctor_not_json 1 "E70002.*not valid JSON" -- "$CT" doctor "$tmp/notjson.json"
printf '{"displayTimeUnit": "ms"}\n' > "$tmp/noevents.json"
expect doctor_no_events 1 "E40010.*traceEvents" -- "$CT" doctor "$tmp/noevents.json"

expect missing_data 1 "E70001.*$tmp/empty.*setup.sh" -- "$CT" train --data-dir "$tmp/empty"
if [ -f data/mnist/t10k-images-idx3-ubyte ]; then
  mkdir -p "$tmp/trunc" "$tmp/corrupt"
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    cp data/mnist/$f "$tmp/trunc/" && cp data/mnist/$f "$tmp/corrupt/"
  done
  truncate -s 100000 "$tmp/trunc/train-images-idx3-ubyte"
  printf '\x00\x00\x09\x03' | dd of="$tmp/corrupt/t10k-images-idx3-ubyte" bs=1 count=4 conv=notrunc 2>/dev/null
  expect truncated_idx 1 "E70002.*truncated" -- "$CT" train --data-dir "$tmp/trunc"
  expect corrupt_idx 1 "E70002" -- "$CT" train --data-dir "$tmp/corrupt"
  expect short_real_run 0 "test acc" -- "$CT" train --epochs 1 --max-steps 30 --batch-size 64 --hidden 64 --threads 2 \
    --save-dir "$tmp/ver_ck"
  # every file of a checkpoint records the library that wrote it (and the format it is in)
  ckd="$tmp/ver_ck/$(cat "$tmp/ver_ck/latest" 2>/dev/null)"
  for f in model.safetensors train_state.safetensors; do
    if head -c 8192 "$ckd/$f" 2>/dev/null | grep -aq "\"ctrain_library\":\"$ver\"" &&
       head -c 8192 "$ckd/$f" | grep -aq '"ctrain_version":"1"'; then ok "checkpoint_records_version_$f"
    else bad "checkpoint_records_version_$f" "$(head -c 300 "$ckd/$f" 2>&1 | tr -c '[:print:]' '.')"; fi
  done
  # recomputation that lowers the peak (the deep MLP) runs without a warning
  out=$(timeout -k 5 300 "$CT" train --recipe recipes/mnist_deep_mlp_accum_recompute.json --epochs 1 --max-steps 2 --threads 2 --quiet 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "^done: 2 steps" && ! printf '%s' "$out" | grep -q "warning: recomputation"; then
    ok "recompute that pays: no warning"
  else
    bad "recompute that pays (rc $rc) warned or failed" "$out"
  fi
  # profiler: DIR/trace.json and the doctor's verdict; an unwritable DIR only warns
  expect profile_run 0 "profile: .*/prof/trace.json.*compute utilization.*memory.*communication.*data stall" -- \
    "$CT" train --epochs 1 --max-steps 20 --batch-size 64 --hidden 64 --threads 2 --profile "$tmp/prof"
  expect doctor_trace 0 "compute utilization [0-9.]+%.*data stall" -- "$CT" doctor "$tmp/prof/trace.json"
  # an fp16 run whose scale starts far too high: every recorded step overflows and backs off
  expect profile_fp16_overflows 0 "loss scale: 10 overflows \(updates skipped\), 10 backoffs, 0 growths in 10 recorded steps.*first non-finite tensor 'fc1.weight'" -- \
    "$CT" train --epochs 1 --max-steps 16 --batch-size 64 --hidden 64 --threads 2 --precision fp16 \
    --set loss_scale.init_scale=1e30 --set loss_scale.max_scale=1e30 --profile "$tmp/prof16"
  # a run that trains nothing does not pass quietly: most steps skipped warns, all of them is an error
  # naming the tensor; gradients underflowed to zero by a tiny scale; a diverging loss (finite, huge)
  expect fp16_most_steps_skipped_warns 0 "loss scaler: 16 of 16 steps skipped.*first in 'fc1.weight'.*warning: the loss scaler skipped most steps \(16 of 16\)" -- \
    "$CT" train --epochs 1 --max-steps 16 --batch-size 64 --hidden 64 --threads 2 --precision fp16 --quiet \
    --set loss_scale.init_scale=1e30 --set loss_scale.max_scale=1e30
  expect fp16_static_scale_all_overflow 1 "12 of 12 steps skipped.*E40020.*every one of the 12 steps overflowed.*nothing was trained.*'fc1.weight'.*lower loss_scale.init_scale" -- \
    "$CT" train --epochs 1 --max-steps 12 --batch-size 64 --hidden 64 --threads 2 --precision fp16 --quiet \
    --set loss_scale.mode=static --set loss_scale.init_scale=1e30 --set loss_scale.max_scale=1e30
  expect fp16_gradients_underflow 1 "E40010.*gradients were all exactly zero in every step that ran \(12 of 12\).*raise loss_scale.init_scale" -- \
    "$CT" train --epochs 1 --max-steps 12 --batch-size 64 --hidden 64 --threads 2 --precision fp16 --quiet \
    --set loss_scale.mode=static --set loss_scale.init_scale=1e-9 --set loss_scale.min_scale=1e-9
  expect diverged_run 1 "E40020.*the loss [0-9.e+]+ at step 3 .*more than divergence_factor 10000 times the run's first loss 2\.[0-9]+: training diverged" -- \
    "$CT" train --epochs 1 --max-steps 30 --batch-size 64 --hidden 64 --threads 2 --quiet --optimizer sgd --lr 30
  out=$(timeout -k 5 120 "$CT" train --epochs 1 --max-steps 30 --batch-size 64 --hidden 64 --threads 2 --quiet --precision fp16 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] && printf '%s' "$out" | grep -q "^done: 30 steps" && ! printf '%s' "$out" | grep -qiE "warning|skipped|diverged"; then
    ok "healthy fp16 run: no warning"
  else
    bad "healthy fp16 run (rc $rc) warned or failed" "$out"
  fi
  expect doctor_loss_scale 0 "\[warn\] loss scale: 10 overflows.*keep_fp32" -- "$CT" doctor "$tmp/prof16/trace.json"
  expect doctor_no_amp 0 "\[n/a\]  loss scale: no amp events" -- "$CT" doctor "$tmp/prof/trace.json"
  # the CNN on Fashion-MNIST: a trace of conv/batchnorm/pool ops, bounded in size
  if [ -f data/fashion-mnist/t10k-images-idx3-ubyte.gz ]; then
    expect profile_fashion_cnn 0 "profile: .*/prof_cnn/trace.json \([0-9]+ events, 0 dropped" -- \
      "$CT" train --recipe recipes/fashion_cnn.json --epochs 1 --max-steps 15 --threads 2 --quiet --profile "$tmp/prof_cnn"
    expect doctor_cnn_trace 0 "recorded steps.*compute utilization" -- "$CT" doctor "$tmp/prof_cnn/trace.json"
    # fusion_level 1 (the recipe default) runs batchnorm as batchnorm+relu, its backward as batchnorm_bwd+colsum:
    # dgamma / dbeta as colsum nodes, relu's backward inside batchnorm_bwd_data (docs/fusion.md)
    for op in conv2d conv2d_bwd_weight 'batchnorm+relu' maxpool2d_bwd batchnorm_bwd_data colsum; do
      grep -qF "\"op\": \"$op\"" "$tmp/prof_cnn/trace.json" && ok "cnn trace has $op events" || bad "cnn trace lacks $op events"
    done
    for op in relu_mask_bwd batchnorm_bwd_gamma; do
      grep -qF "\"op\": \"$op\"" "$tmp/prof_cnn/trace.json" && bad "cnn trace has $op events (not fused)" ||
        ok "cnn trace has no $op (fused)"
    done
    # and the graph command on the same recipe: fused groups, memory, DOT clusters
    expect graph_cnn 0 "batchnorm\+relu +x 2" -- "$CT" graph --recipe recipes/fashion_cnn.json --dot "$tmp/cnn.dot"
    grep -q "subgraph cluster_fused_0" "$tmp/cnn.dot" && ok "graph dot has fused clusters" || bad "graph dot lacks clusters"
    expect graph_cnn_level0 0 "fusion level 0: 0 fused groups" -- "$CT" graph --recipe recipes/fashion_cnn.json --fusion-level 0 --quiet
    # --set overrides a recipe key (here the precision: the plan then has BF16 weight copies); a bad value names it
    expect graph_cnn_bf16 0 "bf16 weight copies" -- "$CT" graph --recipe recipes/fashion_cnn.json --set precision=bf16
    expect graph_bad_set 1 "'bf17' is not one of" -- "$CT" graph --recipe recipes/fashion_cnn.json --set precision=bf17 --quiet
    # channels_last (default true) runs the convolutions on (N, H, W, C) maps; false keeps NCHW; a model it does not
    # apply to names the models it does
    expect graph_cnn_channels_last 0 "conv2d +conv2 +\[128, 14, 14, 64\]" -- "$CT" graph --recipe recipes/fashion_cnn.json
    expect graph_cnn_nchw 0 "conv2d +conv2 +\[128, 64, 14, 14\]" -- "$CT" graph --recipe recipes/fashion_cnn.json --set channels_last=false
    expect graph_mlp_channels_last 1 "'channels_last' does not apply to model 'mlp' \(it applies to cnn, resnet18" -- \
        "$CT" graph --recipe recipes/mnist_mlp.json --set channels_last=false --quiet
    # recompute_every where it would raise the peak (the recomputed first block meets backward's working set):
    # the run says so, with both figures, and trains without it
    expect recompute_no_gain 0 "warning: recomputation \(recompute_every 1.*would not lower.*\(4[0-9.]+ MiB with it, 3[0-9.]+ without.*training without it.*37\.[0-9] MiB activations.*done: 2 steps" -- \
      "$CT" train --recipe recipes/fashion_cnn.json --set recompute_every=1 --epochs 1 --max-steps 2 --threads 2 --quiet
    size=$(stat -c %s "$tmp/prof_cnn/trace.json" 2>/dev/null || echo 0)
    [ "$size" -gt 0 ] && [ "$size" -lt 4000000 ] && ok "cnn trace is bounded ($size bytes)" || bad "cnn trace size $size"
  else
    bad "data/fashion-mnist is missing: run scripts/setup.sh"
  fi
  : > "$tmp/afile"
  expect profile_unwritable 0 "warning: E70001.*$tmp/afile/sub/trace.json.*done: 5 steps" -- \
    "$CT" train --epochs 1 --max-steps 5 --batch-size 64 --hidden 64 --threads 2 --profile "$tmp/afile/sub"
  # anomaly mode: an exploding learning rate makes an op produce inf; the error names it
  expect anomaly_names_op 1 "E40020.*anomaly: op '[a-z_]+' \(node '[a-z0-9_.]+', (forward|backward)\) produced (inf|NaN).*inputs:" -- \
    "$CT" train --hidden 64 --optimizer sgd --lr 1000 --epochs 1 --max-steps 50 --quiet --threads 2 --set detect_anomaly=true --set divergence_factor=0
  # early stopping on test accuracy (min_delta 0.5 cannot be met): stops after epoch 2 and puts back epoch 1's weights
  expect early_stop_restore_best 0 "epoch 1/3 .*test acc ([0-9.]+)%.*early stop: test accuracy.*restored the best weights \(epoch 1\).*test acc \1%" -- \
    "$CT" train --hidden 32 --epochs 3 --threads 2 --quiet --set early_stop_patience=1 --set early_stop_mode=max \
    --set early_stop_min_delta=0.5 --set early_stop_restore_best=true
  # the prefetcher (default prefetch 4) delivers the synchronous loader's batches: the same losses bit for bit
  pf_run() { "$CT" train --hidden 32 --epochs 1 --max-steps 30 --batch-size 64 --threads 2 --set log_every=10 "$@" 2>&1 |
    grep -oE "(loss|acc) [0-9.]+%?" | tr '\n' ' '; }
  a=$(pf_run --set prefetch=0); b=$(pf_run --set prefetch=3 --set prefetch_threads=2)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "prefetch on/off: same run" || bad "prefetch changes the run" "$(diff <(echo "$a") <(echo "$b"))"
  # augmentation: the same run with 1 or 3 prefetch threads, and synchronously (prefetch 0)
  a=$(pf_run --set augment=true); b=$(pf_run --set augment=true --set prefetch_threads=3)
  c=$(pf_run --set augment=true --set prefetch=0)
  [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" = "$c" ] && ok "augment: same run for any prefetch threads" ||
    bad "augment depends on prefetch threads" "$(diff <(echo "$a") <(echo "$b")); $(diff <(echo "$a") <(echo "$c"))"
  # the seeds' knobs: MLP activation, batchnorm stats once per accumulated step, lr scaling by batch
  expect mlp_gelu 0 "test acc.*done: 10 steps" -- "$CT" train --hidden 32 --epochs 1 --max-steps 10 --threads 2 --quiet --set activation=gelu
  act_loss() { "$CT" train --hidden 32 --epochs 1 --max-steps 10 --threads 2 --quiet "$@" 2>&1 | grep -oE "test loss [0-9.]+" | head -n 1; }
  a=$(act_loss); b=$(act_loss --set activation=gelu)
  [ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] && ok "activation gelu trains another model than relu" || bad "activation ignored ($a / $b)"
  # bn_stats_once: the same training (batch statistics) but other running statistics, so another test loss
  bn_run() { "$CT" train --model cnn --channels 4,8 --dataset fashion-mnist --epochs 1 --max-steps 6 --batch-size 32 \
    --threads 2 --quiet --set accumulate_steps=2 "$@" 2>&1 | grep -oE "(train|test) loss [0-9.]+" | tr '\n' ' '; }
  a=$(bn_run); b=$(bn_run --set bn_stats_once=true)
  if [ "${a%% test*}" = "${b%% test*}" ] && [ -n "${a#*test}" ] && [ "${a#*test}" != "${b#*test}" ]; then
    ok "bn_stats_once: same training, other running statistics"
  else
    bad "bn_stats_once ($a / $b)"
  fi
  expect bn_stats_once_needs_accum 1 "E40010.*bn_stats_once.*accumulate_steps" -- "$CT" train --model cnn --set bn_stats_once=true
  # lr_scaling: the header and the rate the first step ran with (0.001 x 512/256 x sqrt(4096/512))
  expect lr_scaling 0 "lr_scaling linear_then_sqrt: global batch 4096, base 256: lr 0.001 -> 0.00565685.*lr 5.66e-03" -- \
    "$CT" train --hidden 32 --epochs 1 --max-steps 1 --batch-size 1024 --threads 2 --set accumulate_steps=4 \
    --set lr_scaling=linear_then_sqrt --set lr_sqrt_from_batch=512 --set log_every=1
  # memory_budget's first step on the run's own plan (kernels' first use) leaves the run as it was:
  # same losses and accuracies, batchnorm running stats (test loss) and accumulation included
  mb_run() { "$CT" train --model cnn --channels 4,8 --dataset fashion-mnist --epochs 1 --max-steps 12 --batch-size 32 \
    --threads 2 --set accumulate_steps=2 --set log_every=2 "$@" 2>&1 | grep -oE "(loss|acc) [0-9.]+%?" | tr '\n' ' '; }
  a=$(mb_run); b=$(mb_run --set memory_budget=4G)
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "memory_budget: same run" || bad "memory_budget changes the run" "$(diff <(echo "$a") <(echo "$b"))"
  expect prefetch_bad_key 1 "prefetch_threads.*out of range" -- "$CT" train --epochs 1 --set prefetch_threads=0
else
  bad "data/mnist is missing: run scripts/setup.sh"
fi
summary cli_test.sh
