#!/usr/bin/env bash
# Runs the bundled GPU tests (scripts/bundle-gpu-tests.sh) on a machine with
# an NVIDIA GPU, CUDA and Python's NCCL wheel (nvidia-nccl), and keeps a log
# of each in the given folder. Exit status: 0 when every program passed.
#
# Usage: run-gpu-tests.sh [log-dir]   (from the bundle folder or anywhere)
# Optional, for a device session that has the minutes (about 15 s each):
#   REPEATS=N    runs the whole GPU suite N more times in one process (flakes)
#   SANITIZE=1   runs the op cases under compute-sanitizer memcheck and
#                initcheck (--report-api-errors no: NCCL's own communicator
#                init probes kernels the device lacks and reports 8 API errors
#                per communicator that are not ours)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
logs=${1:-$PWD/gpu-logs}
mkdir -p "$logs"

# nvidia.nccl is a namespace package: no __file__, but a __path__.
nccl_lib=${NCCL_LIB:-$(python3 -c \
  "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])")/lib}
export LD_LIBRARY_PATH=$here/libs:$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
{
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  ls -l "$nccl_lib"
  echo "the GPU suite loads: $(ldd "$here/bin/nccl_gpu_test" | grep -E 'libnccl|libcudart')"
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" 2>&1
} | tee "$logs/machine.log"

failed=0
# shellcheck source=run_logged.sh
source "$here/run_logged.sh"
run() { # name, command...
  local name=$1
  shift
  if ! run_logged "$logs/$name.log" "$name" "${*: -1}" "$@"; then
    tail -n 30 "$logs/$name.log"
    failed=1
  fi
}
run nccl_anywhere timeout 120 "$here/bin/nccl_anywhere_test"
# The GPU suite one case per process, each under its own limit, so that a
# case that hangs is named and the others still run. doctest's filter splits
# on commas: a '?' (any one character) stands for each.
"$here/bin/nccl_gpu_test" -ltc --no-version | sed -n 's/^\(.*[^ ]\) *$/\1/p' |
  grep -vE '^(=+|\[doctest\].*)$' >"$logs/gpu_cases.txt"
index=0
while IFS= read -r case_name; do
  index=$((index + 1))
  run "gpu_case_$index" timeout "${CASE_LIMIT_S:-60}" "$here/bin/nccl_gpu_test" \
    --duration=true "--test-case=${case_name//,/?}"
done <"$logs/gpu_cases.txt"
NCCL_DEBUG=VERSION run example_06 timeout 120 "$here/bin/example_06_gpu_data_parallel"

for ((repeat = 1; repeat <= ${REPEATS:-0}; repeat++)); do
  run "repeat_$repeat" timeout 120 "$here/bin/nccl_gpu_test" --duration=true
  grep -E '^\[doctest\] (test cases|assertions)' "$logs/repeat_$repeat.log"
done

if [[ ${SANITIZE:-0} == 1 ]]; then
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  sanitized_cases=(
    'every data-movement op copies every dtype on one rank'
    'every reduce op NCCL has reduces every dtype on one rank'
    'gather, scatter and alltoall are right on the send/recv fallback'
    'a multi-GPU group runs every op over all of a member'"'"'s devices'
    'the backend'"'"'s memory never waits for other work on the device'
    'two groups on one device run side by side and give slots back'
    'an op that timed out behind the caller'"'"'s work never writes later'
    'group abort fails a running NCCL op at once and breaks the group'
  )
  for tool in memcheck initcheck; do
    index=0
    for case_name in "${sanitized_cases[@]}"; do
      index=$((index + 1))
      # initcheck on the two op matrices only: each run costs ~15 s of device time.
      [[ $tool == initcheck && $index -gt 2 ]] && break
      # Slower under the sanitizer: forming a communicator once took over
      # the suite's usual 20 s (tests/nccl/nccl_test_support.hpp).
      run "${tool}_$index" env CAF_COLLECTIVE_GPU_TEST_TIMEOUT_S=120 \
        timeout 180 "$sanitizer" --tool "$tool" \
        --report-api-errors no --error-exitcode 9 "$here/bin/nccl_gpu_test" \
        "--test-case=${case_name//,/?}"
      grep -E 'ERROR SUMMARY|^\[doctest\] test cases' "$logs/${tool}_$index.log"
      if grep -qE '^\[doctest\] test cases: +0 \|' "$logs/${tool}_$index.log"; then
        echo "=== ${tool}_$index: no test case is named '$case_name'"
        failed=1
      fi
    done
  done
fi
exit $failed
