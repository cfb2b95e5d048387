#!/usr/bin/env bash
# Builds everything and runs the whole test suite through CTest. Fails when a
# test fails or when no test ran at all.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CAF_COLLECTIVE_BUILD_DIR:-$root/build}

"$root/scripts/build.sh" "$@"
cd "$build_dir"
ctest --output-on-failure --no-tests=error -j "${CAF_COLLECTIVE_TEST_JOBS:-2}" \
  --timeout 300
