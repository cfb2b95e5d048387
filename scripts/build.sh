#!/usr/bin/env bash
# Configures and builds caf-collective into ./build (Release with debug info).
# Extra arguments go to the CMake configure step, e.g. -DCAF_COLLECTIVE_NCCL=OFF.
# CAF_COLLECTIVE_TARGETS (space-separated) builds only those targets.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CAF_COLLECTIVE_BUILD_DIR:-$root/build}
jobs=${CAF_COLLECTIVE_JOBS:-2}

"$root/scripts/install-deps.sh"
# Only the configuration summary (CAF, Gloo, whether the NCCL backend is in).
cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" |
  sed -n '/caf-collective .* configuration:/,/sanitizers/p'
targets=()
for t in ${CAF_COLLECTIVE_TARGETS:-}; do
  targets+=(--target "$t")
done
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"
