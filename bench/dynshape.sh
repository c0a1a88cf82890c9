#!/usr/bin/env bash
# bench/dynshape.sh - dynamic shapes: overhead and savings (docs/dynamic-shapes.md).
# Builds bench_dynshape into $BUILD (default build-bench, via bench/Makefile),
# runs it (GPT on Moby-Dick paragraphs: static plans per length vs one plan
# compiled for the context running each batch at its length vs padding to
# the context), then PyTorch on the same batch lengths (variable vs padded).
#   bench/dynshape.sh                                  # gpt-char-small, 16 batches x 3 rounds
#   bench/dynshape.sh --batches 8 --rounds 3 --layers 2 --d 128 --heads 4 --context 128   # quick
# Options are passed to both programs (--batches/--batch only to bench_dynshape).
set -euo pipefail
SELF=$(readlink -f "$0")
cd "$(dirname "$SELF")/.."
BUILD=${BUILD:-build-bench}
THREADS=${THREADS:-2}
make --no-print-directory -C bench BUILD="$BUILD" "../$BUILD/bench/bench_dynshape" >&2
LEN=$(mktemp /tmp/ct_dynshape_lengths.XXXXXX)
trap 'rm -f "$LEN"' EXIT
export GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-10000}
ARGS=(--batches 16 --rounds 3 --threads "$THREADS" "$@")
"$BUILD/bench/bench_dynshape" "${ARGS[@]}" --lengths "$LEN"
# PyTorch: the model options only (the lengths file carries batch and lengths)
TARGS=(--threads "$THREADS")
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds|--context|--layers|--d|--heads) TARGS+=("$1" "$2"); shift 2 ;;
    *) shift 2 ;;
  esac
done
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  /usr/bin/python3 bench/torch_dynshape.py --lengths "$LEN" "${TARGS[@]}"
else
  echo "torch_dynshape: /usr/bin/python3 has no torch: PyTorch side skipped"
fi
