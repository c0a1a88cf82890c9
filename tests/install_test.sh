#!/usr/bin/env bash
# tests/install_test.sh - packaging end to end (docs/abi.md): `make install`
# into a temporary PREFIX (and once through DESTDIR), the installed files and
# symlinks, the shared library's soname and exported symbols (exactly the
# functions of include/ctrain/*.h, all ct_*), pkg-config, every header on its
# own as C99 and the umbrella as C++, the examples built from a copy of
# examples/ with pkg-config against the install and run (train on MNIST,
# then predict reproduces the accuracy, also on a `ctrain train`
# checkpoint; a static link through --static), ct_openmp_limit_spin's
# re-execution as libgomp sees it, the man page (rendered, and equal to one
# generated from the installed binary), then `make uninstall` leaving nothing
# it installed and nothing else touched.
# usage: tests/install_test.sh [BUILD folder, default build]
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
BUILD=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix
# the version's one source (the Makefile reads it from there too)
version=$(sed -n 's/^#define CT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' include/ctrain/version.h | paste -sd.)
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] && ok "version $version from include/ctrain/version.h" || bad "version '$version'"
soversion=$(sed -n 's/^SOVERSION *:= *//p' Makefile)
export PKG_CONFIG_PATH=$P/lib/pkgconfig
unset PKG_CONFIG_LIBDIR

# ---- make install --------------------------------------------------------------
out=$(make -s -j2 BUILD="$BUILD" install PREFIX="$P" 2>&1)
[ $? -eq 0 ] && ok "make install PREFIX=$P" || bad "make install failed" "$out"

want=$( (echo bin/ctrain lib/libctrain.a lib/libctrain.so "lib/libctrain.so.$soversion" "lib/libctrain.so.$version" \
          lib/pkgconfig/ctrain.pc share/man/man1/ctrain.1
         for h in include/ctrain/*.h; do echo "$h"; done) | tr ' ' '\n' | sort)
got=$(cd "$P" && find . -type f -o -type l | sed 's|^\./||' | sort)
[ "$want" = "$got" ] && ok "installed exactly the $(echo "$want" | wc -l) expected files" ||
  bad "installed files differ from the expected list" "$(diff <(echo "$want") <(echo "$got"))"
[ "$(readlink "$P/lib/libctrain.so")" = "libctrain.so.$soversion" ] &&
  [ "$(readlink "$P/lib/libctrain.so.$soversion")" = "libctrain.so.$version" ] && [ -f "$P/lib/libctrain.so.$version" ] &&
  ok "symlinks libctrain.so -> .so.$soversion -> .so.$version" || bad "shared library symlinks" "$(ls -l "$P/lib")"
soname=$(readelf -d "$P/lib/libctrain.so.$version" 2>&1 | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libctrain.so.$soversion" ] && ok "soname $soname" || bad "soname '$soname', want libctrain.so.$soversion"
undef=$(ldd -r "$P/lib/libctrain.so.$version" 2>&1 | grep -i "undefined symbol")
[ -z "$undef" ] && ok "libctrain.so resolves every symbol (ldd -r)" || bad "undefined symbols in libctrain.so" "$undef"
cmp -s "$BUILD/ctrain" "$P/bin/ctrain" && ok "bin/ctrain is the tested $BUILD/ctrain" || bad "bin/ctrain differs from $BUILD/ctrain"
ldd "$P/bin/ctrain" | grep -q libctrain && bad "bin/ctrain needs libctrain.so (it is linked statically)" ||
  ok "bin/ctrain does not depend on libctrain.so"

# ---- exported symbols --------------------------------------------------------------
exported=$(nm -D --defined-only "$P/lib/libctrain.so.$version" | awk '{print $NF}' | sort -u)
n_exp=$(echo "$exported" | grep -c .)
not_ct=$(echo "$exported" | grep -v '^ct_')
[ "$n_exp" -gt 200 ] && [ -z "$not_ct" ] && ok "all $n_exp exported symbols start with ct_" ||
  bad "exports: $n_exp symbols, not ct_: $(echo $not_ct | head -c 300)"
declared=$(scripts/make_symbols.sh "${CC:-gcc}" | sed -n 's/^    \(ct_[A-Za-z0-9_]*\);$/\1/p' | sort -u)
[ -n "$declared" ] && [ "$declared" = "$exported" ] && ok "exports equal the functions declared in include/ctrain/*.h" ||
  bad "exports differ from the public headers (< declared, > exported)" "$(diff <(echo "$declared") <(echo "$exported"))"
internal=$(nm -g --defined-only "$BUILD/libctrain.a" | awk 'NF == 3 {print $3}' | sort -u | comm -23 - <(echo "$exported") | grep -c .)
echo "$exported" | grep -qx ct_set_error && bad "internal ct_set_error is exported" ||
  ok "internal functions stay local ($internal global in libctrain.a are not exported, e.g. ct_set_error)"
umbrella=$(for h in include/ctrain/*.h; do b=$(basename "$h"); [ "$b" = ctrain.h ] || grep -q "#include \"$b\"" include/ctrain/ctrain.h || echo "$b"; done)
[ -z "$umbrella" ] && ok "ctrain.h includes every public header" || bad "ctrain.h does not include: $umbrella"

# ---- pkg-config and headers -------------------------------------------------------
pc=$(pkg-config --cflags --libs ctrain 2>&1)
case "$pc" in
  *"-I$P/include"*"-L$P/lib -lctrain"*) ok "pkg-config --cflags --libs ctrain: $pc" ;;
  *) bad "pkg-config --cflags --libs ctrain" "$pc" ;;
esac
[ "$(pkg-config --modversion ctrain 2>&1)" = "$version" ] && ok "pkg-config --modversion = $version" ||
  bad "pkg-config --modversion" "$(pkg-config --modversion ctrain 2>&1)"
hdr_bad=""
for h in "$P"/include/ctrain/*.h; do
  echo "#include <ctrain/$(basename "$h")>" |
    cc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only $(pkg-config --cflags ctrain) -x c - 2>/dev/null ||
    hdr_bad="$hdr_bad $(basename "$h")"
done
[ -z "$hdr_bad" ] && ok "each installed header compiles on its own (C99, -pedantic -Werror)" || bad "headers that do not compile alone:$hdr_bad"
if command -v g++ >/dev/null; then
  printf '#include <ctrain/ctrain.h>\n#include <cstring>\nint main() { return ct_status_name(CT_OK)[0] == 0 || strcmp(ct_version(), CT_VERSION_STRING) || strcmp(CT_VERSION_STRING, "%s"); }\n' "$version" > "$tmp/cxx.cpp"
  out=$(g++ -std=c++11 -Wall -Wextra -Werror -pedantic "$tmp/cxx.cpp" -o "$tmp/cxx" $(pkg-config --cflags --libs ctrain) \
        -Wl,-rpath,"$P/lib" 2>&1 && "$tmp/cxx" 2>&1)
  [ $? -eq 0 ] && ok "ctrain.h compiles and links as C++11; ct_version() = CT_VERSION_STRING = $version" || bad "ctrain.h as C++" "$out"
else
  bad "g++ is missing (build-essential; scripts/setup.sh)"
fi

# ---- the examples, built from a copy with pkg-config against the install ------------
cp -r examples "$tmp/examples"
rm -f "$tmp/examples/train_mlp" "$tmp/examples/predict"
out=$(make -C "$tmp/examples" CFLAGS="-O2 -std=c11 -Wall -Wextra -Werror -pedantic" 2>&1)
[ $? -eq 0 ] && ok "examples build with pkg-config (-std=c11 -pedantic -Werror)" || bad "examples build" "$out"
ex=$tmp/examples
lib=$(ldd "$ex/train_mlp" 2>&1 | sed -n 's/.*libctrain\.so\.[0-9]* => \([^ ]*\).*/\1/p')
[ "$lib" = "$P/lib/libctrain.so.$soversion" ] && ok "train_mlp loads $lib" || bad "train_mlp loads '$lib'" "$(ldd "$ex/train_mlp")"
expect predict_missing_checkpoint 1 "predict: ct_checkpoint_load.* failed: E70001" -- "$ex/predict" "$tmp/nope" data/mnist
expect train_mlp_usage 2 "usage: .*train_mlp MNIST_DIR CHECKPOINT_DIR" -- "$ex/train_mlp"
if [ -f data/mnist/t10k-images-idx3-ubyte ]; then
  out=$(timeout -k 5 120 "$ex/train_mlp" data/mnist "$tmp/ckpt" 300 2>&1)
  rc=$?
  acc=$(printf '%s\n' "$out" | sed -n 's/^test accuracy \([0-9.]*\)% (\([0-9]*\)\/10000)$/\2/p')
  [ "$rc" -eq 0 ] && [ -n "$acc" ] && [ "$acc" -gt 9000 ] && [ -d "$tmp/ckpt/step-000300" ] &&
    ok "train_mlp: 300 steps, test accuracy $acc/10000 > 90%, checkpoint step-000300" || bad "train_mlp (rc $rc)" "$out"
  out=$("$ex/predict" "$tmp/ckpt" data/mnist 2>&1)
  rc=$?
  pacc=$(printf '%s\n' "$out" | sed -n 's/^accuracy [0-9.]*% (\([0-9]*\)\/10000 test images).*/\1/p')
  [ "$rc" -eq 0 ] && [ -n "$acc" ] && [ "$pacc" = "$acc" ] &&
    ok "predict reproduces train_mlp's accuracy from the checkpoint ($pacc/10000)" || bad "predict: '$pacc', want '$acc' (rc $rc)" "$out"
  out=$("$ex/predict" "$tmp/ckpt" data/mnist 250 2>&1)
  printf '%s\n' "$out" | grep -qE "^image 0: predicted [0-9], label 7$" && printf '%s\n' "$out" | grep -qE "\(2[0-9][0-9]/250 test images\)" &&
    ok "predict N=250 prints predictions and a count over 250 images" || bad "predict N=250" "$out"
  # a checkpoint written by the installed CLI: predict rebuilds its model (hidden 64) from the stored recipe
  out=$("$P/bin/ctrain" train --hidden 64 --epochs 1 --max-steps 100 --batch-size 64 --threads 2 --quiet \
        --save-dir "$tmp/cli" 2>&1)
  cacc=$(printf '%s\n' "$out" | sed -n 's/^done: .*test accuracy \([0-9.]*\)%.*/\1/p')
  out2=$("$ex/predict" "$tmp/cli" data/mnist 2>&1)
  pacc=$(printf '%s\n' "$out2" | sed -n 's/^accuracy \([0-9.]*\)% .*/\1/p')
  [ -n "$cacc" ] && [ "$pacc" = "$cacc" ] && ok "predict on a 'ctrain train' checkpoint gives its test accuracy ($pacc%)" ||
    bad "predict on the CLI checkpoint: '$pacc', ctrain said '$cacc'" "$out $out2"
  # the same example linked statically: pkg-config --static names everything libctrain.a needs
  out=$(cc -std=c11 -O2 examples/train_mlp.c -o "$tmp/train_static" $(pkg-config --cflags ctrain) -Wl,--as-needed \
        "$P/lib/libctrain.a" $(pkg-config --static --libs ctrain) 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && ! readelf -d "$tmp/train_static" | grep -q libctrain; then
    expect static_link_runs 0 "step 50/50 .*test accuracy [0-9.]+%" -- "$tmp/train_static" data/mnist "$tmp/ckpt_static" 50
  else
    bad "static link with pkg-config --static --libs ctrain (rc $rc)" "$out $(readelf -d "$tmp/train_static" 2>&1 | grep NEEDED)"
  fi
else
  bad "data/mnist is missing: run scripts/setup.sh"
fi

# ---- OpenMP spin: what libgomp read, in the process that runs -----------------------
spins() { # command... -> the GOMP_SPINCOUNT values libgomp displayed, one per start
  env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose "$@" 2>&1 |
    sed -n "s/^ *GOMP_SPINCOUNT = '\([0-9]*\)'.*/\1/p" | tr '\n' ' '
}
s=$(spins "$ex/train_mlp")
[ "$s" = "300000 10000 " ] && ok "embedding program: ct_openmp_limit_spin re-executes once, libgomp then reads 10000" ||
  bad "train_mlp spin counts per start: '$s', want '300000 10000 '"
s=$(spins env GOMP_SPINCOUNT=5000 "$ex/train_mlp")
[ "$s" = "5000 " ] && ok "GOMP_SPINCOUNT set by the user: kept, no re-execution" || bad "with GOMP_SPINCOUNT=5000: '$s'"
s=$(spins env OMP_WAIT_POLICY=passive "$ex/train_mlp")
[ "$s" = "0 " ] && ok "OMP_WAIT_POLICY set by the user: kept, no re-execution" || bad "with OMP_WAIT_POLICY=passive: '$s'"
s=$(spins "$P/bin/ctrain" info)
[ "$s" = "300000 10000 " ] && ok "installed ctrain re-executes with GOMP_SPINCOUNT=10000 (library helper)" ||
  bad "ctrain info spin counts: '$s'"

# ---- the man page ----------------------------------------------------------------
page=$P/share/man/man1/ctrain.1
regen=$(scripts/make_man.sh "$P/bin/ctrain" "$version" 2>&1)
[ "$regen" = "$(cat "$page")" ] && ok "ctrain.1 equals the page generated from the installed binary's help" ||
  bad "ctrain.1 is stale" "$(diff <(echo "$regen") "$page" | head)"
missing=""
for c in $("$P/bin/ctrain" --help | sed -n '/^commands:/,/^$/p' | sed -n 's/^  \([a-z][a-z-]*\) .*/\1/p' | grep -vx help); do
  grep -q "^\.SS \"ctrain $c\"" "$page" || missing="$missing $c"
done
[ -z "$missing" ] && ok "ctrain.1 has a section per command of 'ctrain --help'" || bad "ctrain.1 lacks:$missing"
if command -v groff >/dev/null; then
  warn=$(groff -man -Tutf8 -ww -z "$page" 2>&1)
  [ -z "$warn" ] && ok "groff renders ctrain.1 without warnings" || bad "groff warnings" "$warn"
  if command -v man >/dev/null; then text=$(MANWIDTH=80 man -l "$page" 2>/dev/null); how="man -l"
  else text=$(groff -man -Tutf8 "$page" 2>/dev/null); how="groff -man"; fi
  printf '%s\n' "$text" | grep -q "^NAME" && printf '%s\n' "$text" | grep -qE "^ +--recipe FILE" &&
    printf '%s\n' "$text" | grep -q "GOMP_SPINCOUNT" && printf '%s\n' "$text" | grep -q "^EXIT STATUS" &&
    ok "$how renders NAME, the options, ENVIRONMENT and EXIT STATUS" || bad "$how output" "$text"
else
  bad "groff is missing (Debian groff-base; scripts/setup.sh installs it)"
fi

# ---- DESTDIR: staged under DESTDIR, paths in the files are PREFIX's -----------------
out=$(make -s BUILD="$BUILD" install PREFIX=/opt/ctrain DESTDIR="$tmp/stage" 2>&1)
[ $? -eq 0 ] && [ -f "$tmp/stage/opt/ctrain/lib/libctrain.so.$version" ] && [ ! -e /opt/ctrain/lib/libctrain.so ] &&
  grep -qx "prefix=/opt/ctrain" "$tmp/stage/opt/ctrain/lib/pkgconfig/ctrain.pc" &&
  ok "make install DESTDIR=$tmp/stage PREFIX=/opt/ctrain (.pc says prefix=/opt/ctrain)" || bad "DESTDIR install" "$out"
n=$(find "$tmp/stage" -type f -o -type l | grep -c .)
[ "$n" -eq "$(echo "$want" | wc -l)" ] && ok "DESTDIR install: $n files" || bad "DESTDIR install wrote $n files"
out=$(make -s BUILD="$BUILD" uninstall PREFIX=/opt/ctrain DESTDIR="$tmp/stage" 2>&1)
left=$(find "$tmp/stage" -type f -o -type l)
[ -z "$left" ] && ok "make uninstall DESTDIR=... leaves no file" || bad "left after DESTDIR uninstall" "$left $out"

# ---- make uninstall: what install wrote, and nothing else ----------------------------
echo keep > "$P/lib/other.txt"
echo keep > "$P/include/other.h"
out=$(make -s BUILD="$BUILD" uninstall PREFIX="$P" 2>&1)
[ $? -eq 0 ] && ok "make uninstall PREFIX=$P" || bad "make uninstall failed" "$out"
left=$(cd "$P" && find . -type f -o -type l | sed 's|^\./||' | sort | tr '\n' ' ')
[ "$left" = "include/other.h lib/other.txt " ] && ok "uninstall removed every installed file and kept the others" ||
  bad "after uninstall: '$left'"
[ ! -e "$P/include/ctrain" ] && ok "uninstall removed the empty include/ctrain/" || bad "include/ctrain/ is still there"

summary install_test
