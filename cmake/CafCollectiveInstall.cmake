# Install rules and the CMake package caf_collective (included by the
# top-level CMakeLists.txt after the layers are defined).
#
#   cmake --install <build> --prefix <prefix>
#
# installs the public headers of every layer (plus the generated
# caf_collective/config.hpp), the libraries and
# <libdir>/cmake/caf_collective/: caf_collectiveConfig.cmake,
# caf_collectiveConfigVersion.cmake, caf_collectiveTargets*.cmake and the
# project's FindCAF.cmake (Debian's CAF ships no CMake package). A consumer
# then writes find_package(caf_collective 0.1 CONFIG REQUIRED) and links
# caf_collective::collective, ::object_store or ::actors.
#
# The build tree is a package too: -Dcaf_collective_DIR=<build>/cmake/caf_collective.
#
# Never exported: collective/src (private headers) and the NCCL object
# library (its objects are part of the collective library).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(CAF_COLLECTIVE_CMAKE_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/caf_collective"
    CACHE STRING "Where to install the CMake package, relative to the prefix")
mark_as_advanced(CAF_COLLECTIVE_CMAKE_DIR)

set(caf_collective_export_targets caf_collective_collective)
set(caf_collective_components collective)
foreach(layer object_store actors)
  if(TARGET caf_collective_${layer})
    list(APPEND caf_collective_export_targets caf_collective_${layer})
    list(APPEND caf_collective_components ${layer})
  endif()
endforeach()
if(CAF_COLLECTIVE_HAVE_NCCL)
  list(APPEND caf_collective_components nccl)
endif()

foreach(target IN LISTS caf_collective_export_targets)
  string(REGEX REPLACE "^caf_collective_" "" export_name "${target}")
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

# A static collective library carries its private dependencies (Gloo,
# spdlog, CUDA runtime, NCCL) as link-only requirements: the package config
# must find them for the consumer's link.
get_target_property(caf_collective_library_type caf_collective_collective TYPE)
if(caf_collective_library_type STREQUAL "STATIC_LIBRARY")
  set(CAF_COLLECTIVE_PACKAGE_STATIC 1)
else()
  set(CAF_COLLECTIVE_PACKAGE_STATIC 0)
endif()
if(CUDAToolkit_ROOT)
  set(CAF_COLLECTIVE_PACKAGE_CUDA_ROOT "${CUDAToolkit_ROOT}")
else()
  set(CAF_COLLECTIVE_PACKAGE_CUDA_ROOT "")
endif()

install(TARGETS ${caf_collective_export_targets}
  EXPORT caf_collectiveTargets
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}"
  INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")

# The launcher: <prefix>/bin/caf_collective_run (tools/CMakeLists.txt).
if(TARGET caf_collective_run)
  install(TARGETS caf_collective_run
    RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
endif()

# Public headers: <layer>/caf_collective/*.hpp of each layer built.
foreach(layer IN ITEMS collective object_store actors)
  if(layer STREQUAL "collective" OR TARGET caf_collective_${layer})
    install(DIRECTORY "${PROJECT_SOURCE_DIR}/${layer}/caf_collective/"
      DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/caf_collective"
      FILES_MATCHING PATTERN "*.hpp")
  endif()
endforeach()
install(FILES "${PROJECT_BINARY_DIR}/collective/caf_collective/config.hpp"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/caf_collective")

install(EXPORT caf_collectiveTargets
  NAMESPACE caf_collective::
  DESTINATION "${CAF_COLLECTIVE_CMAKE_DIR}")

configure_package_config_file(
  "${CMAKE_CURRENT_LIST_DIR}/caf_collectiveConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/cmake/caf_collective/caf_collectiveConfig.cmake"
  INSTALL_DESTINATION "${CAF_COLLECTIVE_CMAKE_DIR}"
  NO_SET_AND_CHECK_MACRO)
# 0.x: only the same minor version is compatible.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/cmake/caf_collective/caf_collectiveConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}"
  COMPATIBILITY SameMinorVersion)
configure_file("${CMAKE_CURRENT_LIST_DIR}/FindCAF.cmake"
  "${PROJECT_BINARY_DIR}/cmake/caf_collective/FindCAF.cmake" COPYONLY)
install(FILES
  "${PROJECT_BINARY_DIR}/cmake/caf_collective/caf_collectiveConfig.cmake"
  "${PROJECT_BINARY_DIR}/cmake/caf_collective/caf_collectiveConfigVersion.cmake"
  "${CMAKE_CURRENT_LIST_DIR}/FindCAF.cmake"
  DESTINATION "${CAF_COLLECTIVE_CMAKE_DIR}")

# The same package for the build tree.
export(EXPORT caf_collectiveTargets
  NAMESPACE caf_collective::
  FILE "${PROJECT_BINARY_DIR}/cmake/caf_collective/caf_collectiveTargets.cmake")
