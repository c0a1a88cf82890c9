#!/usr/bin/env bash
# The whole test suite from a clean clone: installs what is missing
# (scripts/setup.sh), builds, runs tests/run_all.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec bash tests/run_all.sh
