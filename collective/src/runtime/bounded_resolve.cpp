#include "runtime/bounded_resolve.hpp"

#include <condition_variable>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace caf_collective::detail {

namespace {

std::shared_ptr<addrinfo> owned(addrinfo* list) {
  return {list, [](addrinfo* p) {
            if (p != nullptr) ::freeaddrinfo(p);
          }};
}

// No service: the addresses alone.
const char* service_of(const std::string& service) {
  return service.empty() ? nullptr : service.c_str();
}

std::string failure(int rc) {
  return std::string{"cannot resolve the host: "} + ::gai_strerror(rc);
}

} // namespace

// One getaddrinfo call on its own thread. The thread owns a reference, so
// the lookup outlives a resolver destroyed while it runs.
struct bounded_resolver::lookup {
  std::mutex mtx;
  std::condition_variable finished;
  pid_t pid = 0; // the process whose thread does the lookup
  bool done = false;
  resolved_host result;
};

bounded_resolver::bounded_resolver(std::string host, std::string service,
                                   addrinfo hints)
  : host_(std::move(host)), service_(std::move(service)), hints_(hints) {
  hints_.ai_canonname = nullptr;
  hints_.ai_addr = nullptr;
  hints_.ai_next = nullptr;
}

resolved_host
bounded_resolver::resolve(std::chrono::steady_clock::time_point deadline) {
  // An address needs no resolver, and most stores are named by one.
  auto numeric = hints_;
  numeric.ai_flags |= AI_NUMERICHOST;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host_.c_str(), service_of(service_), &numeric, &found);
  if (rc == 0) return {owned(found), {}};
  if (rc != EAI_NONAME) return {nullptr, failure(rc)};
  std::shared_ptr<lookup> job;
  {
    std::lock_guard<std::mutex> guard{mtx_};
    // A lookup started before a fork has no thread in this process.
    if (!running_ || running_->pid != ::getpid()) {
      auto fresh = std::make_shared<lookup>();
      fresh->pid = ::getpid();
      try {
        std::thread{[job = fresh, host = host_, service = service_,
                     hints = hints_]() mutable {
          addrinfo* list = nullptr;
          int code =
            ::getaddrinfo(host.c_str(), service_of(service), &hints, &list);
          std::lock_guard<std::mutex> guard{job->mtx};
          job->result = code == 0 ? resolved_host{owned(list), {}}
                                  : resolved_host{nullptr, failure(code)};
          job->done = true;
          job->finished.notify_all();
        }}.detach();
      } catch (const std::system_error& e) {
        // Out of threads: this attempt fails; the next one tries again.
        return {nullptr, std::string{"cannot resolve the host: no thread "
                                     "for the lookup ("} +
                           e.what() + ")"};
      }
      running_ = std::move(fresh);
    }
    job = running_;
  }
  std::unique_lock<std::mutex> lock{job->mtx};
  if (!job->finished.wait_until(lock, deadline, [&] { return job->done; }))
    return {nullptr,
            "cannot resolve the host: the resolver did not answer in time "
            "(still asking)",
            true};
  auto result = job->result;
  lock.unlock();
  // Finished: the next call asks again (names may move).
  std::lock_guard<std::mutex> guard{mtx_};
  if (running_ == job) running_.reset();
  return result;
}

} // namespace caf_collective::detail
