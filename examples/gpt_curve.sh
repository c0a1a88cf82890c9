#!/usr/bin/env bash
# examples/gpt_curve.sh - the validation-loss curve of recipes/gpt_char_small.json
# in ctrain against PyTorch (scripts/torch_gpt_train.py: the same model, vocabulary,
# split, validation windows, schedule and optimizer groups) at equal steps.
#
#   examples/gpt_curve.sh [STEPS=200] [EVAL_EVERY=50]
#
# Both run at once with one thread each (the 2 cores of the development machine),
# from their own random init and batches, so the curves are compared at equal
# steps, not bit for bit. Logs and the table go to runs/gpt_curve/. Needs
# scripts/setup.sh --reference (PyTorch). Long: ~8 s/step/framework here.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-200}
EVERY=${2:-50}
OUT=runs/gpt_curve
mkdir -p "$OUT"
make -j2 >/dev/null
OMP_NUM_THREADS=1 /usr/bin/python3 scripts/torch_gpt_train.py --steps "$STEPS" --eval-every "$EVERY" \
    --eval-batches 8 --dropout 0.2 --threads 1 >"$OUT/torch.log" 2>&1 &
tp=$!
build/ctrain train --recipe recipes/gpt_char_small.json --set max_steps="$STEPS" --set eval_every="$EVERY" \
    --set eval_batches=8 --threads 1 --set save_dir="$OUT/ckpt" --set log_every=10 >"$OUT/ctrain.log" 2>&1
wait "$tp"
/usr/bin/python3 - "$OUT" <<'EOF'
import re, sys
out = sys.argv[1]
ct = {int(m[0]): float(m[1]) for m in re.findall(r"step (\d+)/\d+  train loss \S+  val loss (\S+)", open(f"{out}/ctrain.log").read())}
pt = {int(m[0]): float(m[1]) for m in re.findall(r"EVAL step=(\d+) val_loss=(\S+)", open(f"{out}/torch.log").read())}
rows = ["| step | ctrain val loss | PyTorch val loss | difference |", "|---:|---:|---:|---:|"]
worst = 0.0
for s in sorted(set(ct) & set(pt)):
    d = (ct[s] - pt[s]) / pt[s]
    worst = max(worst, abs(d))
    rows.append(f"| {s} | {ct[s]:.4f} | {pt[s]:.4f} | {100 * d:+.2f}% |")
rows.append(f"\nworst difference {100 * worst:.2f}% (goal: within 2%)")
text = "\n".join(rows)
print(text)
open(f"{out}/curve.md", "w").write(text + "\n")
EOF
