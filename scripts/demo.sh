#!/usr/bin/env bash
# The main job from a clean clone: installs the dependencies and datasets,
# builds ctrain, and trains the default recipe (MLP on MNIST) with a live
# progress display, then evaluates it on the test set.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
make -j"$(nproc)" BUILD=build build/ctrain
exec ./build/ctrain train --recipe recipes/mnist_mlp.json "$@"
