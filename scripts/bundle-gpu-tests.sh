#!/usr/bin/env bash
# Packs the GPU test programs of a build with the NCCL backend, stripped, and
# the shared libraries they load that a GPU machine lacks (CAF, Gloo, spdlog,
# fmt and what those load; not libnccl: the GPU machine has its own), into
# one folder small enough to carry there. docs/gpu.md says how to use it.
#
# Usage: scripts/bundle-gpu-tests.sh [build-dir]   (default: build-gpu)
# Result: <build-dir>/bundle/{bin,libs}, plus run-gpu-tests.sh beside them.
# WITH_BENCHMARKS=1 also packs the CPU benchmark tools and
# benchmarks/many_core_run.sh, to measure on the GPU machine's many cores
# what the 2-vCPU development machine cannot (docs/benchmarks.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$root/build-gpu}
bundle=$build/bundle
programs=(
  tests/nccl/nccl_gpu_test
  tests/nccl/nccl_anywhere_test
  examples/06_gpu_data_parallel/example_06_gpu_data_parallel
)
if [[ ${WITH_BENCHMARKS:-0} == 1 ]]; then
  programs+=(
    benchmarks/caf_collective_perf
    benchmarks/caf_collective_member_loop
    benchmarks/caf_collective_shm_latency
  )
fi

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/libs"
for program in "${programs[@]}"; do
  [[ -x "$build/$program" ]] || {
    echo "bundle-gpu-tests: $build/$program is missing; build it first" >&2
    exit 1
  }
  strip -o "$bundle/bin/$(basename "$program")" "$build/$program"
  ldd "$build/$program" | awk '/=> \// {print $3}' |
    grep -vE '/libnccl|/libc\.|/libm\.|/libstdc|/libgcc_s|/ld-linux|/libpthread|/libdl\.|/librt\.' |
    while read -r lib; do
      [[ -e "$bundle/libs/$(basename "$lib")" ]] ||
        strip -o "$bundle/libs/$(basename "$lib")" "$lib" 2>/dev/null ||
        cp -L "$lib" "$bundle/libs/"
    done
done
cp "$root/scripts/run-gpu-tests.sh" "$root/scripts/run_logged.sh" "$bundle/"
if [[ ${WITH_BENCHMARKS:-0} == 1 ]]; then
  cp "$root/benchmarks/many_core_run.sh" "$bundle/"
fi
du -sh "$bundle"
