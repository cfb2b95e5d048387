#!/usr/bin/env bash
# The measurements behind the goals of issues 10 and 11 that the 2-vCPU
# development machine cannot settle (4 ranks or 4 members and their lanes
# on 2 cores), run on a machine with more cores: the driver and member
# paths against the direct path, 8 B latency, and single copy against the
# staged copy with 4 ranks as processes, and the driver with requests in
# flight. One log per measurement in the output folder, the machine's
# description in machine.txt.
#
# Usage: benchmarks/many_core_run.sh BIN_DIR OUT_DIR
#   BIN_DIR holds caf_collective_perf, caf_collective_member_loop and
#   caf_collective_shm_latency (a build's benchmarks/ folder, or the bin/
#   folder of scripts/bundle-gpu-tests.sh with WITH_BENCHMARKS=1).
# Exit status: 0 when every measurement ran to its end.
set -uo pipefail
bin=${1:?usage: many_core_run.sh BIN_DIR OUT_DIR}
out=${2:?usage: many_core_run.sh BIN_DIR OUT_DIR}
mkdir -p "$out"
{
  echo "cores: $(nproc)"
  lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L2|L3)'
  echo "clock source: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null)"
  uptime
} >"$out/machine.txt"
cat "$out/machine.txt"

status=0
# Beside this script: in scripts/ of a checkout, or in the bundle.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
helper=$here/run_logged.sh
[[ -f $helper ]] || helper=$here/../scripts/run_logged.sh
# shellcheck source=../scripts/run_logged.sh
source "$helper"
run() { # name, command...
  local name=$1
  shift
  run_logged "$out/$name.txt" "$name" "$*" timeout 120 "$@" || status=1
}

perf=$bin/caf_collective_perf
for s in stealing stealing-sleep; do
  run "driver-1m-$s" "$perf" --ranks 4 --backend shm --path direct,driver \
    --op allreduce,reduce_scatter,allgather,broadcast,alltoall -b 1M -e 16M \
    -f 4 -n 20 -w 3 --repeat 3 --time median --copy-model 0 --caf-scheduler "$s"
  run "driver-overlap-1m-$s" "$perf" --ranks 4 --backend shm \
    --path direct,driver,driver-overlap --window 4 \
    --op allreduce,allgather,reduce_scatter,broadcast,alltoall -b 1M -e 16M \
    -f 4 -n 20 -w 3 --repeat 3 --time median --copy-model 0 --caf-scheduler "$s"
  run "driver-8b-$s" "$perf" --ranks 4 --backend shm --path direct,driver \
    -b 8 -e 8 -n 3000 -w 100 --time median --copy-model 0 --caf-scheduler "$s"
  run "member-loop-1m-$s" "$bin/caf_collective_member_loop" --ranks 4 \
    --iters 300 --bytes 1048576 --caf-scheduler "$s"
  run "member-loop-8b-$s" "$bin/caf_collective_member_loop" --ranks 4 \
    --iters 3000 --caf-scheduler "$s"
done
# CAF's worker count: one per core by default; fewer workers, fewer idle
# ones to wake.
for workers in 2 4; do
  s=stealing-sleep/$workers
  run "member-loop-8b-w$workers" "$bin/caf_collective_member_loop" --ranks 4 \
    --iters 3000 --caf-scheduler "$s"
  run "member-loop-1m-w$workers" "$bin/caf_collective_member_loop" --ranks 4 \
    --iters 300 --bytes 1048576 --caf-scheduler "$s"
  run "driver-8b-w$workers" "$perf" --ranks 4 --backend shm --path direct,driver \
    -b 8 -e 8 -n 3000 -w 100 --time median --copy-model 0 --caf-scheduler "$s"
done
for sc in on off; do
  # Level info: the log says whether the kernel allowed single copy.
  run "procs4-single-copy-$sc" env CAF_COLLECTIVE_SHM_SINGLE_COPY=$sc \
    CAF_COLLECTIVE_LOG_LEVEL=info \
    "$perf" --ranks 4 --path shm --procs \
    --op allreduce,reduce_scatter,allgather,broadcast,alltoall,gather \
    -b 64K -e 8M -f 4 -n 40 -w 5 --repeat 3 --time median --copy-model 0
done
lat=$bin/caf_collective_shm_latency
run latency-api "$lat" --ranks 2 --procs --iters 50000
run latency-persistent "$lat" --ranks 2 --procs --iters 50000 --persistent
run latency-backend "$lat" --ranks 2 --procs --iters 50000 --backend-only
# The tail: iterations over 10x the median, 4 and 8 ranks.
for ranks in 4 8; do
  run "latency-api-$ranks" "$lat" --ranks "$ranks" --procs --iters 50000
done
exit $status
