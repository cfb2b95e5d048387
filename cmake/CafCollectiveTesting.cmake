# caf_collective_add_doctest(<target> SOURCES ... LIBS ... [LABELS ...]
#                            [SERIAL])
#
# Builds a doctest executable and registers one CTest per test case, so a
# failure names the case and cases run in parallel (SERIAL: each case runs
# with no other test beside it). doctest's own doctest_discover_tests lists
# the cases at build time.
include("${doctest_DIR}/doctest.cmake")

function(caf_collective_add_doctest target)
  cmake_parse_arguments(arg "SERIAL" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${target} ${arg_SOURCES}
    "${PROJECT_SOURCE_DIR}/tests/support/require_a_test_case.cpp")
  target_link_libraries(${target} PRIVATE doctest::doctest ${arg_LIBS})
  target_compile_definitions(${target} PRIVATE DOCTEST_CONFIG_SUPER_FAST_ASSERTS)
  set(properties TIMEOUT 300)
  if(arg_LABELS)
    list(APPEND properties LABELS "${arg_LABELS}")
  endif()
  # SERIAL: no other test runs beside these (see tests/collective for why).
  if(arg_SERIAL)
    list(APPEND properties RUN_SERIAL TRUE)
  endif()
  doctest_discover_tests(${target} TEST_PREFIX "${target}: "
                         PROPERTIES ${properties})
endfunction()
