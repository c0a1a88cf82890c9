#!/usr/bin/env bash
# examples/fashion_vision.sh - torchvision architectures on real image files:
# Fashion-MNIST exported as a 32x32 RGB PNG ImageFolder
# (scripts/export_imagefolder.py: 60000 train / 10000 val, made once into $DIR),
# trained by `ctrain train` with one of the recipes
#   resnet18      recipes/fashion_resnet18.json      (CIFAR stem, SGD nesterov, one-cycle, 5 epochs)
#   efficientnet  recipes/fashion_efficientnet_b0.json (AdamW, cosine, 3 epochs)
#   swin          recipes/fashion_swin_t.json         (swin_t / 2, 2 blocks per stage, 64x64, window 2)
# with RandomCrop(padding 2) (resnet18) or RandomResizedCrop + flip, evaluated each epoch on the 10000 val images.
# The epoch lines give the test accuracy; the last line the run's images/s.
# Checkpoints go to $OUT (a killed run resumes with --resume $OUT).
#   examples/fashion_vision.sh resnet18 [extra ctrain train flags...]
#   DIR=build/fashion-mnist-png OUT=build/runs/resnet18 BUILD=build
# Measured (README, "Image models"): resnet18 93.38% after 5 epochs on 2 shared cores (~1.5 h, 2026-12-01).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
MODEL=${1:-resnet18}
shift || true
case "$MODEL" in
  resnet18) RECIPE=recipes/fashion_resnet18.json ;;
  efficientnet) RECIPE=recipes/fashion_efficientnet_b0.json ;;
  swin) RECIPE=recipes/fashion_swin_t.json ;;
  *) echo "usage: $0 resnet18|efficientnet|swin [ctrain train flags...]" >&2; exit 2 ;;
esac
BUILD=${BUILD:-build}
DIR=${DIR:-$BUILD/fashion-mnist-png}
OUT=${OUT:-$BUILD/runs/fashion-$MODEL}
[ -d "$DIR/train" ] || python3 scripts/export_imagefolder.py --out "$DIR"
[ -x "$BUILD/ctrain" ] || make -j2 "$BUILD/ctrain"
exec "$BUILD/ctrain" train --recipe "$RECIPE" --data-dir "$DIR" --save-dir "$OUT" --set save_every=200 "$@"
