#include "backends/nccl/nccl_rendezvous.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

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
                                            steady_time deadline,
                                            const std::atomic<bool>* cancel) {
  auto failed = [&](errc code, const std::string& why) {
    return make_error(code, where,
                      "waiting for the NCCL unique id under '" + key +
                        "' (published by the communicator's rank 0) " + why);
  };
  caf::expected<std::vector<char>> value{std::vector<char>{}};
  for (;;) {
    if (cancel != nullptr && cancel->load())
      return failed(errc::aborted, "was cancelled: the backend is aborted");
    auto left = std::chrono::duration_cast<milliseconds>(
      deadline - std::chrono::steady_clock::now());
    if (left <= milliseconds{0})
      return failed(errc::timeout, "failed: nothing arrived within the "
                                   "formation deadline");
    // A short question each round: a store cannot be interrupted, so the
    // slice bounds how late an abort is seen.
    value = store.get(key, std::clamp(left, milliseconds{1}, fetch_slice));
    if (value) break;
    if (code_of(value.error()) != errc::timeout)
      return failed(errc::backend_error, "failed: " + render(value.error()));
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
