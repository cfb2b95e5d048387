#!/usr/bin/env bash
# Builds everything and runs the demos: the tour of the collective layer,
# then the actor demo (driver, members spawned with membership, object
# store) when it is part of the build.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CAF_COLLECTIVE_BUILD_DIR:-$root/build}

"$root/scripts/build.sh"
"$build_dir/examples/collective_tour/caf_collective_tour"
if [[ -x "$build_dir/examples/demo/caf_collective_demo" ]]; then
  echo
  "$build_dir/examples/demo/caf_collective_demo" "$@"
fi
