#include "backends/nccl/nccl_issue.hpp"

#include <mutex>
#include <string>

namespace caf_collective::detail {

namespace {

std::mutex& issue_mutex() noexcept {
  static std::mutex instance;
  return instance;
}

thread_local bool issuing = false;

/// Marks the thread as issuing for its scope, also when the body throws.
class issuing_scope {
 public:
  issuing_scope() noexcept { issuing = true; }
  ~issuing_scope() { issuing = false; }
  issuing_scope(const issuing_scope&) = delete;
  issuing_scope& operator=(const issuing_scope&) = delete;
};

} // namespace

issue_outcome issue_group(const error_context& where, std::string_view what,
                          ncclComm_t blame, issue_body body) {
  issue_outcome result;
  ncclResult_t start = ncclSuccess;
  ncclResult_t end = ncclSuccess;
  {
    std::lock_guard<std::mutex> guard{issue_mutex()};
    issuing_scope scope;
    start = ncclGroupStart();
    if (start == ncclSuccess) {
      try {
        result.err = body();
      } catch (...) {
        // Closed even then: an open group would swallow this thread's
        // next calls.
        static_cast<void>(ncclGroupEnd());
        throw;
      }
      end = ncclGroupEnd();
    }
  }
  // From here on the mutex is free: the caller may fail and abort.
  if (start != ncclSuccess) {
    result.err = nccl_error(where, "ncclGroupStart", start, nullptr);
  } else if (!result.err) {
    if (end == ncclInProgress)
      result.pending = true;
    else if (end != ncclSuccess)
      result.err = nccl_error(where, "ncclGroupEnd (" + std::string{what} + ")",
                              end, blame);
  }
  return result;
}

bool issuing_on_this_thread() noexcept {
  return issuing;
}

} // namespace caf_collective::detail
