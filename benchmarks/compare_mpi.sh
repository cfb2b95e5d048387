#!/usr/bin/env bash
# Our shm backend (threads of one process and forked processes) against
# Open MPI's shared-memory transport, in one invocation: for every rank
# count, caf_collective_perf --path shm (threads), the same with --procs,
# and caf_collective_mpi_reference under mpirun, then one table per op with
# the busbw ratios ours/MPI and the fraction of the copy model.
#
# usage: benchmarks/compare_mpi.sh [options] [-- flags for both tools]
#   -B DIR        build directory (build-bench)
#   -o DIR        where the CSV, raw output and plots go (a fresh temp dir)
#   --ranks LIST  rank counts, quoted or comma-separated ("2 4")
#   --ops LIST    ops (allreduce,allgather,reduce_scatter,broadcast,alltoall)
#   --gloo        also run our API on Gloo (path direct) in the threads run
#   --persistent  also run the ops as persistent ops (path shm-persistent:
#                 prepared once, run each iteration) in both shm runs
#   --plot        also write PNGs (busbw against size) into the -o dir
#   --rounds N    run the three N times in turn (threads, processes, MPI,
#                 threads, ...) and keep each tool's fastest round per cell
#                 (1). Each launch lands on its own placement of vCPUs, and
#                 a whole run's small sizes can be 0.1-0.2 us slower in a
#                 bad one ("Small sizes: two modes" in docs/benchmarks.md):
#                 with rounds, every tool gets N chances at a good one.
# Default flags of both tools (later ones given after -- win):
#   -b 8 -e 256M -f 2 -n 20 -w 3 --repeat 3 --time median --iter-budget 256M
# Needs a build with MPI found (cmake prints "benchmarks: MPI ... found").
# As root, mpirun runs with --allow-run-as-root; always --oversubscribe
# (4 ranks on 2 cores). MPIRUN_ARGS: more flags for mpirun (default
# "--bind-to none": our ranks are not pinned either).
# %copy in the tables: busbw / (C / ranks), C the best copy bandwidth any of
# the three runs measured (before or after its sweep), so that the columns
# share one denominator; each tool's own output has its own %copy.
set -euo pipefail

invocation="$0 $*"
here=$(cd "$(dirname "$0")" && pwd)
build="build-bench"
out=
ranks="2 4"
ops=allreduce,allgather,reduce_scatter,broadcast,alltoall
gloo=0
persistent=0
plot=0
rounds=1
while [[ $# -gt 0 ]]; do
  case $1 in
    -B) build=$2; shift 2 ;;
    -o) out=$2; shift 2 ;;
    --ranks) ranks=${2//,/ }; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --gloo) gloo=1; shift ;;
    --persistent) persistent=1; shift ;;
    --plot) plot=1; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "compare_mpi.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

perf=$build/benchmarks/caf_collective_perf
mpiref=$build/benchmarks/caf_collective_mpi_reference
for bin in "$perf" "$mpiref"; do
  if [[ ! -x $bin ]]; then
    echo "compare_mpi.sh: $bin not built (MPI found? see benchmarks/CMakeLists.txt)" >&2
    exit 2
  fi
done
command -v mpirun >/dev/null || { echo "compare_mpi.sh: no mpirun" >&2; exit 2; }
[[ -n $out ]] || out=$(mktemp -d /tmp/compare_mpi.XXXXXX)
mkdir -p "$out"

common=(--op "$ops" -b 8 -e 256M -f 2 -n 20 -w 3 --repeat 3 --time median
        --iter-budget 256M "$@")
mpirun_args=(--oversubscribe)
[[ $(id -u) == 0 ]] && mpirun_args+=(--allow-run-as-root)
# shellcheck disable=SC2206
mpirun_args+=(${MPIRUN_ARGS---bind-to none})
proc_paths=shm
[[ $persistent == 1 ]] && proc_paths=shm,shm-persistent
paths=$proc_paths
[[ $gloo == 1 ]] && paths=$paths,direct

echo "# $invocation"
echo "# both tools: ${common[*]}; mpirun ${mpirun_args[*]} -np N"
echo "# $(uname -srm), $(nproc) cores, $(mpirun --version 2>&1 | head -1)"
echo "# output in $out"
status=0
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "compare_mpi.sh: --rounds needs a count >= 1" >&2; exit 2; }
# The CSVs of a tool's rounds, as csv_tables.py takes them: joined by commas.
joined() { local IFS=,; echo "$*"; }
for n in $ranks; do
  threads_csvs=() procs_csvs=() mpi_csvs=() texts=()
  for ((r = 1; r <= rounds; ++r)); do
    # Round 1 keeps the file names of a single run.
    sfx=$n
    [[ $r == 1 ]] || sfx=$n-round$r
    echo "# ranks $n, round $r of $rounds: shm threads; load: $(uptime)"
    "$perf" "${common[@]}" --ranks "$n" --path "$paths" \
      --csv "$out/ours-threads-$sfx.csv" > "$out/ours-threads-$sfx.txt" || status=1
    echo "# ranks $n, round $r of $rounds: shm processes; load: $(uptime)"
    "$perf" "${common[@]}" --ranks "$n" --path "$proc_paths" --procs \
      --csv "$out/ours-procs-$sfx.csv" > "$out/ours-procs-$sfx.txt" || status=1
    echo "# ranks $n, round $r of $rounds: MPI; load: $(uptime)"
    mpirun "${mpirun_args[@]}" -np "$n" "$mpiref" "${common[@]}" \
      --csv "$out/mpi-$sfx.csv" > "$out/mpi-$sfx.txt" || status=1
    threads_csvs+=("$out/ours-threads-$sfx.csv")
    procs_csvs+=("$out/ours-procs-$sfx.csv")
    mpi_csvs+=("$out/mpi-$sfx.csv")
    texts+=("$out/ours-threads-$sfx.txt" "$out/ours-procs-$sfx.txt" "$out/mpi-$sfx.txt")
  done
  echo "# ranks $n: done; load: $(uptime)"
  # Every copy measurement of the runs, before and after the sweeps.
  mapfile -t copies < <(sed -n \
    's/.*\(best of [0-9]*\|after the sweep\): \([0-9.]*\) GB\/s together.*/\2/p' \
    "${texts[@]}")
  echo "# copy bandwidth measured (GB/s, threads together): ${copies[*]}"
  best=$(printf '%s\n' "${copies[@]}" | sort -g | tail -1)
  table_args=()
  [[ -n $best ]] && table_args+=(--copy "$best")
  [[ $plot == 1 ]] && table_args+=(--plot "$out/shm-vs-mpi-${n}ranks")
  [[ $rounds == 1 ]] || echo "# each cell: the fastest of $rounds rounds per tool"
  python3 "$here/csv_tables.py" --compare "$(joined "${threads_csvs[@]}")" \
    "$(joined "${procs_csvs[@]}")" "$(joined "${mpi_csvs[@]}")" "${table_args[@]}"
  echo
done
[[ $status == 0 ]] || echo "compare_mpi.sh: a run failed or saw wrong results (see $out/*.txt)" >&2
exit $status
