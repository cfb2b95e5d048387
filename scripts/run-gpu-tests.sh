#!/usr/bin/env bash
# Runs the bundled GPU tests (scripts/bundle-gpu-tests.sh) on a machine with
# an NVIDIA GPU, CUDA and Python's NCCL wheel (nvidia-nccl), and keeps a log
# of each in the given folder. Exit status: 0 when every program passed.
#
# Usage: run-gpu-tests.sh [log-dir]   (from the bundle folder or anywhere)
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
run() { # name, command...
  local name=$1
  shift
  echo "=== $name: ${*: -1}"
  local start=$SECONDS
  "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - start)) s"
  if ((rc != 0)); then
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
exit $failed
