#!/usr/bin/env bash
# Builds the demos and runs them: the tour of the collective layer, then
# the actor demo (driver, members spawned with membership, object store)
# when it is part of the build. (scripts/build.sh builds everything.)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${CAF_COLLECTIVE_BUILD_DIR:-$root/build}

CAF_COLLECTIVE_TARGETS="caf_collective_tour caf_collective_demo" \
  "$root/scripts/build.sh"
"$build_dir/examples/collective_tour/caf_collective_tour"
if [[ -x "$build_dir/examples/demo/caf_collective_demo" ]]; then
  echo
  "$build_dir/examples/demo/caf_collective_demo" "$@"
fi
