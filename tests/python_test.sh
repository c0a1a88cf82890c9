#!/usr/bin/env bash
# tests/python_test.sh - the Python package (python/ctrain/, docs/python.md): `make install-python` into a
# temporary DESTDIR and `import ctrain` from there (the library copy inside the package, no CTRAIN_LIB), then
# the pytest suite tests/python/ against build/libctrain.so: recipes, overrides, callbacks that stop a run,
# errors as exceptions, load / predict / sample, the PyTorch state_dict round trip, a custom model built in
# Python equal to the C one bit for bit, and the CLI's weights bit for bit. Needs Debian's python3-cffi,
# python3-numpy, python3-pytest (scripts/setup.sh) and data/mnist; python3-torch for the state_dict test.
# Usage: tests/python_test.sh [PYTEST ARGS...]  (about a minute)
set -u
cd "$(dirname "$0")/.."
. tests/lib.sh
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3

if ! "$PY" -c 'import cffi, numpy, pytest' 2>/dev/null; then
  bad python_modules "$PY cannot import cffi, numpy and pytest: run scripts/setup.sh (python3-cffi python3-numpy python3-pytest)"
  summary python
  exit 1
fi
[ -f build/libctrain.so ] || make -s BUILD=build all >/dev/null

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# the documented install, into a DESTDIR, then imported from another folder
if out=$(make -s BUILD=build install-python PYTHON="$PY" DESTDIR="$tmp/root" 2>&1); then
  site=$(find "$tmp/root" -type d -name ctrain -path '*-packages/ctrain' | head -n 1)
  got=$(cd "$tmp" && env -u CTRAIN_LIB PYTHONPATH="${site%/ctrain}" "$PY" -c \
        'import ctrain; print(ctrain.lib_path); print(ctrain.__file__)' 2>&1)
  if [ -n "$site" ] && printf '%s' "$got" | grep -q "^$site/libctrain.so.2" && printf '%s' "$got" | grep -q "^$site/__init__.py"; then
    ok install_python_imports
  else
    bad install_python_imports "site '$site': $got"
  fi
else
  bad install_python "$out"
fi

# the pytest suite: one ok / FAIL line per test
log="$tmp/pytest.log"
CTRAIN_LIB="$PWD/build/libctrain.so" CTRAIN_CLI="$PWD/build/ctrain" PYTHONDONTWRITEBYTECODE=1 \
  timeout -k 5 600 "$PY" -m pytest -q -rA -p no:cacheprovider tests/python "$@" >"$log" 2>&1
rc=$?
while read -r kind name rest; do
  case $kind in
    PASSED) ok "${name#tests/python/}" ;;
    FAILED|ERROR) bad "${name#tests/python/} $rest" "$(grep -A30 -F "${name##*::}" "$log" | head -n 30)" ;;
    SKIPPED) echo "  skip ${name} ${rest}" ;;
  esac
done < <(grep -E '^(PASSED|FAILED|ERROR|SKIPPED) ' "$log")
if [ "$rc" -ne 0 ] && ! grep -qE '^(FAILED|ERROR) ' "$log"; then
  bad pytest_run "pytest exited $rc: $(tail -n 20 "$log")"
fi
tail -n 1 "$log" | sed 's/^/  pytest: /'
summary python
