#!/usr/bin/env bash
# scripts/same_training.sh - do two ctrain builds train bit for bit the same?
# For a refactoring: builds A and B (e.g. one from the commit before the change,
# `git worktree add /tmp/before REV && make -C /tmp/before -j2 build/ctrain`, and
# build/ctrain) train three recipes briefly with --metrics:
#   MNIST MLP (150 steps + evaluation), Fashion CNN (120 steps + evaluation),
#   gpt-char-small (30 steps, 2 validations)
# and every metrics line (loss, accuracy, lr, grad norm, evaluations) is compared
# with the timing and memory fields left out. Prints one line per recipe
# ("identical" or the first differing lines) and exits non-zero on a difference.
# Needs the data of scripts/setup.sh; about a minute per build on 2 cores.
# usage: scripts/same_training.sh path/to/ctrain_A path/to/ctrain_B
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: scripts/same_training.sh path/to/ctrain_A path/to/ctrain_B" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

train() { # binary, output dir
  local ct=$1 o=$2
  mkdir -p "$o"
  "$ct" train --recipe recipes/mnist_mlp.json --set epochs=1 --set max_steps=150 --metrics "$o/mlp.jsonl" --quiet >"$o/mlp.out" 2>&1
  "$ct" train --recipe recipes/fashion_cnn.json --set epochs=1 --set max_steps=120 --metrics "$o/cnn.jsonl" --quiet >"$o/cnn.out" 2>&1
  "$ct" train --recipe recipes/gpt_char_small.json --set max_steps=30 --set eval_every=15 --set eval_batches=4 \
    --set save_dir= --metrics "$o/gpt.jsonl" --quiet >"$o/gpt.out" 2>&1
}

# a metrics log without what depends on the clock or the allocator, one sorted JSON object a line
strip() {
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    d.get("recipe", {}).pop("metrics_file", None)
    for k in list(d):
        if k in ("time", "seconds", "elapsed") or "per_s" in k or k.endswith(("_ms", "_s")) or "mib" in k.lower() \
           or "rss" in k.lower():
            del d[k]
    print(json.dumps(d, sort_keys=True))' "$1"
}

train "$1" "$tmp/a" || { echo "same_training: $1 failed; its output is below" >&2; cat "$tmp"/a/*.out >&2; exit 1; }
train "$2" "$tmp/b" || { echo "same_training: $2 failed; its output is below" >&2; cat "$tmp"/b/*.out >&2; exit 1; }
rc=0
for m in mlp cnn gpt; do
  if diff <(strip "$tmp/a/$m.jsonl") <(strip "$tmp/b/$m.jsonl") >"$tmp/$m.diff"; then
    echo "$m: identical ($(wc -l <"$tmp/b/$m.jsonl") metrics lines)"
  else
    echo "$m: DIFFERS"
    head -n 6 "$tmp/$m.diff" | cut -c1-240
    rc=1
  fi
done
exit $rc
