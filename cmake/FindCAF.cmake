# Finds the C++ Actor Framework (CAF 0.17) as Debian's libcaf-dev ships it:
# headers and libraries only, no CMake package and no pkg-config file.
#
# Imported targets: CAF::core, CAF::io (io links core).
# Result variables: CAF_FOUND, CAF_VERSION, CAF_INCLUDE_DIR.

find_path(CAF_INCLUDE_DIR caf/all.hpp)
find_library(CAF_CORE_LIBRARY caf_core)
find_library(CAF_IO_LIBRARY caf_io)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  if(caf_version_line)
    string(REGEX REPLACE ".*CAF_VERSION ([0-9]+).*" "\\1" caf_version_number
                         "${caf_version_line}")
    math(EXPR caf_major "${caf_version_number} / 10000")
    math(EXPR caf_minor "(${caf_version_number} / 100) % 100")
    math(EXPR caf_patch "${caf_version_number} % 100")
    set(CAF_VERSION "${caf_major}.${caf_minor}.${caf_patch}")
  endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(
  CAF REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  find_package(Threads REQUIRED)
  if(NOT TARGET CAF::core)
    add_library(CAF::core UNKNOWN IMPORTED)
    set_target_properties(
      CAF::core PROPERTIES IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
                           INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
    target_link_libraries(CAF::core INTERFACE Threads::Threads)
  endif()
  if(NOT TARGET CAF::io)
    add_library(CAF::io UNKNOWN IMPORTED)
    set_target_properties(
      CAF::io PROPERTIES IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
                         INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
    target_link_libraries(CAF::io INTERFACE CAF::core)
  endif()
endif()

mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY)
