#!/usr/bin/env bash
# tests/image_cli_test.sh - `ctrain train` on image folders and CIFAR
# (dataset imagefolder / cifar10): a small Fashion-MNIST PNG ImageFolder made
# by scripts/export_imagefolder.py (600 train / 200 val images), the CNN and
# the MLP trained for a few steps (RandomResizedCrop + flip, and the eval
# transform; 3 and 1 channels), the same loss for any number of prefetch
# threads, then the bad-image policy: a truncated PNG and a text file stop
# the run naming the file (bad_images error) or are skipped and counted
# (skip); bad image keys and a missing folder are errors with advice.
# usage: tests/image_cli_test.sh path/to/ctrain
set -u
CT=${1:-build/ctrain}
. "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PY=python3
command -v $PY > /dev/null || PY=/usr/bin/python3

if ! $PY scripts/export_imagefolder.py --out "$tmp/fm" --train-count 600 --val-count 200 > "$tmp/export.log" 2>&1; then
  bad export_imagefolder "$(cat "$tmp/export.log")"
  summary "image cli"
  exit 1
fi
n=$(find "$tmp/fm/train" -name '*.png' | wc -l)
[ "$n" -eq 600 ] && [ "$(ls "$tmp/fm/train" | wc -l)" -eq 10 ] && ok export_600_png_10_classes || bad "export ($n files)"

COMMON=(--dataset imagefolder --data-dir "$tmp/fm" --batch-size 32 --threads 2 --set mean=0.286 --set std=0.353)
expect cnn_imagefolder_trains 0 "cnn on imagefolder \(600 train / 200 test images, 3x32x32\).*10 classes.*epoch 1/1 .*test acc [0-9.]+%.*decode\+augment [0-9]+ img/s per thread-CPU-s, 0 bad skipped.*done: 18 steps" -- \
  "$CT" train --model cnn --channels 8,16 "${COMMON[@]}" --epochs 1
expect cnn_imagefolder_augment 0 "RandomResizedCrop\+flip.*done: 6 steps" -- \
  "$CT" train --model cnn --channels 8,16 "${COMMON[@]}" --max-steps 6 --set augment=true --set crop_scale_min=0.5
expect mlp_imagefolder_gray 0 "1x32x32.*done: 6 steps" -- \
  "$CT" train --model mlp --hidden 64 "${COMMON[@]}" --max-steps 6 --set image_channels=1 --set image_size=32

# the same (seed, epoch, index): the same batches, so the same losses, whatever the prefetch threads
loss_of() { "$CT" train --model cnn --channels 8 "${COMMON[@]}" --max-steps 6 --set augment=true "$@" 2>&1 | grep -oE 'train loss [0-9.]+' ; }
a=$(loss_of --set prefetch=0)
b=$(loss_of --set prefetch=3 --set prefetch_threads=3)
[ -n "$a" ] && [ "$a" = "$b" ] && ok same_loss_any_prefetch_threads || bad same_loss_any_prefetch_threads "sync: $a / 3 threads: $b"

# bad images
cp -r "$tmp/fm" "$tmp/bad"
f=$(ls "$tmp/bad/train/3-dress" | head -n 1)
head -c 60 "$tmp/bad/train/3-dress/$f" > "$tmp/bad/train/3-dress/00000-truncated.png"
echo "not an image" > "$tmp/bad/train/5-sandal/00001-text.png"
BAD=(--model cnn --channels 8 --dataset imagefolder --data-dir "$tmp/bad" --batch-size 32 --threads 2 --epochs 1)
expect bad_image_error_names_file 1 "3-dress/00000-truncated.png.*(truncated|not a decodable PNG).*bad_images" -- \
  "$CT" train "${BAD[@]}"
expect bad_image_skip_counts 0 "2 bad skipped.*done:" -- "$CT" train "${BAD[@]}" --set bad_images=skip

# configuration errors
expect missing_folder 1 "cannot open the image folder.*nowhere/train.*data_dir" -- \
  "$CT" train --model cnn --dataset imagefolder --data-dir "$tmp/nowhere"
expect bad_mean_key 1 "recipe key 'mean'.*comma-separated" -- \
  "$CT" train --model cnn "${COMMON[@]}" --set mean=0.1,0.2 --max-steps 1
expect resize_smaller_than_size 1 "resize_size.*smaller than image_size" -- \
  "$CT" train --model cnn "${COMMON[@]}" --set resize_size=20 --max-steps 1
expect image_key_on_idx 1 "recipe key 'image_size' applies to dataset imagefolder.*not to the IDX dataset 'mnist'" -- \
  "$CT" train --model cnn --dataset mnist --set image_size=28 --max-steps 1
expect cifar_missing 1 "data_batch_1.bin.*CIFAR-10" -- \
  "$CT" train --model cnn --dataset cifar10 --data-dir "$tmp/nowhere" --max-steps 1

# CIFAR-10 binary: 64 training records in data_batch_1..5 and 32 test records, random pixels
$PY - "$tmp/cifar" <<'EOF'
import os, random, sys
d = sys.argv[1]; os.makedirs(d)
r = random.Random(5)
def rec(n): return b"".join(bytes([r.randrange(10)]) + bytes(r.randrange(256) for _ in range(3072)) for _ in range(n))
for k in range(1, 6): open(os.path.join(d, "data_batch_%d.bin" % k), "wb").write(rec(16 if k == 1 else 12))
open(os.path.join(d, "test_batch.bin"), "wb").write(rec(32))
EOF
expect cifar10_trains 0 "cnn on cifar10 \(64 train / 32 test images, 3x32x32\).*done: 8 steps" -- \
  "$CT" train --model cnn --channels 8 --dataset cifar10 --data-dir "$tmp/cifar" --batch-size 16 --threads 2 --epochs 2

summary "image cli"
