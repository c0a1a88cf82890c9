#!/usr/bin/env bash
# tests/test_report.sh - the metrics log and `ctrain report` end to end: a
# short real MNIST run with --report DIR (2 epochs of 20 steps) must write
# DIR/metrics.jsonl (one line per step and per evaluation) and a
# self-contained DIR/report.html with one SVG plot per series; then bad input
# (missing, empty or malformed logs, unwritable outputs) must exit 1 with a
# clear message and never crash (exit code < 128, no sanitizer report);
# loss-scaler "amp" lines are read without complaint; absurd numbers (steps
# past 2^53, losses near DBL_MAX) finish quickly with a small, finite page.
# usage: tests/test_report.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

check() { # NAME CONDITION-COMMAND...
  local name=$1
  shift
  if "$@"; then ok "$name"; else bad "$name"; fi
}
count() { grep -o -- "$1" "$2" | wc -l; }

if [ ! -f data/mnist/t10k-images-idx3-ubyte ]; then
  echo "  FAIL data/mnist is missing: run scripts/setup.sh"
  echo "test_report.sh: 0 passed, 1 failed"
  exit 1
fi

# a real run: 60000 / 3000 = 20 steps per epoch, 2 epochs
R="$tmp/run"
expect train_report 0 "report: .*report.html" -- "$CT" train --max-steps 40 --epochs 2 --batch-size 3000 \
  --hidden 64 --threads 2 --quiet --report "$R"
M="$R/metrics.jsonl"
H="$R/report.html"
check metrics_exists test -s "$M"
check metrics_steps [ "$(grep -c '"type":"step"' "$M")" -eq 40 ]
check metrics_evals [ "$(grep -c '"type":"eval"' "$M")" -eq 2 ]
check metrics_run_line [ "$(head -n 1 "$M" | grep -c '"type":"run","version":1,"recipe":{"model"')" -eq 1 ]
check metrics_done_line [ "$(tail -n 1 "$M" | grep -c '"type":"done","steps":40')" -eq 1 ]
check metrics_fields grep -q '"step":40,"epoch":2,"loss":[0-9.e-]*,"acc":[0-9.e-]*,"lr":[0-9.e-]*,"samples_per_s":' "$M"
check metrics_valid_json python3 -c 'import json,sys; [json.loads(l) for l in open(sys.argv[1])]' "$M"
check html_exists test -s "$H"
# loss, test accuracy, learning rate, throughput (no grad norm, no loss scale)
check html_4_svgs [ "$(count '<svg' "$H")" -eq 4 ]
check html_no_loss_scale [ "$(count 'Loss scale' "$H")" -eq 0 ]
# polylines: train loss, smoothed, test loss | accuracy | lr | throughput raw, smoothed
check html_7_polylines [ "$(count '<polyline' "$H")" -eq 7 ]
first_points=$(grep -m1 -o 'points="[^"]*"' "$H" | tr -cd ' ' | wc -c)
check html_40_loss_points [ "$first_points" -eq 40 ]
check html_axes_labels grep -q 'class="xl">' "$H"
check html_titles grep -q 'Test accuracy' "$H"
check html_recipe_table grep -q 'final test accuracy' "$H"
check html_self_contained [ "$(grep -ciE '<script|<link|src=|@import|url\(' "$H")" -eq 0 ]

# the subcommand on the same log, default output next to the log
cp "$M" "$tmp/copy.jsonl"
expect report_default_out 0 "report: $tmp/report.html" -- "$CT" report "$tmp/copy.jsonl"
check report_same_plots [ "$(count '<svg' "$tmp/report.html")" -eq 4 ]
# --metrics FILE with gradient clipping: a grad-norm plot
expect train_metrics_flag 0 "done" -- "$CT" train --max-steps 5 --epochs 1 --batch-size 64 --hidden 32 --threads 2 \
  --quiet --metrics "$tmp/clip.jsonl" --set clip_grad_norm=1
check metrics_grad_norm [ "$(grep -c '"grad_norm":' "$tmp/clip.jsonl")" -eq 5 ]
expect report_grad_norm 0 "report:" -- "$CT" report "$tmp/clip.jsonl" -o "$tmp/clip.html"
check html_grad_norm_plot grep -q 'Gradient norm' "$tmp/clip.html"
# a loss_scale field gives a fifth plot
sed 's/"time":/"loss_scale":65536,"time":/' "$M" > "$tmp/scale.jsonl"
expect report_loss_scale 0 "report:" -- "$CT" report "$tmp/scale.jsonl" -o "$tmp/scale.html"
check html_5_svgs_loss_scale [ "$(count '<svg' "$tmp/scale.html")" -eq 5 ]
check html_loss_scale_plot grep -q 'Loss scale' "$tmp/scale.html"
# loss-scaler events ("amp" lines) are not malformed lines
{ head -n 3 "$M"
  echo '{"type":"amp","step":3,"event":"overflow","scale":65536,"first_nonfinite":"fc1.weight"}'
  echo '{"type":"amp","step":3,"event":"backoff","scale":32768,"first_nonfinite":"fc1.weight"}'
  tail -n +4 "$M"; } > "$tmp/amp.jsonl"
"$CT" report "$tmp/amp.jsonl" -o "$tmp/amp.html" > "$tmp/amp.out" 2>&1
check report_amp_lines [ $? -eq 0 ]
check amp_lines_not_skipped bash -c '! grep -q "skipped" "$0" "$1"' "$tmp/amp.out" "$tmp/amp.html"

# bad input
expect missing_log 1 "cannot open metrics log.*nope.jsonl" -- "$CT" report "$tmp/nope.jsonl" -o "$tmp/x.html"
: > "$tmp/empty.jsonl"
expect empty_log 1 "is empty" -- "$CT" report "$tmp/empty.jsonl" -o "$tmp/x.html"
{ head -n 3 "$M"; echo '{"type":"step","step":4,"loss":'; tail -n +4 "$M"; } > "$tmp/malformed.jsonl"
expect malformed_line_skipped 0 "malformed.jsonl:4: not valid JSON; line skipped" -- "$CT" report \
  "$tmp/malformed.jsonl" -o "$tmp/m.html"
check malformed_noted grep -q '1 malformed line skipped' "$tmp/m.html"
printf 'hello\n{"type":"step"}\n' > "$tmp/garbage.jsonl"
expect garbage_log 1 "garbage.jsonl:1: not valid JSON.*garbage.jsonl:2: unknown type or missing fields.*no step lines" \
  -- "$CT" report "$tmp/garbage.jsonl" -o "$tmp/x.html"
expect unwritable_output 1 "cannot write '$tmp/no/such/dir/r.html'" -- "$CT" report "$M" -o "$tmp/no/such/dir/r.html"
expect report_is_dir 1 "cannot open metrics log|cannot read" -- "$CT" report "$tmp" -o "$tmp/x.html"
expect report_usage 2 "usage: ctrain report" -- "$CT" report
expect report_bad_flag 2 "unknown option '--bogus'" -- "$CT" report "$M" --bogus
expect unwritable_metrics 1 "cannot open metrics log '$tmp/no/such/m.jsonl' for writing" -- "$CT" train --max-steps 2 \
  --epochs 1 --hidden 16 --quiet --metrics "$tmp/no/such/m.jsonl"
expect unwritable_report_dir 1 "cannot create directory '$tmp/no/such'" -- "$CT" train --max-steps 2 --epochs 1 \
  --hidden 16 --quiet --report "$tmp/no/such"
expect report_needs_dir 2 "--report needs a directory" -- "$CT" train --report

# absurd numbers must neither hang nor fill the disk (the tick loops of an
# axis once stopped advancing for steps >= 2^53 and for losses near DBL_MAX,
# and wrote HTML forever): each run is capped at 20 s and 4 MiB of output
capped=(bash -c 'ulimit -f 4096; exec "$0" "$@"')
sane_html() { # FILE: small, finite coordinates, distinct tick labels on each axis
  [ "$(stat -c %s "$1")" -lt 100000 ] && ! grep -qiE 'nan|inf' "$1" &&
    [ -z "$(grep -o '<svg\|class="[xy]l">[^<]*' "$1" | awk '/<svg/ { n++; next } { print n, $0 }' | sort | uniq -d)" ]
}
printf '{"type":"step","step":1e74,"loss":2}\n' > "$tmp/bigstep.jsonl"
EXPECT_TIMEOUT=20 expect huge_step_skipped 1 'bigstep.jsonl:1: "step" is 1e\+74, out of range.*holds no step lines' \
  -- "${capped[@]}" "$CT" report "$tmp/bigstep.jsonl" -o "$tmp/bigstep.html"
check huge_step_no_html test ! -e "$tmp/bigstep.html"
{ printf '{"type":"step","step":1,"loss":2}\n{"type":"step","step":2,"loss":1}\n'
  printf '{"type":"eval","epoch":1e300,"step":2,"test_loss":1,"test_acc":0.5}\n'
  printf '{"type":"eval","epoch":1,"step":-1e20,"test_loss":1,"test_acc":0.5}\n'; } > "$tmp/bigeval.jsonl"
EXPECT_TIMEOUT=20 expect huge_eval_skipped 0 ':3: "epoch" is 1e\+300, out of range.*:4: "step" is -1e\+20, out of range' \
  -- "${capped[@]}" "$CT" report "$tmp/bigeval.jsonl" -o "$tmp/bigeval.html"
check huge_eval_noted grep -q '2 malformed lines skipped' "$tmp/bigeval.html"
printf '{"type":"step","step":1,"loss":1.7976931348623157e308}\n' > "$tmp/maxloss.jsonl"
EXPECT_TIMEOUT=20 expect max_loss_drawn 0 "report:" -- "${capped[@]}" "$CT" report "$tmp/maxloss.jsonl" -o "$tmp/maxloss.html"
check max_loss_sane sane_html "$tmp/maxloss.html"
check max_loss_points [ "$(count '<circle' "$tmp/maxloss.html")" -eq 2 ] # the loss and its smoothed value
printf '{"type":"step","step":1,"loss":1.7e308,"lr":1e-300}\n{"type":"step","step":2,"loss":-1.7e308,"lr":1.7e308}\n' \
  > "$tmp/spread.jsonl"
EXPECT_TIMEOUT=20 expect huge_range_drawn 0 "report:" -- "${capped[@]}" "$CT" report "$tmp/spread.jsonl" -o "$tmp/spread.html"
check huge_range_sane sane_html "$tmp/spread.html"
check huge_range_2_plots [ "$(count '<svg' "$tmp/spread.html")" -eq 2 ]
printf '{"type":"step","step":9007199254740988,"loss":1}\n{"type":"step","step":9007199254740992,"loss":2}\n' \
  > "$tmp/near53.jsonl"
EXPECT_TIMEOUT=20 expect steps_near_2p53_drawn 0 "report:" -- "${capped[@]}" "$CT" report "$tmp/near53.jsonl" -o "$tmp/near53.html"
check steps_near_2p53_sane sane_html "$tmp/near53.html"

# a profiled pipeline run (2 ranks, 1f1b, 4 micro-batches: ideal bubble 1/5): every rank's trace has the
# pipeline tracks, and the doctor (at the end of the run, and on rank 1's trace) prints the bubble
if command -v mpirun >/dev/null 2>&1; then
  . "$(dirname "$0")/mpi_lib.sh"
  mrun "$tmp/pp.log" 120 -- "${MPI[@]}" -np 2 "$CT" train --model gpt --set dataset=moby-dick --set n_layer=4 \
    --set d_model=32 --set n_head=4 --set context=16 --batch-size 8 --max-steps 20 --set threads=1 \
    --set accumulate_steps=4 --set pipeline_stages=2 --set profile_dir="$tmp/pp"
  rc=$?
  check "pipeline_run_ends (rc $rc)" [ "$rc" -eq 0 ]
  check pipeline_run_clean clean pipeline_run "$tmp/pp.log"
  bubble='\] +pipeline bubble [0-9.]+% of the schedule \(ideal 20\.0% for this schedule; target <= ideal \+ 10 points\) in 10 recorded steps; the trainer measured [0-9.]+%'
  check pipeline_run_doctor_bubble grep -qE "$bubble" "$tmp/pp.log"
  check pipeline_run_doctor_comm grep -qE 'pipeline communication [0-9.]+% of step time' "$tmp/pp.log"
  "$CT" doctor "$tmp/pp/trace.rank1.json" > "$tmp/pp1.txt" 2>&1
  check pipeline_doctor_rank1 grep -qE "$bubble" "$tmp/pp1.txt"
  for t in "$tmp/pp/trace.json" "$tmp/pp/trace.rank1.json"; do
    check "pipeline_tracks $(basename "$t")" grep -q '"tid": 4, "args": {"name": "pipeline micro-batches"}' "$t"
    check "pipeline_compute_on_track_4 $(basename "$t")" grep -qE '"tid": 4, .*"name": "backward mb 3 \(piece [01]\)", "cat": "pipeline"' "$t"
    check "pipeline_comm_on_track_5 $(basename "$t")" grep -qE '"tid": 5, .*"name": "receive (activations|gradients)", "cat": "pipeline_comm"' "$t"
  done
else
  echo "  SKIP mpirun is not installed: no profiled pipeline run"
fi

summary test_report.sh
