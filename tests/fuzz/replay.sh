#!/usr/bin/env bash
# tests/fuzz/replay.sh - replays every seed corpus tests/fuzz/corpus/<name>/
# through the replay build of its fuzz target, BUILD/fuzz/replay_<name>
# (`make` builds them; in build-asan they run under ASan+UBSan). A target
# passes when its replay exits 0 within 300 s with no sanitizer report.
# A target without a corpus, or a corpus without a built target, fails.
# Prints ok/FAIL per target and "N passed, N failed".
# usage: tests/fuzz/replay.sh [BUILD]   (default build)
set -u
cd "$(dirname "$0")/../.."
B=${1:-build}
. tests/lib.sh

for src in tests/fuzz/fuzz_*.c; do
  name=$(basename "$src" .c)
  name=${name#fuzz_}
  bin=$B/fuzz/replay_$name
  corpus=tests/fuzz/corpus/$name
  if [ ! -x "$bin" ]; then bad "$name: $bin is not built (make BUILD=$B)"; continue; fi
  if [ ! -d "$corpus" ] || [ -z "$(ls -A "$corpus")" ]; then bad "$name: no seed corpus in $corpus"; continue; fi
  n=$(find "$corpus" -maxdepth 1 -type f | wc -l)
  expect "$name ($n inputs)" 0 "replayed $n inputs" -- "$bin" "$corpus"
done
for d in tests/fuzz/corpus/*/; do
  name=$(basename "$d")
  [ -f "tests/fuzz/fuzz_$name.c" ] || bad "corpus $d has no target tests/fuzz/fuzz_$name.c"
done
summary "fuzz replay ($B)"
