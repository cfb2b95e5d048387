// Turning objects into bytes and back for the object collectives: CAF 0.17's
// binary format, with the failures a collective must report on every rank
// (an unregistered type, bytes that do not read as the expected type) turned
// into errors instead of crashes, prints or huge allocations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/message.hpp>
#include <caf/serializer.hpp>

#include "caf_collective/error.hpp"

namespace caf_collective::detail {

/// A readable name of `type` (demangled), for errors.
std::string readable_type_name(const std::type_info& type);

template<class T>
std::string type_name_of() {
  return readable_type_name(typeid(T));
}

/// The execution context CAF's (de)serializers need: the system's dummy
/// unit, or null for types that never consult the type registry.
caf::execution_unit* serialization_context(caf::actor_system* sys) noexcept;

/// Fails with invalid_argument naming the first element of `msg` whose type
/// is not registered with `sys` (CAF 0.17 would print to stderr and write
/// nothing instead of failing).
caf::error check_registered(caf::actor_system& sys, const caf::message& msg);

/// A CAF (de)serializer that hands every call to an `Inner` one (CAF's
/// binary classes are final, so they are wrapped, not derived from); the
/// bounded variants below override the calls they check.
template<class Base, class Inner>
class forwarding_processor : public Base {
 public:
  template<class... Ts>
  explicit forwarding_processor(caf::execution_unit* ctx, Ts&&... xs)
    : Base(ctx), inner_(ctx, std::forward<Ts>(xs)...) {
    // nop
  }

  caf::error begin_object(uint16_t& type_nr, std::string& name) override {
    return inner_.begin_object(type_nr, name);
  }
  caf::error end_object() override { return inner_.end_object(); }
  caf::error begin_sequence(size_t& size) override {
    return inner_.begin_sequence(size);
  }
  caf::error end_sequence() override { return inner_.end_sequence(); }
  caf::error apply_raw(size_t num_bytes, void* data) override {
    return inner_.apply_raw(num_bytes, data);
  }

 protected:
  caf::error apply_impl(int8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint8_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint16_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint32_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(int64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(uint64_t& x) override { return inner_.apply(x); }
  caf::error apply_impl(float& x) override { return inner_.apply(x); }
  caf::error apply_impl(double& x) override { return inner_.apply(x); }
  caf::error apply_impl(long double& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u16string& x) override { return inner_.apply(x); }
  caf::error apply_impl(std::u32string& x) override { return inner_.apply(x); }

  Inner inner_;
};

/// CAF's binary deserializer with one more check: the sequences of an
/// object may not claim far more elements than it has bytes, each on its
/// own nor all together. CAF resizes containers to the claimed size before
/// reading them, so a corrupted length would otherwise allocate and zero up
/// to 4 GiB before failing, and nested sequences (a vector of vector<bool>,
/// a few bytes each claiming thousands of bits) multiplied that.
class bounded_deserializer final
  : public forwarding_processor<caf::deserializer, caf::binary_deserializer> {
 public:
  bounded_deserializer(caf::execution_unit* ctx, const char* data, size_t size);

  size_t remaining() const noexcept { return inner_.remaining(); }

  caf::error begin_sequence(size_t& size) override;

 private:
  size_t claimable_; // elements all sequences together may still claim
};

/// Every encoded object starts with this many bytes naming the process and
/// actor system that wrote it (writer_token), so that a reader knows
/// whether actor handles in it can be its own.
inline constexpr size_t writer_token_size = sizeof(uint64_t);

/// Names this process and `sys` (null: none) among the writers of objects:
/// random per program run, mixed with the pid (a forked child differs from
/// its parent) and the system's address (two systems of one process name
/// their actors alike).
uint64_t writer_token(const caf::actor_system* sys) noexcept;

/// Whether CAF failed to read for want of a context (an actor handle
/// needs the reader's registry or a proxy).
bool needs_context(const caf::error& failure);

/// The error for an object of type `type` written by another process or
/// actor system that holds an actor handle.
caf::error foreign_handle_error(const std::string& type);

/// Fails when a caf::message read from another process holds an actor
/// handle at its top level: without a middleman every process names its
/// actors alike, so the handle would denote an unrelated actor here.
caf::error check_no_foreign_handles(const caf::message& msg);

/// CAF's binary serializer with one more check: CAF 0.17 writes a
/// sequence's length in 32 bits, so a string or container of 2^32 elements
/// or more would be written with a wrapped length and read back as another
/// object (or as garbage). Such a sequence fails to serialize instead.
class bounded_serializer final
  : public forwarding_processor<caf::serializer, caf::binary_serializer> {
 public:
  bounded_serializer(caf::execution_unit* ctx, std::vector<char>& bytes);

  caf::error begin_sequence(size_t& size) override;

 protected:
  using forwarding_processor::apply_impl;
  // Strings are written by the inner serializer, which never consults this
  // one's begin_sequence: their lengths are checked here.
  caf::error apply_impl(std::string& x) override;
  caf::error apply_impl(std::u16string& x) override;
  caf::error apply_impl(std::u32string& x) override;
};

/// Renders a failure of CAF's (de)serializer together with the type.
std::string describe_codec_failure(const char* what, const std::string& type,
                                   const caf::error& err);

/// One rank's object as bytes, or why it could not be serialized.
struct encoded_object {
  std::vector<char> bytes;
  caf::error failure;
};

/// Serializes `x`; `sys` is required for caf::message (its type registry)
/// and for actor handles, optional otherwise.
// CAF 0.17's serializers skip a value whose type is an allowed unsafe
// message type: such an object would arrive default-constructed, with no
// error anywhere. (A member of such a type inside another type is skipped
// the same way and cannot be seen here: see docs/api.md.)
template<class T>
inline constexpr bool encodable_object =
  !caf::allowed_unsafe_message_type<T>::value;

template<class T>
encoded_object encode_object(const T& x, caf::actor_system* sys) {
  static_assert(encodable_object<T>,
                "T is marked CAF_ALLOW_UNSAFE_MESSAGE_TYPE: CAF serializes "
                "it as nothing, so object collectives cannot move it");
  encoded_object out;
  auto name = type_name_of<T>();
  if constexpr (std::is_same_v<T, caf::message>) {
    if (sys == nullptr) {
      out.failure = make_error(errc::invalid_argument,
                               "a caf::message needs object_options::system "
                               "(the actor system whose registry knows its "
                               "types)");
      return out;
    }
    if (auto err = check_registered(*sys, x)) {
      out.failure = std::move(err);
      return out;
    }
  }
  try {
    bounded_serializer sink{serialization_context(sys), out.bytes};
    auto writer = writer_token(sys);
    // CAF 0.17's inspectors take non-const references even when saving.
    if (auto err = sink(writer, const_cast<T&>(x))) {
      out.failure = make_error(errc::invalid_argument,
                               describe_codec_failure("serialize", name, err));
      out.bytes.clear();
    }
  } catch (const std::bad_alloc&) {
    out.bytes = {}; // gives the memory back
    out.failure = make_error(errc::out_of_memory,
                             "cannot serialize " + name + ": out of memory");
  } catch (const std::exception& e) {
    out.failure = make_error(errc::invalid_argument,
                             "cannot serialize " + name + ": " + e.what());
    out.bytes.clear();
  } catch (...) {
    // Whatever a user's inspect throws: the failure reaches every rank.
    out.failure = make_error(errc::invalid_argument,
                             "cannot serialize " + name +
                               ": it threw an exception of unknown type");
    out.bytes.clear();
  }
  return out;
}

/// Reads a `T` from exactly `size` bytes into `out` (left unchanged on
/// failure). Fails with mismatch when the bytes do not read as a `T` or
/// leave bytes over, with out_of_memory when the `T` does not fit.
template<class T>
caf::error decode_object(const char* data, size_t size, T& out,
                         caf::actor_system* sys) {
  static_assert(encodable_object<T>,
                "T is marked CAF_ALLOW_UNSAFE_MESSAGE_TYPE: CAF serializes "
                "it as nothing, so object collectives cannot move it");
  auto name = type_name_of<T>();
  if constexpr (std::is_same_v<T, caf::message>) {
    if (sys == nullptr)
      return make_error(errc::invalid_argument,
                        "a caf::message needs object_options::system "
                        "(the actor system whose registry knows its types)");
  }
  if (size < writer_token_size)
    return make_error(errc::mismatch, "cannot deserialize " + name + ": " +
                                        std::to_string(size) +
                                        " bytes are too few for an object");
  try {
    uint64_t writer = 0;
    bounded_deserializer{nullptr, data, writer_token_size}(writer);
    // Reads a T with `ctx`: CAF's failure, or the bytes left over.
    T tmp{};
    bool wanted_context = false; // the last read failed for want of one
    auto read_with = [&](caf::execution_unit* ctx) -> caf::error {
      tmp = T{};
      bounded_deserializer source{ctx, data + writer_token_size,
                                  size - writer_token_size};
      auto err = source(tmp);
      wanted_context = needs_context(err);
      if (err)
        return make_error(errc::mismatch,
                          describe_codec_failure("deserialize", name, err) +
                            " (" + std::to_string(size) + " bytes)");
      if (source.remaining() != 0)
        return make_error(errc::mismatch, "cannot deserialize " + name + ": " +
                                            std::to_string(source.remaining()) +
                                            " of " + std::to_string(size) +
                                            " bytes left over");
      return {};
    };
    // Actor handles from another process or actor system: CAF reads one
    // as the reader's own actor with the same number when neither system
    // has a middleman (the wrong actor, silently). So such objects are
    // read without a context first, where a handle fails; a caf::message
    // needs the context for its types and is checked after reading.
    bool foreign = writer != writer_token(sys);
    caf::error failed;
    if (!foreign || std::is_same_v<T, caf::message>) {
      failed = read_with(serialization_context(sys));
    } else if (auto bare = read_with(nullptr)) {
      if (wanted_context)
        failed = foreign_handle_error(name);
      else if (sys == nullptr)
        failed = std::move(bare);
      else // a caf::message inside reads nothing without a context: read
           // again with it (handles inside that message are not seen)
        failed = read_with(serialization_context(sys));
    }
    if (failed) return failed;
    if constexpr (std::is_same_v<T, caf::message>) {
      if (foreign)
        if (auto err = check_no_foreign_handles(tmp)) return err;
    }
    out = std::move(tmp);
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory,
                      "cannot deserialize " + name + ": out of memory (" +
                        std::to_string(size) + " bytes received)");
  } catch (const std::exception& e) {
    return make_error(errc::mismatch,
                      "cannot deserialize " + name + ": " + e.what());
  } catch (...) {
    return make_error(errc::mismatch,
                      "cannot deserialize " + name +
                        ": it threw an exception of unknown type");
  }
  return {};
}

} // namespace caf_collective::detail
