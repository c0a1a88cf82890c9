#!/usr/bin/env bash
# The whole test suite from a clean clone: installs what is missing
# (scripts/setup.sh), builds, runs tests/run_all.sh, then a short libFuzzer
# run of every fuzz target (tests/fuzz/run.sh: CT_FUZZ_SECONDS per target,
# default 10; skipped without clang and libFuzzer). Fails when either fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
rc=0
bash tests/run_all.sh || rc=1
echo
echo "== fuzz (tests/fuzz/run.sh, ${CT_FUZZ_SECONDS:-10} s per target)"
bash tests/fuzz/run.sh || rc=1
exit $rc
