// Objects on the driver path: any type with an inspect overload, stored in
// a node's object store as its serialized bytes (a uint8 tensor), so the
// driver can move it like any tensor ref. Sizes may differ per rank.
//
//   refs[r] = put_object(*store_of_rank_r, config_r).value();
//   auto res = allgather_objects(self, driver, "g", refs);   // driver op
//   auto all = read_objects<config>(*store, res->refs[r], sizes_of(refs));
//
// Unlike the object collectives of members and of the imperative API
// (object_collectives.hpp), reading happens after the op, on each reader's
// node: bytes that do not read as T fail that read (mismatch naming the
// rank whose bytes they were), not the op on every rank.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <caf/expected.hpp>

#include "caf_collective/client_ops.hpp"
#include "caf_collective/error.hpp"
#include "caf_collective/object_codec.hpp"
#include "caf_collective/object_store.hpp"

namespace caf_collective {

/// Stores `obj`'s bytes in `store` (owned by `owner` if not 0). Fails with
/// the codec's error (e.g. a type the system does not know) naming T.
template<class T>
caf::expected<object_ref> put_object(object_store& store, const T& obj,
                                     caf::actor_system* sys = nullptr,
                                     uint64_t owner = 0) {
  auto encoded = detail::encode_object(obj, sys);
  if (encoded.failure) return std::move(encoded.failure);
  // The store keeps the encoded buffer itself: no copy.
  auto keep = std::make_shared<std::vector<char>>(std::move(encoded.bytes));
  tensor_view view{keep->data(), dtype::uint8, keep->size()};
  return store.put(tensor::adopt(view, std::move(keep)), owner);
}

/// The object a put_object ref (or a received copy of one) holds.
/// The object stays pinned while it is decoded: releasing it meanwhile
/// frees its bytes only once the read is done.
template<class T>
caf::expected<T> read_object(const object_store& store, const object_ref& ref,
                             caf::actor_system* sys = nullptr) {
  // Pinned, not viewed: a release (or release_owned_by when the owner
  // ends) must not free or recycle the bytes under the decoder.
  auto pinned = store.pin(ref);
  if (!pinned) return std::move(pinned.error());
  const tensor_view& view = (*pinned)->view();
  if (view.type() != dtype::uint8 || !view.dev().is_cpu())
    return make_error(errc::mismatch, "object " + std::to_string(ref.id) +
                                        " holds no object bytes (uint8, host)");
  T result{};
  if (auto err = detail::decode_object(static_cast<const char*>(view.data()),
                                       view.nbytes(), result, sys))
    return err;
  return result;
}

/// The byte size of each rank's object, from the refs put_object gave.
inline std::vector<uint64_t> sizes_of(const std::vector<object_ref>& refs) {
  std::vector<uint64_t> result;
  for (auto& ref : refs)
    result.push_back(ref.numel());
  return result;
}

/// Splits the result of allgather_objects, `sizes[r]` bytes per rank, into
/// the objects. Fails with mismatch naming the first rank whose bytes do
/// not read as T, or with invalid_argument when the sizes do not add up to
/// the object's bytes (each is checked against the bytes left, so sizes
/// whose sum wraps around fail too). The object stays pinned while it is
/// read, as for read_object.
template<class T>
caf::expected<std::vector<T>> read_objects(const object_store& store,
                                           const object_ref& ref,
                                           const std::vector<uint64_t>& sizes,
                                           caf::actor_system* sys = nullptr) {
  auto pinned = store.pin(ref);
  if (!pinned) return std::move(pinned.error());
  const tensor_view& view = (*pinned)->view();
  auto object = "object " + std::to_string(ref.id);
  if (view.type() != dtype::uint8 || !view.dev().is_cpu())
    return make_error(errc::invalid_argument,
                      object + " holds no object bytes (uint8, host)");
  // Sizes come from messages: never add them up unchecked.
  uint64_t left = view.nbytes();
  for (size_t r = 0; r < sizes.size(); ++r) {
    if (sizes[r] > left)
      return make_error(errc::invalid_argument,
                        object + " holds " + std::to_string(view.nbytes()) +
                          " bytes, fewer than the sizes say: rank " +
                          std::to_string(r) + "'s " + std::to_string(sizes[r]) +
                          " bytes exceed the " + std::to_string(left) +
                          " left after the ranks before it");
    left -= sizes[r];
  }
  if (left != 0)
    return make_error(errc::invalid_argument,
                      object + " holds " + std::to_string(view.nbytes()) +
                        " bytes, the sizes add up to " +
                        std::to_string(view.nbytes() - left));
  std::vector<T> result;
  result.reserve(sizes.size());
  auto* at = static_cast<const char*>(view.data());
  for (size_t r = 0; r < sizes.size(); ++r) {
    // Decoded into a T of its own: std::vector<bool> has no bool& to give.
    T x{};
    if (auto err = detail::decode_object(at, sizes[r], x, sys))
      return make_error(errc::mismatch, "the object of rank " +
                                          std::to_string(r) +
                                          " does not read: " + render(err));
    result.push_back(std::move(x));
    at += sizes[r];
  }
  return result;
}

/// Driver op: every rank's object (refs[r], from put_object) reaches every
/// rank, back to back in rank order (an allgatherv of the bytes); read
/// each result with read_objects(store, result.refs[r], sizes_of(refs)).
template<class Client>
auto allgather_objects(Client&& self, const driver_api& driver,
                       std::string group, std::vector<object_ref> refs,
                       const op_options& opts = {}) {
  allgatherv_options o;
  o.timeout = opts.timeout;
  auto sizes = sizes_of(refs);
  o.counts.assign(sizes.begin(), sizes.end());
  return allgatherv(self, driver, std::move(group), std::move(refs), o);
}

} // namespace caf_collective
