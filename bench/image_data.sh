#!/usr/bin/env bash
# bench/image_data.sh - decode + augment throughput (images/s) of ctrain's
# ImageFolder pipeline (bench/bench_image.c: ct_image_set + ct_prefetcher)
# against torchvision's ImageFolder + DataLoader (bench/torch_image.py) on the
# same PNG folder with the same transforms and worker count, in alternating
# rounds; prints each round and the median of both.
# The folder: Fashion-MNIST exported by scripts/export_imagefolder.py (32x32
# RGB PNG; made once into $DIR when missing, all 60000 training images).
#   bench/image_data.sh [--threads 2] [--rounds 3] [--epochs 1] [--size 32] [--eval]
#   DIR=$BUILD/fashion-mnist-png BUILD=build (the library in $BUILD/libctrain.a)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
THREADS=2 ROUNDS=3 EPOCHS=1 SIZE=32 TRAIN=1
DIR=${DIR:-${BUILD:-build}/fashion-mnist-png}
BUILD=${BUILD:-build}
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    --eval) TRAIN=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ -d "$DIR/train" ] || python3 scripts/export_imagefolder.py --out "$DIR"
make --no-print-directory -j2 "$BUILD/libctrain.a" > /dev/null
mkdir -p "$BUILD/bench"
LIBS="-ldnnl -lcjson -lz -lm $(pkg-config --libs libjpeg libpng) $(pkg-config --libs ompi-c) -fopenmp -pthread"
gcc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude -D_DEFAULT_SOURCE bench/bench_image.c "$BUILD/libctrain.a" $LIBS \
  -o "$BUILD/bench/bench_image"
c=() t=()
for r in $(seq "$ROUNDS"); do
  a=$("$BUILD/bench/bench_image" "$DIR/train" "$THREADS" "$EPOCHS" "$SIZE" "$TRAIN")
  b=$(/usr/bin/python3 bench/torch_image.py "$DIR/train" "$THREADS" "$EPOCHS" "$SIZE" "$TRAIN")
  echo "round $r: $a"
  echo "round $r: $b"
  c+=("$(echo "$a" | sed -E 's/^[a-z]+ images [0-9]+  seconds [0-9.]+  images\/s ([0-9]+) .*/\1/')")
  t+=("$(echo "$b" | sed -E 's/^[a-z]+ images [0-9]+  seconds [0-9.]+  images\/s ([0-9]+) .*/\1/')")
done
med() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
mc=$(med "${c[@]}") mt=$(med "${t[@]}")
echo "median images/s over $ROUNDS rounds, $THREADS workers, $( [ "$TRAIN" = 1 ] && echo RandomResizedCrop+flip || echo Resize+CenterCrop ) ${SIZE}x${SIZE}: ctrain $mc  torchvision $mt  (ratio $(awk -v a="$mc" -v b="$mt" 'BEGIN {printf "%.2f", a / b}'))"
