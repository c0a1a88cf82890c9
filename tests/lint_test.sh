#!/usr/bin/env bash
# tests/lint_test.sh - `make lint-gcc` (gcc 12 -fanalyzer over src/ and
# tools/, docs/lint.md) as a suite: one pass per file analyzed clean (its
# stamp exists), one failure per file with a finding; the findings are
# printed. A clean file is analyzed again only when it or a header changes.
# usage: tests/lint_test.sh
set -u
cd "$(dirname "$0")/.."
out=$(make -k -j"${JOBS:-2}" lint-gcc 2>&1)
rc=$?
pass=0
fail=0
for s in $(make -s lint-gcc-stamps); do
  if [ -f "$s" ]; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "  FAIL ${s#build-lint/}: a finding (below)"; fi
done
printf '%s\n' "$out" | grep -E "(warning|error): " | sed 's/^/       /'
[ "$rc" -ne 0 ] && [ "$fail" -eq 0 ] && { fail=1; printf '%s\n' "$out" | tail -n 20; }
echo "lint_test.sh (gcc -fanalyzer): $pass passed, $fail failed"
[ "$fail" -eq 0 ]
