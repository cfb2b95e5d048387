#!/usr/bin/env bash
# Builds caf-collective with sanitizers and runs every test suite under them.
#
#   scripts/run-sanitizers.sh [asan|tsan|all] [extra CMake configure args]
#
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer (+ LeakSanitizer)
#         into ./build-asan
#   tsan  ThreadSanitizer into ./build-tsan
#   all   both, asan first (the default)
#
# Both builds are RelWithDebInfo with -DCAF_COLLECTIVE_NCCL=OFF (the CUDA
# runtime and NCCL are not built with sanitizers; the GPU suites are covered
# by docs/gpu.md), without examples and benchmarks. Each suite (one test
# executable, i.e. the part of a CTest name before ":") runs as its own CTest
# invocation with its own report folder, build-*/sanitizer-logs/<suite>/, so
# reports of helper processes (collective_rank_process,
# caf_collective_test_node) land with the suite that spawned them: they
# inherit the *SAN_OPTIONS below through the environment.
#
# Suppressions: tests/sanitizers/{ubsan,lsan,tsan}.supp, each entry a
# third-party frame with the reason. See docs/sanitizers.md.
#
# Exit status: 0 when no sanitizer reported and no test failed in a strict
# suite, 1 otherwise, 2 on bad usage, 3 when configure or build failed.
# Under TSan the actor suites (names matching CAF_COLLECTIVE_TSAN_ADVISORY,
# default '^actors_') are advisory: they run, their reports are counted and
# classified, but they do not change the exit status, because CAF itself is
# not built with TSan (docs/sanitizers.md). Set CAF_COLLECTIVE_TSAN_ADVISORY=
# (empty) to make them strict.
#
# Environment: CAF_COLLECTIVE_JOBS (build jobs, default 2),
# CAF_COLLECTIVE_TEST_JOBS (tests at once, default 2),
# CAF_COLLECTIVE_SKIP_BUILD=1 (configure only, test what is built),
# CAF_COLLECTIVE_SUITES / CAF_COLLECTIVE_SKIP_SUITES (extended regexes over
# suite names: run only the matching ones / leave the matching ones out;
# say so when you report a partial run), ASAN_OPTIONS,
# UBSAN_OPTIONS, LSAN_OPTIONS, TSAN_OPTIONS (appended to the script's own,
# so they override them). Run it under `nice` on a shared machine.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
supp_dir=$root/tests/sanitizers
jobs=${CAF_COLLECTIVE_JOBS:-2}
test_jobs=${CAF_COLLECTIVE_TEST_JOBS:-2}
tsan_advisory=${CAF_COLLECTIVE_TSAN_ADVISORY-^actors_}
only_suites=${CAF_COLLECTIVE_SUITES:-}
skip_suites=${CAF_COLLECTIVE_SKIP_SUITES:-}

mode=${1:-all}
case "$mode" in
  asan | tsan | all) shift $(($# > 0 ? 1 : 0)) ;;
  -h | --help)
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' \
      "${BASH_SOURCE[0]}"
    exit 0
    ;;
  *)
    echo "usage: $0 [asan|tsan|all] [extra CMake configure args]" >&2
    exit 2
    ;;
esac
cmake_args=("$@")

# Options for the user's own additions, appended last (later flags win).
user_asan=${ASAN_OPTIONS:-}
user_ubsan=${UBSAN_OPTIONS:-}
user_lsan=${LSAN_OPTIONS:-}
user_tsan=${TSAN_OPTIONS:-}

status=0

# Prints one line per report in the sanitizer logs given as arguments:
#   kind <TAB> class <TAB> key <TAB> top frames
# class: ours (a frame in collective/, object_store/ or actors/), tests (a
# frame in tests/, none in the library), third-party (neither). Only the
# stacks of the accesses / allocations count: not where a thread or mutex was
# created, and not the location's allocation under TSan.
classify() {
  awk -v root="$root" '
    function finish() {
      if (kind == "") return
      cls = ours != "" ? "ours" : (tests != "" ? "tests" : "third-party")
      key = ours != "" ? ours : (tests != "" ? tests : first)
      printf "%s\t%s\t%s\t%s\n", kind, cls, key, top
      kind = ""
    }
    function start(k) {
      finish()
      kind = k; ours = ""; tests = ""; first = ""; top = ""; nframes = 0
      consider = 1
    }
    # "#3 0x7f.. in f(int) /path/x.cpp:12:5" (ASan/UBSan) or
    # "#3 f(int) /path/x.cpp:12 (lib.so+0x..)" (TSan) -> "f(int) x.cpp:12"
    function frame_text(line) {
      sub(/^ *#[0-9]+ /, "", line)
      sub(/^0x[0-9a-f]+ in /, "", line)
      sub(/ \([^ ]*\+0x[0-9a-f]+\)$/, "", line)
      gsub(root "/", "", line)
      return length(line) > 160 ? substr(line, 1, 157) "..." : line
    }
    # ctest -V -j N prefixes each line of test output with "N: ".
    { sub(/^[0-9]+: /, "") }
    /ERROR: AddressSanitizer: / {
      k = $0; sub(/.*ERROR: AddressSanitizer: /, "", k); sub(/ .*/, "", k)
      start("asan:" k); next
    }
    /ERROR: LeakSanitizer: / { start("lsan:leak"); next }
    /runtime error: / {
      k = $0; sub(/.*runtime error: /, "", k)
      gsub(/0x[0-9a-f]+/, "ADDR", k); k = substr(k, 1, 60)
      start("ubsan:" k)
      loc = $0; sub(/: runtime error: .*/, "", loc)
      if (index(loc, root "/") == 1) {
        rel = substr(loc, length(root) + 2)
        if (rel ~ /^(collective|object_store|actors)\//) ours = rel
        else if (rel ~ /^tests\//) tests = rel
      }
      next
    }
    /WARNING: ThreadSanitizer: / {
      k = $0; sub(/.*WARNING: ThreadSanitizer: /, "", k); sub(/ \(pid=.*/, "", k)
      start("tsan:" k); next
    }
    /(ERROR|FATAL): ThreadSanitizer/ { start("tsan:fatal"); next }
    kind == "" { next }
    /^SUMMARY: / { finish(); next }
    /^ *#[0-9]+ / {
      if (!consider) next
      f = frame_text($0)
      if (first == "") first = f
      if (nframes < 4) { top = top (nframes ? " | " : "") f; ++nframes }
      if (ours == "" && index($0, root "/") > 0) {
        if ($0 ~ ("(" root "/)(collective|object_store|actors)/")) ours = f
        else if (tests == "" && index($0, root "/tests/") > 0) tests = f
      }
      next
    }
    /^ *(Location is|Thread T[0-9]+.* created by|Mutex M[0-9]+ .*created at)/ {
      consider = 0; next
    }
    /^ *[A-Z][A-Za-z ]*.*:$/ { consider = 1 }
    END { finish() }
  ' "$@"
}

run_mode() {
  local mode=$1 sanitizers build_dir
  case "$mode" in
    asan) sanitizers="address,undefined" ;;
    tsan) sanitizers="thread" ;;
  esac
  build_dir=$root/build-$mode
  local t0=$SECONDS
  echo "== $mode: configure and build ($build_dir, -fsanitize=$sanitizers)"
  if ! cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCAF_COLLECTIVE_SANITIZERS="$sanitizers" -DCAF_COLLECTIVE_NCCL=OFF \
      -DCAF_COLLECTIVE_EXAMPLES=OFF -DCAF_COLLECTIVE_BENCHMARKS=OFF \
      "${cmake_args[@]}" >"$root/build-$mode.configure.log" 2>&1; then
    tail -20 "$root/build-$mode.configure.log"
    echo "== $mode: configure FAILED (log: build-$mode.configure.log)"
    return 3
  fi
  rm -f "$root/build-$mode.configure.log"
  if [[ ${CAF_COLLECTIVE_SKIP_BUILD:-0} == 1 ]]; then
    echo "== $mode: CAF_COLLECTIVE_SKIP_BUILD=1: testing what is built"
  elif ! cmake --build "$build_dir" -j "$jobs" >"$build_dir/build.log" 2>&1; then
    grep -E -m 20 -B2 -A6 'error|Error' "$build_dir/build.log"
    echo "== $mode: build FAILED (log: $build_dir/build.log)"
    return 3
  fi
  local t_build=$((SECONDS - t0))

  local logs=$build_dir/sanitizer-logs
  rm -rf "$logs"
  mkdir -p "$logs"
  local suites
  suites=$(cd "$build_dir" && ctest -N |
    sed -n 's/^ *Test *#[0-9]*: \([A-Za-z0-9_]*\):.*/\1/p' | awk '!seen[$0]++')
  if [[ -n "$only_suites" ]]; then
    suites=$(grep -E -- "$only_suites" <<<"$suites")
  fi
  if [[ -n "$skip_suites" ]]; then
    suites=$(grep -v -E -- "$skip_suites" <<<"$suites")
  fi
  if [[ -z "$suites" ]]; then
    echo "== $mode: no tests found"
    return 1
  fi

  local rc=0 suite dir t1 out passed failed skipped total reports summary
  local -a lines=()
  t1=$SECONDS
  for suite in $suites; do
    dir=$logs/$suite
    mkdir -p "$dir"
    local common="log_path=$dir/report:log_exe_name=1:print_suppressions=0"
    local -a env_opts
    if [[ $mode == asan ]]; then
      env_opts=(
        "ASAN_OPTIONS=$common:detect_leaks=1:strict_string_checks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1${user_asan:+:$user_asan}"
        "UBSAN_OPTIONS=$common:halt_on_error=1:print_stacktrace=1:print_summary=1:suppressions=$supp_dir/ubsan.supp${user_ubsan:+:$user_ubsan}"
        "LSAN_OPTIONS=$common:suppressions=$supp_dir/lsan.supp${user_lsan:+:$user_lsan}"
      )
    else
      env_opts=(
        "TSAN_OPTIONS=$common:halt_on_error=0:exitcode=66:second_deadlock_stack=1:history_size=7:suppressions=$supp_dir/tsan.supp${user_tsan:+:$user_tsan}"
      )
    fi
    local ts=$SECONDS
    (cd "$build_dir" && env "${env_opts[@]}" ctest --no-tests=error \
      -R "^${suite}:" -j "$test_jobs" --timeout 300 -V) \
      >"$dir/ctest.log" 2>&1
    local ctest_rc=$?
    out=$(grep -E '^[0-9]+% tests passed' "$dir/ctest.log" | tail -1)
    total=$(sed -n 's/.* out of \([0-9]*\).*/\1/p' <<<"$out")
    failed=$(sed -n 's/.*, \([0-9]*\) tests* failed.*/\1/p' <<<"$out")
    failed=${failed:-0}
    skipped=$(grep -c -E '\*\*\*Skipped|Not Run' "$dir/ctest.log")
    passed=$((${total:-0} - failed - skipped))
    # Reports are in the log files (one per process) and, for UBSan, whose
    # report body goes to stderr in GCC's combined ASan+UBSan runtime (only
    # the SUMMARY line reaches log_path), in the test output.
    classify "$dir/ctest.log" "$dir"/report.* 2>/dev/null >"$dir/reports.tsv"
    reports=$(wc -l <"$dir/reports.tsv")
    summary=$(cut -f1,2 "$dir/reports.tsv" | sort | uniq -c | sort -rn |
      awk '{printf "%s%s %s (%s)", (NR > 1 ? ", " : ""), $1, $2, $3}')

    local advisory=0 verdict
    if [[ $mode == tsan && -n "$tsan_advisory" && $suite =~ $tsan_advisory ]]; then
      advisory=1
    fi
    if ((reports == 0 && failed == 0 && ctest_rc == 0)); then
      verdict=clean
    elif ((advisory)); then
      verdict=advisory
    else
      verdict=FAIL
      rc=1
    fi
    lines+=("$(printf '%-36s %-8s %3s passed %2s failed %2s skipped  %4ss  %s reports%s' \
      "$suite" "$verdict" "$passed" "$failed" "$skipped" $((SECONDS - ts)) \
      "$reports" "${summary:+: $summary}")")
    echo "   $suite: $verdict ($((SECONDS - ts))s)"
  done
  local t_test=$((SECONDS - t1))

  echo
  echo "== $mode summary (build ${t_build}s, tests ${t_test}s; logs under ${logs#"$root"/})"
  printf '   %s\n' "${lines[@]}"
  # Every distinct report in our own code, with its first frames.
  local ours
  ours=$(cat "$logs"/*/reports.tsv | awk -F'\t' '$2 == "ours"' |
    cut -f1,3,4 | sort | uniq -c | sort -rn)
  if [[ -n "$ours" ]]; then
    echo "== $mode: reports with frames in collective/, object_store/, actors/ (count, kind, first own frame, top frames):"
    sed 's/^/   /' <<<"$ours" | head -40
  fi
  local failed_tests
  failed_tests=$(grep -h -E '^ *[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception|Child aborted)' \
    "$logs"/*/ctest.log 2>/dev/null)
  if [[ -n "$failed_tests" ]]; then
    echo "== $mode: failed tests:"
    sed 's/^ */   /' <<<"$failed_tests"
  fi
  return $rc
}

if [[ $mode == all ]]; then
  modes=(asan tsan)
else
  modes=("$mode")
fi
for m in "${modes[@]}"; do
  run_mode "$m"
  r=$?
  if ((r > status)); then status=$r; fi
done
exit $status
