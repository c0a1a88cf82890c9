#!/usr/bin/env bash
# tests/check_layers.sh - the library's layers point down only. Every
# `#include "..."` line in src/ and tools/ is resolved (the including file's
# folder, then -Isrc, -Iinclude, -Itools, as the Makefile does) and fails
# when a lower layer includes a higher one, naming file:line and both
# layers. The layers, lowest first:
#   0 core     src/core     context, tensors, IR types, the one CPU probe
#   1 kernels  src/kernels  every kernel, all ISA dispatch, conversions,
#                           optimizer update loops
#   1 dist     src/comm     the communicator (MPI): world, collectives
#   2 graph    src/graph src/models  builders, autodiff, passes, planner, executor
#   3 optim    src/optim src/amp
#   4 io       src/io src/prof src/data
#   5 train    src/train
#   6 cli      tools
# include/ctrain/ (the public API) is not a layer: any file may include it,
# and its headers include only each other. A folder under src/ that is not
# in the table, or a quoted include that resolves nowhere, is a failure too.
# Prints "N passed, M failed" (one per include line) and exits non-zero on
# any failure. Usage: tests/check_layers.sh [repository root]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2

layer_of() { # path relative to the root -> "rank name", or nothing
  case "$1" in
    src/core/*) echo "0 core" ;;
    src/kernels/*) echo "1 kernels" ;;
    src/comm/*) echo "1 dist" ;;
    src/graph/* | src/models/*) echo "2 graph" ;;
    src/optim/* | src/amp/*) echo "3 optim/amp" ;;
    src/io/* | src/prof/* | src/data/*) echo "4 io/prof/data" ;;
    src/train/*) echo "5 train" ;;
    tools/*) echo "6 cli" ;;
    include/ctrain/*) echo "api api" ;;
  esac
}

pass=0
fail=0
bad() { echo "  FAIL $*"; fail=$((fail + 1)); }

# every folder of src/ must have a layer
for d in src/*/; do
  d=${d%/}
  [ -n "$(layer_of "$d/x.c")" ] || bad "$d: folder has no layer; add it to tests/check_layers.sh and docs/architecture.md"
done

while IFS= read -r hit; do
  file=${hit%%:*}
  rest=${hit#*:}
  line=${rest%%:*}
  inc=$(printf '%s' "${rest#*:}" | sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]*)".*/\1/')
  dir=$(dirname "$file")
  target=
  for cand in "$dir/$inc" "src/$inc" "include/$inc" "tools/$inc"; do
    if [ -f "$cand" ]; then target=$(realpath -m --relative-to=. "$cand"); break; fi
  done
  if [ -z "$target" ]; then
    bad "$file:$line: #include \"$inc\" resolves to no file under src/, include/ or tools/"
    continue
  fi
  read -r frank fname <<<"$(layer_of "$file")"
  read -r trank tname <<<"$(layer_of "$target")"
  if [ -z "${frank:-}" ] || [ -z "${trank:-}" ]; then
    bad "$file:$line: #include \"$inc\" ($target): no layer for $([ -z "${frank:-}" ] && echo "$file" || echo "$target")"
  elif [ "$frank" = api ] && [ "$trank" != api ]; then
    bad "$file:$line: public header includes \"$inc\" ($target, layer $tname): include/ctrain/ may include only itself"
  elif [ "$trank" != api ] && [ "$frank" != api ] && [ "$trank" -gt "$frank" ]; then
    bad "$file:$line: #include \"$inc\": layer $fname ($frank) includes layer $tname ($trank) above it"
  else
    pass=$((pass + 1))
  fi
done < <(grep -rnE --include='*.c' --include='*.h' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' src tools include | sort)

echo "tests/check_layers.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
