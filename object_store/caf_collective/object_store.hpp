// The object store: one thread-safe tensor store per node (actor system),
// so collectives run on small handles instead of raw buffers.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "caf_collective/object_ref.hpp"
#include "caf_collective/tensor.hpp"

namespace caf_collective {

class object_store;
using object_store_ptr = std::shared_ptr<object_store>;

/// A stored tensor kept alive for as long as someone uses it: `release`
/// drops the store's reference, but an operation that pinned the tensor
/// keeps its memory until it completes.
using pinned_tensor = std::shared_ptr<const tensor>;

/// Tensors of one node, by id. All members are safe to call from any
/// thread (actors, lanes, plain threads). Device (CUDA) tensors are kept by
/// their device pointer: `put` moves the tensor in, it never copies data.
class object_store {
 public:
  /// `capacity_bytes`: the most bytes the store may hold; 0 = unlimited.
  explicit object_store(std::string node, size_t capacity_bytes = 0);

  object_store(const object_store&) = delete;
  object_store& operator=(const object_store&) = delete;

  /// The store of `node` in this process: created on first use, shared by
  /// every user of the same node name and dropped with its last user.
  static object_store_ptr for_node(const std::string& node);

  const std::string& node() const noexcept { return node_; }

  /// Takes ownership of `t`. Fails with out_of_memory (naming the request,
  /// the bytes in use and the capacity) if the bytes in use (see bytes())
  /// would exceed the capacity; `t` is then left untouched.
  caf::expected<object_ref> put(tensor&& t);

  /// Like put, recording `owner` (e.g. an actor's id, never 0):
  /// release_owned_by(owner) drops what the owner still holds.
  caf::expected<object_ref> put(tensor&& t, uint64_t owner);

  /// Drops every object put with `owner` and not released yet; returns how
  /// many. The actor layer calls it when an owning actor terminates.
  size_t release_owned_by(uint64_t owner);

  /// A view of the stored tensor. Fails with unknown_object if `ref` names
  /// no object here (another node, released, never stored) and with
  /// mismatch if its dtype/shape/device disagree with the stored tensor.
  caf::expected<tensor_view> get(const object_ref& ref) const;

  /// Like `get`, but shares ownership: the memory stays valid even if the
  /// object is released meanwhile.
  caf::expected<pinned_tensor> pin(const object_ref& ref) const;

  /// Drops the object; unknown_object if there is none.
  caf::error release(const object_ref& ref);

  /// Records `owner` for the object instead of its owner so far (0: none):
  /// from now on release_owned_by(owner) drops it, and its previous
  /// owner's does not. unknown_object (or mismatch) as for `get`.
  caf::error set_owner(const object_ref& ref, uint64_t owner);

  bool contains(const object_ref& ref) const;

  /// Bytes in use: the stored tensors' and those of released tensors that
  /// are still pinned (an op reading them), which stay in memory until
  /// their last pin is dropped.
  size_t bytes() const;

  /// Number of stored objects.
  size_t objects() const;

  size_t capacity() const;

  /// Changes the capacity (0 = unlimited); never evicts anything.
  void set_capacity(size_t capacity_bytes);

 private:
  caf::expected<pinned_tensor> lookup(const object_ref& ref) const;

  const std::string node_;
  mutable std::mutex mtx_;
  size_t capacity_;
  // Shared with every stored tensor's deleter, which gives its bytes back
  // when the last holder (the store or a pin) lets go.
  std::shared_ptr<std::atomic<size_t>> bytes_in_use_ =
    std::make_shared<std::atomic<size_t>>(0);
  uint64_t next_id_ = 1;
  struct stored {
    std::shared_ptr<tensor> t;
    uint64_t owner = 0; // 0: nobody's (released only by release())
  };
  std::unordered_map<uint64_t, stored> objects_;
};

} // namespace caf_collective
