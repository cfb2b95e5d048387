#!/bin/sh
# Runs a rank program under Open MPI's `mpirun -n <n>` exactly as a user
# would, with no variable of ours: the ranks find rank, size, store address
# and secret in what mpirun sets. Checks that <n> lines of the output
# contain <success text> (one per rank). Exits 77 (CTest: skipped) when
# mpirun is not installed.
#
# Usage: run_under_mpirun.sh <n> <success text> <rank program> [args...]
set -u
n="$1"
success="$2"
shift 2
if ! command -v mpirun >/dev/null 2>&1; then
  echo "mpirun not found: install openmpi-bin (scripts/install-deps.sh)"
  exit 77
fi
# Launcher variables of the environment the test runs in would override
# mpirun's (our own take precedence): drop them.
unset CAF_COLLECTIVE_RANK CAF_COLLECTIVE_WORLD_SIZE CAF_COLLECTIVE_LOCAL_RANK \
  CAF_COLLECTIVE_STORE CAF_COLLECTIVE_SECRET CAF_COLLECTIVE_RUN_ID \
  RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT
# --oversubscribe: more ranks than cores is fine for a test; root needs
# --allow-run-as-root (containers often run tests as root).
flags="--oversubscribe"
[ "$(id -u)" = 0 ] && flags="$flags --allow-run-as-root"
out=$(mpirun $flags -n "$n" "$@" 2>&1)
rc=$?
echo "$out"
if [ "$rc" -ne 0 ]; then
  echo "mpirun exited with $rc"
  exit 1
fi
ok=$(echo "$out" | grep -c -F "$success")
if [ "$ok" -ne "$n" ]; then
  echo "expected $n ranks to report '$success', saw $ok"
  exit 1
fi
