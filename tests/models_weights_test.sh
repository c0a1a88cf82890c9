#!/usr/bin/env bash
# tests/models_weights_test.sh - torchvision weights in and out of ctrain:
# scripts/torchvision_to_safetensors.py converts torchvision's resnet18 (seeded
# init, 10 classes, 1-channel stem) to safetensors; `ctrain train` starts from
# it (init_weights) for one step on an MNIST subset and checkpoints; the
# checkpoint's model.safetensors converts back into torchvision's model with
# load_state_dict(strict=True) (every name and shape, nothing extra). Needs
# Debian's python3-torchvision (installed by scripts/setup.sh): without it the
# suite fails, as the golden generators need it too.
# usage: tests/models_weights_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=/usr/bin/python3
if ! $PY -c 'import torchvision' 2>/dev/null; then
  bad torchvision_missing "/usr/bin/python3 cannot import torchvision: run scripts/setup.sh (it installs python3-torchvision)"
  summary "models weights"
  exit 1
fi
mnist_subset "$tmp/mn" train 32
mnist_subset "$tmp/mn" t10k 8
expect export 0 "resnet18: 102 tensors, 11175370 parameters" -- \
  $PY scripts/torchvision_to_safetensors.py --arch resnet18 --num-classes 10 --in-channels 1 --out "$tmp/tv.safetensors"
expect train_from_torchvision 0 "initial weights from .*tv.safetensors.*done: 1 steps" -- \
  "$CT" train --model resnet18 --set init_weights="$tmp/tv.safetensors" --data-dir "$tmp/mn" --batch-size 8 \
  --max-steps 1 --save-dir "$tmp/ck" --threads 2
st=$(find "$tmp/ck" -name model.safetensors | head -n 1)
expect back_to_torchvision 0 "strict load ok" -- \
  $PY scripts/torchvision_to_safetensors.py --arch resnet18 --num-classes 10 --in-channels 1 --to-torch "$st" \
  --out "$tmp/back.pth"
# the trained step moved the weights: the file is not the one that went in
cmp -s "$tmp/tv.safetensors" "$st" && bad weights_moved "the checkpoint equals the initial file" || ok weights_moved
expect wrong_model 1 "init_weights.*(conv1|features|missing|shape)" -- \
  "$CT" train --model efficientnet_b0 --set init_weights="$tmp/tv.safetensors" --data-dir "$tmp/mn" --batch-size 8 \
  --max-steps 1 --threads 2
summary "models weights"
