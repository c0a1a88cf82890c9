#!/usr/bin/env bash
# tests/cli_ux_test.sh - the CLI's paper cuts of issue 33, each fixed and kept fixed (tests/cli_test.sh has
# --version, help CMD and the first cases of the recipe's): unknown recipe keys in the guide's spellings,
# duplicate keys across spellings, "optimizer": "sgd", a checkpoint without the library version still
# loading, the progress bar's total under max_steps, the run
# header's keys, the doctor's / report's / sample's messages (one code, a hint that fits), and every recipe
# in recipes/seeds/ loading and compiling. Schedules in epochs are checked against PyTorch in
# tests/test_schedule.c (epoch_keys_match_pytorch).
# usage: tests/cli_ux_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---- unknown keys: did you mean, never a truncated list ------------------------------------
unknown() { # name json wanted-suggestion
  printf '%s\n' "$2" > "$tmp/u.json"
  local out
  out=$("$CT" graph --recipe "$tmp/u.json" --quiet 2>&1)
  if printf '%s' "$out" | grep -qE "(did you mean|ctrain calls it) $3" && printf '%s' "$out" | grep -q -- "--help-keys" &&
     ! printf '%s' "$out" | grep -q "valid keys" && [ ${#out} -lt 700 ]; then ok "unknown key $1: did you mean $3"
  else bad "unknown key $1 (want 'did you mean $3', the --help-keys pointer, < 700 bytes)" "$out"; fi
}
unknown accumulation_steps '{"accumulation_steps": 4}' "'accumulate_steps'"
unknown keep_fp32_modules '{"keep_fp32_modules": ["RoIPool"]}' "'keep_fp32'"
unknown dynamic_scaling '{"dynamic_scaling": true}' "'loss_scale.mode'"
unknown max_batch_size '{"max_batch_size": 32}' "'batch_size"
unknown init_scale '{"init_scale": 65536}' "'loss_scale.init_scale'"
unknown eta_min '{"eta_min": 0.001}' "'min_lr'"
unknown patience '{"patience": 10}' "'early_stop_patience'"
unknown bucket_typo '{"bucket_size_mib": 8}' "'bucket_size_mb'"
unknown n_laye '{"model": "gpt", "dataset": "moby-dick", "n_laye": 2}' "'n_layer'"
unknown flat_lr '{"lr": 0.1}' "'optimizer.lr'"
unknown section_typo '{"optimizer": {"name": "sgd", "momentun": 0.9}}' "'optimizer.momentum'"
expect unknown_key_set 1 "unknown recipe key 'accumulation_steps' \(ctrain calls it 'accumulate_steps'\)" -- \
  "$CT" train --set accumulation_steps=2

# ---- duplicate keys ------------------------------------------------------------------------
dup() { # name json pattern
  printf '%s\n' "$2" > "$tmp/d.json"
  expect "duplicate_$1" 1 "E40010.*$3" -- "$CT" graph --recipe "$tmp/d.json" --quiet
}
dup top '{"epochs": 1, "batch_size": 32, "epochs": 2}' "'epochs' is given twice"
dup section '{"optimizer": {"name": "sgd", "lr": 0.1, "lr": 0.2}}' "'optimizer.lr' is given twice"
dup spellings '{"optimizer.lr": 0.1, "optimizer": {"lr": 0.2}}' "'optimizer.lr' is given twice"
dup model_section '{"model": {"type": "cnn", "channels": [8], "channels": [16]}}' "'model.channels' is given twice"
dup same_field '{"micro_batches": 2, "accumulate_steps": 4}' "'micro_batches' \(2\) and 'accumulate_steps' \(4\) set the same"
# a recipe as ct_recipe_to_json_full writes it (checkpoints, --verbose) names both with one value: it loads
printf '{"micro_batches": 2, "accumulate_steps": 2}\n' > "$tmp/alias.json"
expect alias_same_value 0 "^recipe .*: model mlp" -- "$CT" graph --recipe "$tmp/alias.json" --quiet

# ---- "optimizer": "sgd" -------------------------------------------------------------------
mnist_subset "$tmp/data" train 1200
mnist_subset "$tmp/data" t10k 300
R=(--data-dir "$tmp/data" --hidden 32 --batch-size 64 --threads 2 --seed 1)
printf '{"optimizer": "sgd", "epochs": 1}\n' > "$tmp/sgd.json"
expect optimizer_shorthand 0 '"optimizer":\{"name":"sgd".*done: 2 steps' -- \
  "$CT" train --recipe "$tmp/sgd.json" "${R[@]}" --max-steps 2
expect optimizer_shorthand_set 0 '"optimizer":\{"name":"sgd"' -- "$CT" train "${R[@]}" --set optimizer=sgd --max-steps 1
printf '{"optimizer": "sgd", "optimizer": {"name": "adam"}}\n' > "$tmp/sgd2.json"
expect optimizer_shorthand_and_section 1 "'optimizer' is given twice" -- "$CT" graph --recipe "$tmp/sgd2.json" --quiet

# ---- the progress bar's total honours max_steps (1200 images / 64 = 18 batches an epoch) ----
expect bar_total_max_steps 0 "epoch 1/1 \[#####*\.*\] 5/10 .*epoch 1/1 \[####################\] 10/10 " -- \
  "$CT" train "${R[@]}" --epochs 5 --max-steps 10 --set log_every=5
out=$("$CT" train "${R[@]}" --epochs 5 --max-steps 10 --set log_every=5 2>&1)
printf '%s' "$out" | grep -q "/18 \|epoch 1/5" && bad "bar_total: the epoch's or the run's full length shown" "$out" ||
  ok "bar_total: no /18 or epoch 1/5 with max_steps 10"
expect bar_total_two_epochs 0 "epoch 2/2 \[####################\] 3/3 " -- \
  "$CT" train "${R[@]}" --epochs 5 --max-steps 22 --set log_every=3

# ---- the run header: keys that apply; the rest with --verbose --------------------------------
hdr=$("$CT" train "${R[@]}" --max-steps 1 --epochs 1 2>&1 | grep "recipe")
# what the user set (hidden 32, batch 64, seed 1) is there; defaults (activation, lr) and keys of other models are not
if printf '%s' "$hdr" | grep -q '"hidden":\[32\]' && printf '%s' "$hdr" | grep -q '"batch_size":64' &&
   ! printf '%s' "$hdr" | grep -qE '"tokenizer"|"channels"|"n_layer"|"activation"|"lr"' && [ "${#hdr}" -lt 400 ]; then
  ok "header: the mlp's keys not at their defaults, not tokenizer / channels / n_layer / defaults (${#hdr} bytes)"
else bad "header prints keys that do not apply" "$hdr"; fi
expect header_verbose 0 'keys that do not apply to mlp: \{[^}]*"channels":\[32,64\].*"tokenizer":"char"' -- \
  "$CT" train "${R[@]}" --max-steps 1 --epochs 1 --verbose

# ---- checkpoints record the library version; a checkpoint without it still loads -------------
v=$(sed -n 's/^#define CT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/ctrain/version.h | paste -sd.)
"$CT" train "${R[@]}" --epochs 1 --max-steps 4 --save-every 2 --save-dir "$tmp/ck" > "$tmp/ck.log" 2>&1
st="$tmp/ck/step-000002/train_state.safetensors"
grep -aq "\"ctrain_library\":\"$v\"" "$st" && grep -aq "\"ctrain_library\":\"$v\"" "$tmp/ck/step-000002/model.safetensors" &&
  ok "checkpoint metadata: ctrain_library $v" || bad "no ctrain_library in $st" "$(cat "$tmp/ck.log")"
# the same checkpoint as an older ctrain wrote it: the key renamed (same length, so the header stays valid)
cp -r "$tmp/ck" "$tmp/old"
python3 - "$tmp/old/step-000002/train_state.safetensors" <<'PY'
import sys, zlib
p = sys.argv[1]
b = open(p, "rb").read().replace(b'"ctrain_library"', b'"zzzzzz_library"')
i = b.index(b'"ctrain_crc32":"') + len(b'"ctrain_crc32":"')
b = b[:i] + b"00000000" + b[i + 8:]  # the CRC covers the file with this field zeroed (src/io/safetensors.c)
b = b[:i] + b"%08x" % zlib.crc32(b) + b[i + 8:]
open(p, "wb").write(b)
PY
grep -aq ctrain_library "$tmp/old/step-000002/train_state.safetensors" && bad "the key is still in the old copy"
expect old_checkpoint_resumes 0 "resumed from .*step-000002: step 2,.*done: " -- "$CT" train "${R[@]}" --epochs 1 \
  --max-steps 5 --resume "$tmp/old/step-000002"

# ---- doctor, report and sample: one code, a hint that fits -----------------------------------
: > "$tmp/empty.json"
out=$("$CT" doctor "$tmp/empty.json" 2>&1)
[ "$(printf '%s' "$out" | grep -o E70002 | wc -l)" -eq 1 ] && printf '%s' "$out" | grep -q "hint: .*--profile" &&
  ! printf '%s' "$out" | grep -q "download" && ok "doctor: one code and a trace hint" || bad "doctor message" "$out"
expect doctor_missing 1 "E70001 CT_E_IO: doctor: cannot open.*hint: check the path: ctrain train --profile" -- \
  "$CT" doctor "$tmp/none.json"
"$CT" train "${R[@]}" --epochs 1 --max-steps 14 --profile "$tmp/prof" > "$tmp/prof.log" 2>&1
out=$("$CT" doctor "$tmp/prof/trace.json" 2>&1)
printf '%s' "$out" | grep -q "recipe key memory_budget" && ! printf '%s' "$out" | grep -q "ct_context_opts" &&
  ok "doctor: memory advice names the recipe key" || bad "doctor memory advice" "$out"
expect report_missing 1 "ctrain report: error: E70001 CT_E_IO: cannot open metrics log.*hint: .*--report DIR" -- \
  "$CT" report "$tmp/none.jsonl"
: > "$tmp/empty.jsonl"
expect report_empty 1 "ctrain report: error: E70002 CT_E_CORRUPT: metrics log .* is empty.*hint: " -- \
  "$CT" report "$tmp/empty.jsonl"
out=$("$CT" sample --checkpoint "$tmp/ck" 2>&1)
printf '%s' "$out" | grep -q "is a 'mlp' model" && printf '%s' "$out" | grep -q "hint: .*model gpt" &&
  ! printf '%s' "$out" | grep -q "fix the recipe" && ok "sample on an mlp: a hint about gpt checkpoints" ||
  bad "sample on an mlp checkpoint" "$out"

# ---- schedules in epochs from the CLI, and the guide's examples in recipes/seeds/ --------------
printf '{"step_size_epochs": 30}\n' > "$tmp/sse.json"
expect epoch_key_needs_its_schedule 1 "'step_size_epochs' applies to schedule 'step'" -- \
  "$CT" graph --recipe "$tmp/sse.json" --quiet
expect step_size_epochs_trains 0 "epoch 2/2 .*lr 5.00e-03.*done" -- "$CT" train "${R[@]}" --epochs 2 --optimizer sgd \
  --lr 0.01 --schedule step --set step_size_epochs=1 --set gamma=0.5 --set log_every=18
n=0
for f in recipes/seeds/*.json; do
  n=$((n + 1))
  expect "seed_recipe_$(basename "$f" .json)" 0 "^recipe $f: model " -- "$CT" graph --recipe "$f" --quiet
done
[ "$n" -ge 10 ] && ok "recipes/seeds/ holds $n recipes" || bad "recipes/seeds/ holds only $n recipes"

summary cli_ux_test.sh
