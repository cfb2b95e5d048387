#include "caf_collective/object_store.hpp"

#include <map>
#include <vector>

#include "caf_collective/error.hpp"

namespace caf_collective {

namespace {

bool same_fingerprint(const object_ref& ref, const tensor& t) {
  return ref.type == t.type() && ref.shape == t.shape() && ref.dev == t.dev();
}

} // namespace

object_store::object_store(std::string node, size_t capacity_bytes)
  : node_(std::move(node)), capacity_(capacity_bytes) {
  // nop
}

object_store_ptr object_store::for_node(const std::string& node) {
  // Weak entries: the store lives exactly as long as its users, so a later
  // actor system that happens to get the same node name starts empty.
  static std::mutex mtx;
  static std::map<std::string, std::weak_ptr<object_store>> stores;
  std::lock_guard<std::mutex> guard{mtx};
  auto& entry = stores[node];
  if (auto ptr = entry.lock()) return ptr;
  auto ptr = std::make_shared<object_store>(node);
  entry = ptr;
  return ptr;
}

caf::expected<object_ref> object_store::put(tensor&& t) {
  return put(std::move(t), 0);
}

caf::expected<object_ref> object_store::put(tensor&& t, uint64_t owner) {
  if (t.data() == nullptr && t.numel() > 0)
    return make_error(errc::invalid_argument,
                      "object store on node " + node_ +
                        ": cannot store a tensor without memory");
  auto size = t.nbytes();
  std::lock_guard<std::mutex> guard{mtx_};
  auto in_use = bytes_in_use_->load();
  if (capacity_ > 0 && in_use + size > capacity_)
    return make_error(errc::out_of_memory,
                      "object store on node " + node_ + ": storing " +
                        std::to_string(size) + " bytes would exceed its " +
                        "capacity of " + std::to_string(capacity_) +
                        " bytes (" + std::to_string(in_use) + " in use by " +
                        std::to_string(objects_.size()) +
                        " objects and by released ones ops still read)");
  object_ref ref{node_, next_id_++, t.type(), t.shape(), t.dev()};
  // Counted until the last holder lets go, not until release(): a released
  // tensor an op still reads keeps its memory.
  bytes_in_use_->fetch_add(size);
  std::shared_ptr<tensor> held{new tensor(std::move(t)),
                               [in_use = bytes_in_use_, size](tensor* p) {
                                 delete p;
                                 in_use->fetch_sub(size);
                               }};
  objects_.emplace(ref.id, stored{std::move(held), owner});
  return ref;
}

size_t object_store::release_owned_by(uint64_t owner) {
  if (owner == 0) return 0; // 0 is "no owner": nothing to release
  std::vector<std::shared_ptr<tensor>> dropped; // freed outside the lock
  std::lock_guard<std::mutex> guard{mtx_};
  for (auto i = objects_.begin(); i != objects_.end();) {
    if (i->second.owner != owner) {
      ++i;
      continue;
    }
    dropped.push_back(std::move(i->second.t));
    i = objects_.erase(i);
  }
  return dropped.size();
}

caf::expected<pinned_tensor> object_store::lookup(const object_ref& ref) const {
  if (ref.node != node_)
    return make_error(errc::unknown_object,
                      to_string(ref) + " lives on another node than " + node_);
  auto i = objects_.find(ref.id);
  if (i == objects_.end())
    return make_error(errc::unknown_object,
                      "no object " + std::to_string(ref.id) + " on node " +
                        node_ + " (released or never stored)");
  const auto& t = *i->second.t;
  if (!same_fingerprint(ref, t)) {
    object_ref actual{node_, ref.id, t.type(), t.shape(), t.dev()};
    return make_error(errc::mismatch, "reference " + to_string(ref) +
                                        " disagrees with the stored " +
                                        to_string(actual));
  }
  return pinned_tensor{i->second.t};
}

caf::expected<tensor_view> object_store::get(const object_ref& ref) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto t = lookup(ref);
  if (!t) return std::move(t.error());
  return (*t)->view();
}

caf::expected<pinned_tensor> object_store::pin(const object_ref& ref) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return lookup(ref);
}

caf::error object_store::release(const object_ref& ref) {
  std::shared_ptr<tensor> dropped; // freed outside the lock
  std::lock_guard<std::mutex> guard{mtx_};
  auto t = lookup(ref);
  if (!t) return std::move(t.error());
  auto i = objects_.find(ref.id);
  dropped = std::move(i->second.t);
  objects_.erase(i);
  return {};
}

caf::error object_store::set_owner(const object_ref& ref, uint64_t owner) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto t = lookup(ref);
  if (!t) return std::move(t.error());
  objects_.find(ref.id)->second.owner = owner;
  return {};
}

bool object_store::contains(const object_ref& ref) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return static_cast<bool>(lookup(ref));
}

size_t object_store::bytes() const {
  return bytes_in_use_->load();
}

size_t object_store::objects() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return objects_.size();
}

size_t object_store::capacity() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return capacity_;
}

void object_store::set_capacity(size_t capacity_bytes) {
  std::lock_guard<std::mutex> guard{mtx_};
  capacity_ = capacity_bytes;
}

} // namespace caf_collective
