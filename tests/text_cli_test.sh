#!/usr/bin/env bash
# tests/text_cli_test.sh - `ctrain train` with model gpt / bert on a text
# corpus and `ctrain sample`: tiny happy-path runs, then bad input (a corpus
# shorter than the context, a context longer than the model's, a malformed
# BPE file, a prompt byte outside the vocabulary, bad sampling flags): each
# must exit non-zero with a message naming the problem.
# usage: tests/text_cli_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

TINY=(--model gpt --set dataset=moby-dick --set n_layer=1 --set d_model=32 --set n_head=2 --set context=32
      --batch-size 4 --max-steps 20 --set eval_every=10 --set eval_batches=4 --threads 2)

expect gpt_tiny_train 0 "val loss [0-9.]+  val ppl.*checkpoint: step 20.*done: 20 steps" -- \
  "$CT" train "${TINY[@]}" --save-dir "$tmp/gpt" --metrics "$tmp/m.jsonl"
[ -f "$tmp/gpt/latest" ] && [ -f "$tmp/gpt/step-000020/tokenizer.vocab" ] && ok gpt_vocab_saved || bad gpt_vocab_saved
grep -q '"type":"eval"' "$tmp/m.jsonl" 2>/dev/null && ok gpt_metrics_eval || bad gpt_metrics_eval
out=$("$CT" sample --checkpoint "$tmp/gpt" --prompt "Call me" --tokens 50 --seed 3 2>&1)
rc=$?
# the prompt, then 50 characters, then a newline
n=$(printf '%s' "$out" | head -c 100000 | wc -c)
if [ $rc -eq 0 ] && [ "${out:0:7}" = "Call me" ] && [ "$n" -ge 57 ]; then ok sample_prints; else bad "sample_prints (rc $rc, $n bytes)" "$out"; fi
out2=$("$CT" sample --checkpoint "$tmp/gpt" --prompt "Call me" --tokens 50 --seed 3 2>&1)
[ "$out" = "$out2" ] && ok sample_seeded_repeatable || bad sample_seeded_repeatable
expect gpt_tiny_bf16 0 "precision bf16.*done: 5 steps" -- "$CT" train "${TINY[@]}" --max-steps 5 --precision bf16
expect bert_tiny_train 0 "val loss [0-9.]+.*done: 6 steps" -- \
  "$CT" train --model bert --set dataset=moby-dick --set n_layer=1 --set d_model=32 --set n_head=2 --set context=32 \
  --batch-size 4 --max-steps 6 --set eval_every=3 --set eval_batches=2 --threads 2 --save-dir "$tmp/bert"

# fp16 with a scale so large every step overflows: loss_scale.floor=stop ends the run cleanly
expect gpt_fp16_floor_stop 0 "loss scaler: the scale stayed at loss_scale.min_scale.*stopping.*val loss [0-9.]+.*done: [0-9]+ steps" -- \
  "$CT" train "${TINY[@]}" --precision fp16 --set loss_scale.init_scale=1e30 --set loss_scale.max_scale=1e30 \
  --set loss_scale.min_scale=1e29 --set loss_scale.floor=stop --set loss_scale.floor_patience=3

# resume: 20 steps in one go == 10 steps, checkpoint, resume to 20 (dropout on:
# its mask is keyed by the step, the batches by (seed, step))
expect gpt_resume_ref 0 "done: 20 steps" -- "$CT" train "${TINY[@]}" --dropout 0.1 --save-dir "$tmp/ra"
expect gpt_resume_first 0 "checkpoint: step 10" -- "$CT" train "${TINY[@]}" --dropout 0.1 --save-dir "$tmp/rb" \
  --save-every 10
expect gpt_resume_continue 0 "resumed from .*step-000010: step 10.*done: 20 steps" -- \
  "$CT" train --resume "$tmp/rb/step-000010" --save-dir "$tmp/rc"
if cmp -s "$tmp/ra/step-000020/model.safetensors" "$tmp/rc/step-000020/model.safetensors"; then
  ok gpt_resume_bit_identical
else
  bad gpt_resume_bit_identical "$(ls "$tmp/ra/step-000020" "$tmp/rc/step-000020" 2>&1)"
fi

# one trainer for every model: the profiler, early stopping and the plateau schedule work for GPT too
expect gpt_profile 0 "profile: .*/gprof/trace.json.*compute utilization.*done: 6 steps" -- \
  "$CT" train "${TINY[@]}" --max-steps 6 --set eval_every=3 --profile "$tmp/gprof"
[ -s "$tmp/gprof/trace.json" ] && grep -q '"op": *"attention"' "$tmp/gprof/trace.json" && ok gpt_trace_has_attention ||
  bad gpt_trace_has_attention
# min_delta 100 cannot be met: the second evaluation (step 20 of 40) stops the run
expect gpt_early_stop 0 "step 20/40 .*val loss.*early stop: val loss did not improve by 100 for 1 evaluations.*restored the best weights \(evaluation 1\).*done: 20 steps" -- \
  "$CT" train "${TINY[@]}" --max-steps 40 --set early_stop_patience=1 --set early_stop_min_delta=100 --set early_stop_restore_best=true
expect gpt_plateau 0 "plateau: val loss did not improve; lr -> 0.0005.*done: 20 steps" -- \
  "$CT" train "${TINY[@]}" --schedule plateau --set plateau_patience=0 --set plateau_factor=0.5 --set plateau_threshold=10
expect key_not_for_gpt 1 "E40010.*recipe key 'augment' does not apply to model 'gpt' \(it applies to mlp, cnn, resnet18, [a-z0-9_, ]*swin_b[a-z0-9_, ]*\)" -- \
  "$CT" train "${TINY[@]}" --set augment=true
expect key_not_for_mlp 1 "E40010.*recipe key 'tokenizer' does not apply to model 'mlp'" -- "$CT" train --set tokenizer=byte

# memory_budget: too small -> E60003 with numbers and advice; the advised batch size then fits
MB=(--model gpt --set dataset=moby-dick --set n_layer=2 --set d_model=64 --set n_head=2 --set context=64
    --batch-size 64 --max-steps 2 --set eval_every=2 --set eval_batches=1 --threads 2 --set memory_budget=40M)
out=$(timeout -k 5 300 "$CT" train "${MB[@]}" 2>&1)
rc=$?
adv=$(printf '%s' "$out" | grep -oE 'batch_size=[0-9]+ saves [0-9.]+ MiB \(fits\)' | head -n 1)
if [ $rc -eq 1 ] && printf '%s' "$out" | grep -qE 'E60003.*memory_budget 40.0 MiB is too small: the plan needs [0-9.]+ MiB.*activations and workspace [0-9.]+' && [ -n "$adv" ]; then
  ok memory_budget_advice
else
  bad "memory_budget_advice (rc $rc)" "$out"
fi
b=$(printf '%s' "$adv" | sed -E 's/batch_size=([0-9]+).*/\1/')
expect memory_budget_advice_fits 0 "done: 2 steps" -- "$CT" train "${MB[@]}" --batch-size "${b:-0}"

# bad input
printf 'a tiny corpus\n' > "$tmp/tiny.txt"
expect corpus_shorter_than_context 1 "tiny.txt.*corpus shorter than the context" -- \
  "$CT" train "${TINY[@]}" --set text_file="$tmp/tiny.txt"
expect missing_corpus 1 "nope.txt" -- "$CT" train "${TINY[@]}" --set text_file="$tmp/nope.txt"
expect context_too_long 1 "context.*2048 positions is longer than the model's context \(256" -- \
  "$CT" train "${TINY[@]}" --set context=2048
expect head_divides 1 "d_model 32 is not divisible by n_head 3" -- "$CT" train "${TINY[@]}" --set n_head=3
expect preset_of_other_model 1 "preset 'bert-base' is not a gpt preset" -- "$CT" train "${TINY[@]}" --set preset=bert-base
mkdir -p "$tmp/bpe"
cp data/text/gpt2/encoder.json "$tmp/bpe/encoder.json"
printf '#version: 0.2\n\xc4\xa0 t\nthis line has four\n' > "$tmp/bpe/vocab.bpe"
expect malformed_bpe 1 "vocab.bpe.*(line|merge)" -- "$CT" train "${TINY[@]}" --set tokenizer=gpt2 --set bpe_dir="$tmp/bpe"
expect text_model_needs_text 1 "trains on text" -- "$CT" train --model gpt --dataset mnist
expect prompt_outside_vocab 1 "prompt.*not in the char tokenizer's vocabulary" -- \
  "$CT" sample --checkpoint "$tmp/gpt" --prompt $'\x01abc'
expect sample_temperature 1 "temperature must be > 0" -- "$CT" sample --checkpoint "$tmp/gpt" --temperature 0
expect sample_top_k 1 "top-k must be an integer >= 0" -- "$CT" sample --checkpoint "$tmp/gpt" --top-k -2
expect sample_missing_checkpoint 1 "no checkpoint at" -- "$CT" sample --checkpoint "$tmp/none"
expect sample_bert_checkpoint 1 "'bert' model; ctrain sample needs a GPT" -- "$CT" sample --checkpoint "$tmp/bert"
expect sample_no_checkpoint_flag 2 "--checkpoint DIR is required" -- "$CT" sample --tokens 5

# recompute_blocks (checkpointing by transformer blocks): the activation arena of `ctrain graph` falls for the
# presets gpt-char-small and gpt2-124m (batch 8, their full context; plan only, nothing allocated)
arena() { "$CT" graph --recipe "$1" "${@:2}" --quiet 2>&1 | sed -n 's/.*activation arena \([0-9.]*\) MiB.*/\1/p'; }
for m in gpt-char-small gpt2-124m; do
  printf '{"model": "%s", "dataset": "moby-dick", "batch_size": 8}\n' "$m" > "$tmp/$m.json"
  a0=$(arena "$tmp/$m.json"); a2=$(arena "$tmp/$m.json" --set recompute_blocks=2)
  echo "       $m batch 8: activation arena $a0 MiB, with recompute_blocks=2 $a2 MiB"
  if [ -n "$a0" ] && [ -n "$a2" ] && awk -v a="$a0" -v b="$a2" 'BEGIN { exit !(b < a) }'; then ok "recompute_blocks_arena_$m"
  else bad "recompute_blocks_arena_$m ($a0 -> $a2 MiB)"; fi
done
expect recompute_blocks_train 0 "recompute_blocks.*done: 3 steps" -- \
  "$CT" train "${TINY[@]}" --set n_layer=2 --set recompute_blocks=1 --max-steps 3 --set log_every=1
expect recompute_blocks_with_every 1 "'recompute_every' \(1\) and 'recompute_blocks' \(2\) are both set; use one" -- \
  "$CT" train "${TINY[@]}" --set recompute_every=1 --set recompute_blocks=2
expect recompute_blocks_not_cnn 1 "'recompute_blocks' does not apply to model 'cnn'" -- \
  "$CT" train --model cnn --set recompute_blocks=1

# ctrain graph with pipeline_stages 2: one line per stage (its blocks, FLOPs, parameters, activations x the
# micro-batches its schedule keeps in flight); the stages' parameters add up to the model's plus the tied
# embedding (85 characters x d_model 32 = 2720, in the first stage and the last); no MPI
printf '{"model": "gpt", "dataset": "moby-dick", "n_layer": 4, "d_model": 32, "n_head": 4, "context": 16, "batch_size": 8, "accumulate_steps": 4, "pipeline_stages": 2}\n' > "$tmp/pp.json"
out=$("$CT" graph --recipe "$tmp/pp.json" --quiet 2>&1)
model=$(printf '%s\n' "$out" | sed -nE 's/^pipeline stages: .*; model ([0-9]+) parameters, the stages hold ([0-9]+) .*/\1/p')
held=$(printf '%s\n' "$out" | sed -nE 's/^pipeline stages: .*; model ([0-9]+) parameters, the stages hold ([0-9]+) .*/\2/p')
stages=$(printf '%s\n' "$out" | sed -nE 's/^  stage [0-9]+: .*, ([0-9]+) parameters \(.*/\1/p')
sum=$(printf '%s\n' "$stages" | awk '{ s += $1 } END { print s + 0 }')
if [ "$(printf '%s\n' "$stages" | grep -c .)" -eq 2 ] && [ -n "$model" ] && [ "$sum" = "$held" ] &&
   [ $((held - model)) -eq 2720 ] && printf '%s\n' "$out" | grep -qE "^  stage 0: blocks 0\.\.1 .* x 2 micro-batches in flight" &&
   printf '%s\n' "$out" | grep -qE "^  stage 1: blocks 2\.\.3 .* x 1 micro-batch in flight"; then
  ok "graph_pipeline_stages (model $model parameters, stages $(echo $stages | tr ' ' '+') = $held)"
else bad "graph_pipeline_stages (model '$model', held '$held', stages '$stages')" "$out"; fi
expect graph_pipeline_gpipe 0 "stage 0: .*x 4 micro-batches in flight.*stage 1: .*x 4 micro-batches in flight" -- \
  "$CT" graph --recipe "$tmp/pp.json" --quiet --set pipeline_schedule=gpipe
expect graph_pipeline_split 0 "stage 0: block 0 \(transformer\.h\.0\..*stage 1: blocks 1\.\.3" -- \
  "$CT" graph --recipe "$tmp/pp.json" --quiet --set pipeline_split=transformer.h.1
expect graph_pipeline_interleaved 0 "2 stages x 2 pieces each.*stage 0: piece 0 \(block 0 .*piece 2 \(block 2 .*x 5 micro-batches" -- \
  "$CT" graph --recipe "$tmp/pp.json" --quiet --set pipeline_schedule=interleaved
expect graph_pipeline_bad_split 1 "pipeline_split: 'nope' names no block of this model" -- \
  "$CT" graph --recipe "$tmp/pp.json" --quiet --set pipeline_split=nope

summary text_cli_test
