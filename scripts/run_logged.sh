# Sourced by run-gpu-tests.sh and benchmarks/many_core_run.sh (and copied
# beside them into the GPU bundle): runs one command with its output in a
# log file, announces it and reports its exit status and duration.
#
# run_logged LOG_FILE NAME LABEL COMMAND...   returns the command's status
run_logged() {
  local log=$1 name=$2 label=$3
  shift 3
  echo "=== $name: $label"
  local start=$SECONDS
  "$@" >"$log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc in $((SECONDS - start)) s"
  return $rc
}
