# Runs one packaging test (see CMakeLists.txt here):
#   cmake -DMODE=package|subdirectory -DSOURCE_DIR=... -DBUILD_DIR=...
#         -DCONSUMER_DIR=... -DWORK_DIR=... [-DCONFIG=...] [-DCXX_COMPILER=...]
#         [-DGENERATOR=...] [-DJOBS=2] [-DSANITIZERS=...] [-DNCCL=ON|OFF]
#         [-DKEEP=ON] -P run_consumer.cmake
# package:      cmake --install BUILD_DIR into WORK_DIR/prefix, then the
#               consumer with CMAKE_PREFIX_PATH=WORK_DIR/prefix.
# subdirectory: the consumer with add_subdirectory(SOURCE_DIR), doctest
#               disabled (it must not be needed with tests off).
# Then builds the consumer (a shared library among its targets) and runs its
# two programs. WORK_DIR is emptied first and removed on success (kept with
# -DKEEP=ON or on failure).
cmake_minimum_required(VERSION 3.18)

foreach(var MODE SOURCE_DIR BUILD_DIR CONSUMER_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()
if(NOT CONFIG)
  set(CONFIG RelWithDebInfo)
endif()

string(TIMESTAMP started "%s")

# Runs a step; on failure prints its command and output and stops.
function(step name)
  string(TIMESTAMP t0 "%s")
  set(timeout_args)
  if(step_timeout)
    set(timeout_args TIMEOUT ${step_timeout})
  endif()
  execute_process(COMMAND ${ARGN}
    WORKING_DIRECTORY "${WORK_DIR}"
    ${timeout_args}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  string(TIMESTAMP t1 "%s")
  math(EXPR secs "${t1} - ${t0}")
  if(NOT rc STREQUAL "0")
    string(REPLACE ";" " " cmd "${ARGN}")
    message("---- ${name}: ${cmd}\n${out}")
    message(FATAL_ERROR "packaging test (${MODE}): step '${name}' failed "
                        "(${rc}) after ${secs} s; its folder: ${WORK_DIR}")
  endif()
  message(STATUS "${name}: ok (${secs} s)")
  string(STRIP "${out}" out)
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

set(configure_args
  -S "${CONSUMER_DIR}" -B "${WORK_DIR}/build"
  "-DCMAKE_BUILD_TYPE=${CONFIG}"
  "-DCONSUMER_MODE=${MODE}")
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(SANITIZERS)
  # The library's objects carry -fsanitize: so must the consumer's link.
  list(APPEND configure_args
    "-DCMAKE_CXX_FLAGS=-fsanitize=${SANITIZERS}"
    "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=${SANITIZERS}")
endif()

if(MODE STREQUAL "package")
  set(prefix "${WORK_DIR}/prefix")
  step(install "${CMAKE_COMMAND}" --install "${BUILD_DIR}"
       --prefix "${prefix}" --config "${CONFIG}")
  # What a consumer relies on must be in the prefix.
  file(GLOB_RECURSE package_dirs LIST_DIRECTORIES true
       "${prefix}/*/cmake/caf_collective")
  list(FILTER package_dirs INCLUDE REGEX "/cmake/caf_collective$")
  if(NOT package_dirs)
    message(FATAL_ERROR "packaging test: no <libdir>/cmake/caf_collective "
                        "under ${prefix}")
  endif()
  list(GET package_dirs 0 package_dir)
  foreach(file caf_collectiveConfig.cmake caf_collectiveConfigVersion.cmake
               caf_collectiveTargets.cmake FindCAF.cmake)
    if(NOT EXISTS "${package_dir}/${file}")
      message(FATAL_ERROR "packaging test: ${package_dir}/${file} missing")
    endif()
  endforeach()
  # No path of the build machine's dependencies in the exported targets: the
  # config finds NCCL and DLPack on the consumer's machine.
  file(READ "${package_dir}/caf_collectiveTargets.cmake" targets)
  string(FIND "${targets}" "libnccl" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "packaging test: the installed "
                        "caf_collectiveTargets.cmake links NCCL by its path "
                        "on this machine")
  endif()
  string(REGEX MATCHALL "INTERFACE_INCLUDE_DIRECTORIES \"[^\"]*\"" dirs
         "${targets}")
  foreach(entry IN LISTS dirs)
    if(entry MATCHES "(\"|;)/")
      message(FATAL_ERROR "packaging test: the installed "
                          "caf_collectiveTargets.cmake names an include "
                          "directory of this machine: ${entry}")
    endif()
  endforeach()
  foreach(header config.hpp all.hpp api.hpp object_store.hpp driver.hpp)
    if(NOT EXISTS "${prefix}/include/caf_collective/${header}")
      message(FATAL_ERROR "packaging test: header caf_collective/${header} "
                          "not installed under ${prefix}/include")
    endif()
  endforeach()
  # The launcher runs from the prefix (its RPATH finds a shared library).
  if(NOT EXISTS "${prefix}/bin/caf_collective_run")
    message(FATAL_ERROR "packaging test: ${prefix}/bin/caf_collective_run "
                        "not installed")
  endif()
  step(launcher "${prefix}/bin/caf_collective_run" -n 2 true)
  # Only public headers (<layer>/caf_collective/*.hpp) and the generated
  # config.hpp may be installed: never the private ones of collective/src.
  file(GLOB_RECURSE installed RELATIVE "${prefix}/include"
       "${prefix}/include/*")
  foreach(header IN LISTS installed)
    set(public OFF)
    foreach(layer collective object_store actors)
      if(EXISTS "${SOURCE_DIR}/${layer}/${header}")
        set(public ON)
      endif()
    endforeach()
    if(NOT public AND NOT header STREQUAL "caf_collective/config.hpp")
      message(FATAL_ERROR "packaging test: ${prefix}/include/${header} is "
                          "not a public header of any layer")
    endif()
  endforeach()
  list(APPEND configure_args
    "-DCMAKE_PREFIX_PATH=${prefix}"
    "-DCONSUMER_EXPECTED_PREFIX=${prefix}"
    # Only the fresh prefix may provide the package.
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
elseif(MODE STREQUAL "subdirectory")
  list(APPEND configure_args
    "-DCAF_COLLECTIVE_SOURCE_DIR=${SOURCE_DIR}"
    # With tests off (not top level) doctest must not even be looked for.
    -DCMAKE_DISABLE_FIND_PACKAGE_doctest=ON)
  if(DEFINED NCCL AND NOT NCCL STREQUAL "")
    list(APPEND configure_args "-DCAF_COLLECTIVE_NCCL=${NCCL}")
  endif()
  if(SANITIZERS)
    list(APPEND configure_args "-DCAF_COLLECTIVE_SANITIZERS=${SANITIZERS}")
  endif()
else()
  message(FATAL_ERROR "run_consumer.cmake: MODE must be package or "
                      "subdirectory, not '${MODE}'")
endif()

step(configure "${CMAKE_COMMAND}" ${configure_args})
step(build "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" --config "${CONFIG}"
     -j "${JOBS}")

foreach(program consumer_allreduce consumer_actors)
  set(exe "${WORK_DIR}/build/${program}")
  if(NOT EXISTS "${exe}" AND EXISTS "${WORK_DIR}/build/${CONFIG}/${program}")
    set(exe "${WORK_DIR}/build/${CONFIG}/${program}")
  endif()
  # Each program forms its own one-rank group: seconds, not minutes.
  set(step_timeout 120)
  step(${program} "${CMAKE_COMMAND}" -E env --unset=CAF_COLLECTIVE_STORE
       "${exe}")
  unset(step_timeout)
  message(STATUS "  ${step_output}")
endforeach()

string(TIMESTAMP finished "%s")
math(EXPR total "${finished} - ${started}")
message(STATUS "packaging test (${MODE}): passed in ${total} s")
if(NOT KEEP)
  file(REMOVE_RECURSE "${WORK_DIR}")
endif()
