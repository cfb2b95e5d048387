#include "nccl/nccl_rendezvous.hpp"

#include <algorithm>
#include <cstring>

namespace caf_collective::detail {

namespace {

// The value under the key: one tag byte, then the record ('K') or the
// creator's error text ('E'). A version byte guards against a peer built
// from another release reading the record differently.
constexpr char ok_tag = 'K';
constexpr char failed_tag = 'E';
constexpr char record_version = 1;

} // namespace

caf::error check_cuda_device(int ordinal, const error_context& where) {
  auto census = count_cuda_devices();
  if (census.count == 0)
    return make_error(errc::unsupported, where,
                      "backend nccl needs a CUDA device, but this process "
                      "sees none (cudaGetDeviceCount: " +
                        cuda_text(census.status) + ")");
  if (ordinal < 0 || ordinal >= census.count)
    return make_error(errc::invalid_argument, where,
                      "CUDA device " + std::to_string(ordinal) +
                        " requested, but this process sees " +
                        std::to_string(census.count) + " (0 to " +
                        std::to_string(census.count - 1) + ")");
  return {};
}

caf::expected<ncclUniqueId> make_nccl_id(const error_context& where) {
  ncclUniqueId id;
  if (auto res = ncclGetUniqueId(&id); res != ncclSuccess)
    return nccl_error(where, "ncclGetUniqueId", res, nullptr);
  return id;
}

caf::error publish_nccl_id(rendezvous_store& store, const std::string& key,
                           const nccl_id_record& record,
                           const error_context& where) {
  std::vector<char> value(2 + sizeof(record.id) + sizeof(int32_t));
  value[0] = ok_tag;
  value[1] = record_version;
  std::memcpy(value.data() + 2, &record.id, sizeof(record.id));
  std::memcpy(value.data() + 2 + sizeof(record.id), &record.devices_per_member,
              sizeof(int32_t));
  if (auto err = store.set(key, value))
    return make_error(errc::backend_error, where,
                      "publishing the NCCL unique id under '" + key +
                        "' failed: " + render(err));
  return {};
}

void publish_nccl_failure(rendezvous_store& store, const std::string& key,
                          const caf::error& why) {
  auto text = render(why);
  std::vector<char> value;
  value.reserve(1 + text.size());
  value.push_back(failed_tag);
  value.insert(value.end(), text.begin(), text.end());
  static_cast<void>(store.set(key, value));
}

caf::expected<nccl_id_record> fetch_nccl_id(rendezvous_store& store,
                                            const std::string& key,
                                            const error_context& where,
                                            steady_time deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(
    deadline - std::chrono::steady_clock::now());
  auto value = store.get(key, std::max(left, milliseconds{1}));
  if (!value) {
    auto code = code_of(value.error()) == errc::timeout ? errc::timeout
                                                        : errc::backend_error;
    return make_error(code, where,
                      "waiting for the NCCL unique id under '" + key +
                        "' (published by the communicator's rank 0) "
                        "failed: " +
                        render(value.error()));
  }
  auto& bytes = *value;
  if (!bytes.empty() && bytes[0] == failed_tag)
    return make_error(errc::aborted, where,
                      "rank 0 could not create the NCCL communicator: " +
                        std::string(bytes.begin() + 1, bytes.end()));
  nccl_id_record record;
  if (bytes.size() != 2 + sizeof(record.id) + sizeof(int32_t) ||
      bytes[0] != ok_tag || bytes[1] != record_version)
    return make_error(errc::mismatch, where,
                      "the value under '" + key +
                        "' is not an NCCL unique id of this release (" +
                        std::to_string(bytes.size()) + " bytes)");
  std::memcpy(&record.id, bytes.data() + 2, sizeof(record.id));
  std::memcpy(&record.devices_per_member, bytes.data() + 2 + sizeof(record.id),
              sizeof(int32_t));
  return record;
}

} // namespace caf_collective::detail
