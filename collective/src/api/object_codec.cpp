// The object codec's non-template parts: type names, the registry check for
// caf::message, and the bounded serializer and deserializer.
#include "caf_collective/object_codec.hpp"

#include <cstdint>
#include <cstdlib>
#include <cxxabi.h>
#include <limits>
#include <memory>
#include <random>
#include <unistd.h>

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_system.hpp>
#include <caf/sec.hpp>
#include <caf/uniform_type_info_map.hpp>

namespace caf_collective::detail {

namespace {

// A sequence may claim this many elements beyond what the bytes that
// remain can hold: elements can take zero bytes (empty structs), but not
// millions of them.
constexpr size_t sequence_slack = 1 << 16;
// The same for all sequences of an object together.
constexpr size_t object_slack = 1 << 20;
// The most elements one byte holds: CAF packs std::vector<bool> eight to a
// byte, after a length that counts bits.
constexpr size_t elements_per_byte = 8;
// The same for all sequences of an object together: a vector<bool> claims
// its bits, then its bytes again as a vector of uint8_t.
constexpr size_t object_elements_per_byte = elements_per_byte + 1;

// Never registered anywhere: CAF's answer for its name is the name CAF
// gives every unregistered type.
struct never_registered {};

} // namespace

std::string readable_type_name(const std::type_info& type) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name{
    abi::__cxa_demangle(type.name(), nullptr, nullptr, &status), std::free};
  return status == 0 && name ? std::string{name.get()}
                             : std::string{type.name()};
}

caf::execution_unit* serialization_context(caf::actor_system* sys) noexcept {
  return sys != nullptr ? sys->dummy_execution_unit() : nullptr;
}

caf::error check_registered(caf::actor_system& sys, const caf::message& msg) {
  auto& types = sys.types();
  const auto& unknown = types.portable_name(0, &typeid(never_registered));
  for (size_t i = 0; i < msg.size(); ++i) {
    auto rtti = msg.type(i);
    if (rtti.first != 0) continue; // a builtin type number
    if (rtti.second == nullptr || types.portable_name(rtti) == unknown)
      return make_error(errc::invalid_argument,
                        "cannot serialize caf::message: element " +
                          std::to_string(i) + " has type " +
                          (rtti.second ? readable_type_name(*rtti.second)
                                       : std::string{"<unknown>"}) +
                          ", which is not registered with the actor system "
                          "(add_message_type<T>(\"name\") in its config)");
  }
  return {};
}

std::string describe_codec_failure(const char* what, const std::string& type,
                                   const caf::error& err) {
  std::string result = "cannot ";
  result += what;
  result += ' ';
  result += type;
  result += ": ";
  result += render(err);
  return result;
}

bounded_deserializer::bounded_deserializer(caf::execution_unit* ctx,
                                           const char* data, size_t size)
  : forwarding_processor(ctx, data, size),
    claimable_(object_elements_per_byte * size + object_slack) {
  // nop
}

caf::error bounded_deserializer::begin_sequence(size_t& size) {
  if (auto err = inner_.begin_sequence(size)) return err;
  if (size > elements_per_byte * inner_.remaining() + sequence_slack)
    return make_error(errc::mismatch,
                      "a sequence claims " + std::to_string(size) +
                        " elements but only " +
                        std::to_string(inner_.remaining()) + " bytes remain");
  if (size > claimable_)
    return make_error(errc::mismatch,
                      "the sequences of the object claim more elements "
                      "together than its bytes can hold (a sequence of " +
                        std::to_string(size) + " with " +
                        std::to_string(inner_.remaining()) + " bytes left)");
  claimable_ -= size;
  return {};
}

uint64_t writer_token(const caf::actor_system* sys) noexcept {
  static const uint64_t per_run = [] {
    std::random_device source;
    return (uint64_t{source()} << 32) ^ source();
  }();
  // getpid() per call: a child forked after the first call has a pid of
  // its own, and the same random part.
  auto pid = static_cast<uint64_t>(::getpid());
  auto system = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(sys));
  return per_run ^ (pid * 0x9e3779b97f4a7c15ULL) ^
         (system * 0xc2b2ae3d27d4eb4fULL);
}

bool needs_context(const caf::error& failure) {
  return failure == caf::sec::no_context ||
         failure == caf::sec::no_proxy_registry;
}

caf::error foreign_handle_error(const std::string& type) {
  return make_error(errc::mismatch,
                    "cannot deserialize " + type +
                      ": it was written by another process or actor system "
                      "and holds an actor handle, which object collectives "
                      "move only between ranks of one actor system");
}

caf::error check_no_foreign_handles(const caf::message& msg) {
  for (size_t i = 0; i < msg.size(); ++i)
    if (msg.match_element<caf::actor>(i) ||
        msg.match_element<caf::actor_addr>(i) ||
        msg.match_element<caf::strong_actor_ptr>(i))
      return make_error(errc::mismatch,
                        "cannot deserialize caf::message: it was written by "
                        "another process or actor system and element " +
                          std::to_string(i) +
                          " is an actor handle, which object collectives "
                          "move only between ranks of one actor system");
  return {};
}

// -- bounded_serializer -------------------------------------------------------

namespace {

// The longest sequence CAF 0.17's binary format can describe.
constexpr size_t longest_sequence = std::numeric_limits<uint32_t>::max();

caf::error check_sequence_length(size_t size) {
  if (size <= longest_sequence) return {};
  return make_error(errc::invalid_argument,
                    "a sequence of " + std::to_string(size) +
                      " elements is longer than CAF 0.17's binary format "
                      "can describe (at most " +
                      std::to_string(longest_sequence) + "); split the object");
}

} // namespace

bounded_serializer::bounded_serializer(caf::execution_unit* ctx,
                                       std::vector<char>& bytes)
  : forwarding_processor(ctx, bytes) {
  // nop
}

caf::error bounded_serializer::begin_sequence(size_t& size) {
  if (auto err = check_sequence_length(size)) return err;
  return inner_.begin_sequence(size);
}

caf::error bounded_serializer::apply_impl(std::string& x) {
  if (auto err = check_sequence_length(x.size())) return err;
  return inner_.apply(x);
}

caf::error bounded_serializer::apply_impl(std::u16string& x) {
  if (auto err = check_sequence_length(x.size())) return err;
  return inner_.apply(x);
}

caf::error bounded_serializer::apply_impl(std::u32string& x) {
  if (auto err = check_sequence_length(x.size())) return err;
  return inner_.apply(x);
}

} // namespace caf_collective::detail
