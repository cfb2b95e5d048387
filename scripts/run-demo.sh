#!/usr/bin/env bash
# Builds everything and runs the main demo.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CAF_COLLECTIVE_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
"$build_dir/examples/demo/caf_collective_demo" "$@"
