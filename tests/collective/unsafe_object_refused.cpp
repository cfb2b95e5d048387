// Must not compile: object collectives refuse a type marked
// CAF_ALLOW_UNSAFE_MESSAGE_TYPE, which CAF 0.17 serializes as nothing (it
// would arrive default-constructed on every other rank, with no error).
// tests/collective/CMakeLists.txt builds it and expects the static_assert.
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>

#include <caf_collective/object_collectives.hpp>

namespace unsafe_test {

struct local_only {
  int value = 0;
  std::string text;
};

} // namespace unsafe_test

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(unsafe_test::local_only)

void broadcast_local_only(unsafe_test::local_only& x) {
  caf_collective::broadcast_object(x, 0, "g");
}
