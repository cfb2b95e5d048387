// An environment for tests of code that reads variables through an
// env_lookup (launch.hpp): a table instead of the process's environment.
#pragma once

#include <map>
#include <string>

#include <caf_collective/launch.hpp>

namespace env_table {

using vars = std::map<std::string, std::string>;

/// Looks names up in `table`, which must outlive the lookup.
inline caf_collective::env_lookup lookup(const vars& table) {
  return [&table](const char* name) -> const char* {
    auto i = table.find(name);
    return i == table.end() ? nullptr : i->second.c_str();
  };
}

} // namespace env_table
