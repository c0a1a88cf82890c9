#!/usr/bin/env bash
# tests/check_layers.sh - the library's layers, stated once (the table below;
# docs/architecture.md quotes it verbatim) and checked four ways:
#   1. every folder of src/ is in the table, every folder in the table exists;
#   2. docs/architecture.md's quoted table equals this one (one statement);
#   3. includes: every `#include "..."` line in src/ and tools/ is resolved
#      (the including file's folder, then -Isrc, -Iinclude, -Itools, as the
#      Makefile does). A file may include its own layer's headers, and of a
#      lower layer only the headers that layer exports (the table's last
#      column). Layers of one rank are siblings: neither includes the other.
#      A `*_internal.h` header is private to its folder. include/ctrain/ (the
#      public API) is not a layer: any file may include it, and its headers
#      include only each other;
#   4. symbols (needs the objects of `make BUILD=build`, else a SKIP line):
#      nm on build/obj/src/**/*.o and build/obj/tools/*.o; A.o -> B.o when A.o has an undefined
#      symbol that B.o defines. (a) no object uses a symbol of a higher (or
#      sibling) layer; (b) no file circles: every strongly connected
#      component of that graph with more than one file fails, naming the
#      files and the symbols.
# Prints one FAIL line per failure, "N passed, M failed" and exits non-zero
# on any failure. Usage: tests/check_layers.sh [repository root]
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2

# The layers, lowest first. Columns are separated by '|'; folders and
# exports by spaces; '-': none. Quoted verbatim by docs/architecture.md.
TABLE=$(cat <<'EOF'
rank | layer   | folders                  | exports: the headers the layers above may include
0    | core    | src/core                 | core/internal.h core/ir_types.h
1    | kernels | src/kernels              | kernels/kernels.h kernels/optim_kernels.h kernels/pool_plane.h
2    | comm    | src/comm                 | -
3    | graph   | src/graph src/models     | graph/ir.h
4    | optim   | src/optim src/amp        | amp/scaler_history.h
5    | io      | src/io src/prof src/data | -
6    | train   | src/train                | -
7    | cli     | tools                    | -
EOF
)
DOC=docs/architecture.md
DOC_MARK='<!-- the layer table: a verbatim copy of tests/check_layers.sh, the one source -->'

pass=0
fail=0
bad() { echo "  FAIL $*"; fail=$((fail + 1)); }

# ---- the table -> folder_rank / folder_layer / exported --------------------------------------------------------
declare -A folder_rank folder_layer exported
trim() { local s=$1; s=${s#"${s%%[![:space:]]*}"}; printf '%s' "${s%"${s##*[![:space:]]}"}"; }
while IFS='|' read -r rank name folders exports; do
  rank=$(trim "$rank"); name=$(trim "$name")
  [ "$rank" = rank ] && continue
  for d in $folders; do folder_rank[$d]=$rank; folder_layer[$d]=$name; done
  for h in $exports; do [ "$h" = - ] || exported[$h]=1; done
done <<<"$TABLE"

layer_of() { # path relative to the root -> "rank name", "api api", or nothing
  case "$1" in include/ctrain/*) echo "api api"; return ;; esac
  local d=${1%/*}
  while [ -n "$d" ] && [ "$d" != . ]; do
    if [ -n "${folder_rank[$d]:-}" ]; then echo "${folder_rank[$d]} ${folder_layer[$d]}"; return; fi
    [ "${d%/*}" = "$d" ] && break
    d=${d%/*}
  done
}

# ---- 1. folders -----------------------------------------------------------------------------------------------
for d in src/*/; do
  d=${d%/}
  if [ -n "${folder_rank[$d]:-}" ]; then pass=$((pass + 1)); else
    bad "$d: folder has no layer; add it to the table in tests/check_layers.sh (and its copy in $DOC)"
  fi
done
for d in "${!folder_rank[@]}"; do
  [ -d "$d" ] || bad "$d: in the layer table but not a folder; remove it from tests/check_layers.sh and $DOC"
done
for h in "${!exported[@]}"; do
  [ -f "src/$h" ] || bad "$h: exported in the layer table but no such header under src/"
done

# ---- 2. the quoted copy in docs/architecture.md --------------------------------------------------------------------
quoted=$(awk -v mark="$DOC_MARK" '
  $0 == mark { state = 1; next }
  state == 1 && /^```/ { state = 2; next }
  state == 2 && /^```/ { exit }
  state == 2 { print }' "$DOC" 2>/dev/null)
if [ "$quoted" = "$TABLE" ]; then pass=$((pass + 1)); else
  bad "$DOC: the layer table after the line '$DOC_MARK' differs from tests/check_layers.sh's (the source); copy it verbatim:"
  diff <(printf '%s\n' "$TABLE") <(printf '%s\n' "$quoted") | sed 's/^/       /'
fi

# ---- 3. includes ------------------------------------------------------------------------------------------------
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
  frank= fname= trank= tname=
  read -r frank fname <<<"$(layer_of "$file")"
  read -r trank tname <<<"$(layer_of "$target")"
  if [ -z "$frank" ] || [ -z "$trank" ]; then
    bad "$file:$line: #include \"$inc\" ($target): no layer for $([ -z "$frank" ] && echo "$file" || echo "$target")"
  elif [ "$frank" = api ] && [ "$trank" != api ]; then
    bad "$file:$line: public header includes \"$inc\" ($target, layer $tname): include/ctrain/ may include only itself"
  elif [[ $target == *_internal.h ]] && [ "$(dirname "$target")" != "$dir" ]; then
    bad "$file:$line: #include \"$inc\": $target is private to $(dirname "$target")/ (*_internal.h);" \
        "export what is needed in a header of its own and list it in the layer table"
  elif [ "$trank" = api ] || [ "$fname" = "$tname" ]; then
    pass=$((pass + 1))
  elif [ "$trank" -gt "$frank" ]; then
    bad "$file:$line: #include \"$inc\": layer $fname ($frank) includes layer $tname ($trank) above it"
  elif [ "$trank" -eq "$frank" ]; then
    bad "$file:$line: #include \"$inc\": layers $fname and $tname are siblings (rank $frank): neither includes the other"
  elif [ -z "${exported[${target#src/}]:-}" ]; then
    bad "$file:$line: #include \"$inc\": $target is not an export of layer $tname; use one of its exported" \
        "headers, or export this one in the layer table (tests/check_layers.sh, $DOC)"
  else
    pass=$((pass + 1))
  fi
done < <(grep -rnE --include='*.c' --include='*.h' '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' src tools include | sort)

# ---- 4. symbols: calls point down, no file circles ---------------------------------------------------------------
if [ -z "$(find build/obj/src -name '*.o' -print -quit 2>/dev/null)" ]; then
  echo "  SKIP symbol checks (upward calls, file circles): no objects in build/obj/src; run make -j2 BUILD=build first"
else
  layers=$(for d in "${!folder_rank[@]}"; do echo "$d ${folder_rank[$d]} ${folder_layer[$d]}"; done)
  sym_out=$(LAYERS="$layers" python3 - <<'PY'
import os, re, subprocess, sys

layers = [l.split() for l in os.environ["LAYERS"].splitlines() if l.strip()]
layers.sort(key=lambda l: -len(l[0]))  # the longest folder first

def layer_of(src):
    for d, rank, name in layers:
        if src.startswith(d + "/"):
            return int(rank), name
    return None

# object -> source (build/obj/src/x/y.o, y.avx2.o, y.avx512.o -> src/x/y.c; build/obj/tools/t.o -> tools/t.c);
# objects of deleted sources are stale
objs = {}
for root, _, files in [w for top in ("build/obj/src", "build/obj/tools") for w in os.walk(top)]:
    for f in files:
        if f.endswith(".o"):
            o = os.path.join(root, f)
            src = re.sub(r"(\.avx2|\.avx512)?\.o$", ".c", os.path.relpath(o, "build/obj"))
            if os.path.isfile(src):
                objs.setdefault(src, []).append(o)
defined, undefined = {}, {}
for src, olist in sorted(objs.items()):
    out = subprocess.run(["nm", "-P"] + olist, capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        p = line.split()
        if len(p) < 2 or p[0].endswith(":") or p[0].endswith("]"):
            continue
        sym, kind = p[0], p[1]
        if kind == "U":
            undefined.setdefault(src, set()).add(sym)
        elif kind.isupper() or kind in "vw":
            defined.setdefault(sym, set()).add(src)
edges = {}  # (a, b) -> symbols
for a, syms in undefined.items():
    for s in syms:
        for b in defined.get(s, ()):
            if b != a:
                edges.setdefault((a, b), set()).add(s)
npass = nfail = 0
# (a) no use of a higher or sibling layer
for (a, b), syms in sorted(edges.items()):
    la, lb = layer_of(a), layer_of(b)
    if la and lb and la[1] != lb[1] and lb[0] >= la[0]:
        rel = "above it" if lb[0] > la[0] else "a sibling (rank %d)" % la[0]
        print("  FAIL %s (layer %s) uses %s of %s (layer %s, %s)" % (a, la[1], ", ".join(sorted(syms)), b, lb[1], rel))
        nfail += 1
    else:
        npass += 1
# (b) strongly connected components (Tarjan, iterative)
succ = {}
for (a, b) in edges:
    succ.setdefault(a, []).append(b)
index, low, onstack, stack, sccs, counter = {}, {}, set(), [], [], [0]
for root in sorted(objs):
    if root in index:
        continue
    work = [(root, iter(sorted(succ.get(root, []))))]
    index[root] = low[root] = counter[0]; counter[0] += 1; stack.append(root); onstack.add(root)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); onstack.add(w)
                work.append((w, iter(sorted(succ.get(w, [])))))
            elif w in onstack:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); onstack.discard(w); comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))
in_circle = set()
for comp in sorted(sccs):
    if len(comp) < 2:
        continue
    in_circle.update(comp)
    nfail += 1
    print("  FAIL file circle: %s" % " <-> ".join(comp))
    for (a, b), syms in sorted(edges.items()):
        if a in comp and b in comp:
            print("       %s -> %s: %s" % (a, b, ", ".join(sorted(syms))))
npass += len(objs) - len(in_circle)
print("COUNTS %d %d" % (npass, nfail))
PY
  )
  printf '%s\n' "$sym_out" | grep -v '^COUNTS '
  read -r _ sp sf <<<"$(printf '%s\n' "$sym_out" | grep '^COUNTS ')"
  if [ -z "${sp:-}" ]; then bad "symbol checks: nm or python3 failed"; else
    pass=$((pass + sp)); fail=$((fail + sf))
  fi
fi

echo "tests/check_layers.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
