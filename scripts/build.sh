#!/usr/bin/env bash
# Configures and builds caf-collective into ./build (Release with debug info).
# Extra arguments go to the CMake configure step, e.g. -DCAF_COLLECTIVE_NCCL=OFF.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CAF_COLLECTIVE_BUILD_DIR:-$root/build}
jobs=${CAF_COLLECTIVE_JOBS:-2}

"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build_dir" -j "$jobs"
