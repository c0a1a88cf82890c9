#!/usr/bin/env bash
# tests/fit_test.sh - recipe key fit (src/train/fit.c): a GPT whose plan at the recipe's batch is far over
# memory_budget (fit off: E60003) trains with fit auto at the same global batch, within the budget (the process's
# peak resident memory, /usr/bin/time -v), and resumes the configuration it chose; fit max_batch grows the batch
# and scales the learning rate by lr_scaling; `ctrain graph --fit` prints the candidates; errors: fit without
# memory_budget, a budget nothing fits in; with mpirun, two ranks choose among the ZeRO stages too.
# usage: tests/fit_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 2 blocks of d_model 128, context 64: at batch 128 the plan needs ~150 MiB (activations), at 32 ~50 MiB
cat >"$tmp/r.json" <<'J'
{"model": "gpt", "preset": "gpt-char-small", "dataset": "moby-dick", "tokenizer": "char", "context": 64,
 "n_layer": 2, "d_model": 128, "n_head": 4, "batch_size": 128, "max_steps": 3, "eval_every": 3, "eval_batches": 1,
 "optimizer": {"name": "adamw", "lr": 1e-3}, "memory_budget": "96M", "fit": "auto", "log_every": 1, "threads": 2}
J
R=(--recipe "$tmp/r.json")

# the recipe's own configuration does not fit: fit off fails with the budget's advice
expect fit_off_over_budget 1 "E60003.*memory_budget 96.0 MiB is too small" -- "$CT" train "${R[@]}" --set fit=off

# ctrain graph --fit: the table without training; the recipe's batch is too big, the chosen one marked
out=$(timeout -k 5 60 "$CT" graph "${R[@]}" --fit 2>&1)
if printf '%s\n' "$out" | grep -qE '^ +128 x 1 +no recompute +0 +fp32 +[0-9.]+ +[0-9.]+  too big' &&
   printf '%s\n' "$out" | grep -qE '^  \* +[0-9]+ x [0-9]+ .* fits$' &&
   printf '%s\n' "$out" | grep -qE '^fit: chose batch_size [0-9]+ x accumulate_steps [0-9]+ \(global batch 128, as the recipe'; then
  ok graph_fit_table
else bad graph_fit_table "$out"; fi
[ "$(printf '%s\n' "$out" | grep -cE '^  [ *]  [0-9]+ x [0-9]+ ')" -ge 12 ] && ok graph_fit_candidates ||
  bad graph_fit_candidates "$out"

# fit auto trains: no E60003, the global batch unchanged (B x A rows = 128), the peak resident memory in the budget
log=$tmp/auto.log
TIME=(); [ -x /usr/bin/time ] && TIME=(/usr/bin/time -v)
"${TIME[@]}" timeout -k 5 120 "$CT" train "${R[@]}" --save-dir "$tmp/ck" >"$log" 2>&1
rc=$?
rows=$(grep -oE 'steps of [0-9]+ x [0-9]+ rows' "$log" | head -1)
b=$(printf '%s' "$rows" | awk '{print $3}'); a=$(printf '%s' "$rows" | awk '{print $5}')
if [ $rc -eq 0 ] && ! grep -q E60003 "$log" && grep -q "done: 3 steps" "$log" && [ -n "$b" ] && [ $((b * a)) -eq 128 ] &&
   [ "$a" -gt 1 ] && grep -qE '^  \* .*\(tried: fits, [0-9.]+ MiB resident\)' "$log"; then
  ok fit_auto_trains_same_global_batch
else bad "fit_auto_trains_same_global_batch (rc $rc, '$rows')" "$(grep -vE '^  recipe' "$log")"; fi
kb=$(grep -oE 'Maximum resident set size \(kbytes\): [0-9]+' "$log" | grep -oE '[0-9]+$')
if ldd "$CT" 2>/dev/null | grep -q libasan; then echo "  SKIP peak resident memory: a sanitizer build (shadow memory)"
elif [ ${#TIME[@]} -eq 0 ]; then echo "  SKIP peak resident memory: no /usr/bin/time"
elif [ -n "$kb" ] && [ "$kb" -le $((96 * 1024)) ]; then ok "fit_auto_peak_rss_within_budget (${kb} kB)"
else bad "fit_auto_peak_rss_within_budget (${kb:-?} kB > 98304)"; fi

# the checkpoint keeps the chosen recipe (fit off in it): a resume trains the same configuration without a search
out=$(timeout -k 5 120 "$CT" train --resume "$tmp/ck" --max-steps 4 --set eval_every=4 2>&1)
if printf '%s' "$out" | grep -q "steps of $b x $a rows" && printf '%s' "$out" | grep -q "done: 4 steps" &&
   ! printf '%s' "$out" | grep -q "^fit "; then ok fit_resume_keeps_choice
else bad fit_resume_keeps_choice "$(printf '%s\n' "$out" | grep -v '^  recipe')"; fi

# a trial step that runs out of memory: the next candidate that fits is tried (CT_FIT_TRIAL_OOM=2: the first two)
out=$(CT_FIT_TRIAL_OOM=2 timeout -k 5 120 "$CT" train "${R[@]}" --max-steps 1 --set eval_every=1 2>&1)
if [ "$(printf '%s\n' "$out" | grep -c 'fits (tried: out of memory')" -eq 2 ] &&
   printf '%s\n' "$out" | grep -qE '^  \* .*fits \(tried: fits' && printf '%s' "$out" | grep -q "done: 1 steps"; then
  ok fit_trial_oom_takes_next
else bad fit_trial_oom_takes_next "$(printf '%s\n' "$out" | grep -v '^  recipe')"; fi

# fit max_batch: batch 16 grows (to 32 here: 64 does not fit), the lr scaled linearly from lr_base_batch 16
out=$(timeout -k 5 120 "$CT" train "${R[@]}" --set fit=max_batch --set batch_size=16 --set lr_scaling=linear \
  --set lr_base_batch=16 --max-steps 2 --set eval_every=2 2>&1)
B=$(printf '%s\n' "$out" | sed -nE 's/^fit: chose batch_size ([0-9]+) x accumulate_steps 1 \(global batch [0-9]+\).*/\1/p')
want=$(awk -v b="${B:-0}" 'BEGIN { printf "%g", 0.001 * b / 16 }')
if [ -n "$B" ] && [ "$B" -gt 16 ] && printf '%s' "$out" | grep -q "steps of $B x 1 rows" &&
   printf '%s' "$out" | grep -q "lr_scaling linear: global batch $B, base 16: lr 0.001 -> $want\$" &&
   printf '%s' "$out" | grep -qE "step 1/2 .* lr $(awk -v w="$want" 'BEGIN { printf "%.2e", w }')" &&
   printf '%s' "$out" | grep -q "done: 2 steps"; then
  ok "fit_max_batch_grows_lr_scaled (batch 16 -> $B, lr 0.001 -> $want)"
else bad "fit_max_batch_grows_lr_scaled (batch ${B:-?})" "$(printf '%s\n' "$out" | grep -v '^  recipe')"; fi

# errors
expect fit_needs_budget 1 "E40010.*recipe key 'fit' \(auto\) needs memory_budget > 0" -- \
  "$CT" train "${R[@]}" --set memory_budget=0
expect graph_fit_needs_budget 1 "E40010.*needs memory_budget" -- "$CT" graph "${R[@]}" --fit --set memory_budget=0
expect fit_nothing_fits 1 "E60003.*fit auto: no configuration fits in memory_budget 8.0 MiB: the smallest of the [0-9]+ candidates \(batch_size 1 x accumulate_steps 128.*needs [0-9.]+ MiB.*raise memory_budget to at least" -- \
  "$CT" train "${R[@]}" --set memory_budget=8M

# two ranks: the ZeRO stages are candidates too; the chosen one trains
if command -v mpirun >/dev/null 2>&1; then
  . "$(dirname "$0")/mpi_lib.sh" # the environment (root, oversubscription, Open MPI's leaks under LSan)
  expect fit_auto_two_ranks_zero 0 "2 ranks; [0-9]+ candidates.* 1 +fp32 .* 2 +fp32 .*fit: chose batch_size [0-9]+ x accumulate_steps [0-9]+ \(global batch 64, as the recipe's\).*zero_stage [0-2].*done: 2 steps" -- \
    timeout -k 5 120 "${MPI[@]}" -np 2 "$CT" train "${R[@]}" --set batch_size=64 --set memory_budget=64M \
    --set threads=1 --max-steps 2 --set eval_every=2
else
  echo "  SKIP mpirun is not installed: no two-rank fit"
fi

summary "fit"
