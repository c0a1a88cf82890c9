#!/usr/bin/env bash
# examples/imagefolder_fashion.sh - a real run on image files: Fashion-MNIST
# exported as a 32x32 RGB PNG ImageFolder (scripts/export_imagefolder.py,
# 60000 train / 10000 val, made once into $DIR), then `ctrain train` with
# dataset imagefolder: the CNN (channels 32,64) with RandomResizedCrop
# (scale 0.5-1) + flip, evaluated with Resize + CenterCrop each epoch. The
# epoch lines give the test accuracy and the decode+augment rate per
# prefetch thread; the last line the run's images/s.
#   examples/imagefolder_fashion.sh [extra ctrain train flags...]
#   DIR=build/fashion-mnist-png EPOCHS=3 BUILD=build
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
BUILD=${BUILD:-build}
DIR=${DIR:-$BUILD/fashion-mnist-png}
EPOCHS=${EPOCHS:-3}
[ -d "$DIR/train" ] || python3 scripts/export_imagefolder.py --out "$DIR"
[ -x "$BUILD/ctrain" ] || make -j2 "$BUILD/ctrain"
exec "$BUILD/ctrain" train --model cnn --channels 32,64 --dataset imagefolder --data-dir "$DIR" \
  --epochs "$EPOCHS" --batch-size 128 --optimizer adamw --lr 2e-3 --threads 2 \
  --set mean=0.286 --set std=0.353 --set augment=true --set crop_scale_min=0.5 \
  --set prefetch=4 --set prefetch_threads=1 "$@"
