// The unbound buffers the Gloo backend waits on itself (send, recv, the
// ring reduce_scatter), so that an abort can wake them.
//
// An abort fails the context's connections (gloo_backend::abort), and Gloo
// then wakes every wait whose transfer has not begun. A wait whose message
// is half sent or half received stays asleep: the failed connection drops
// the transfer without telling its buffer, and the wait would end only at
// the op's deadline. abort() therefore wakes these buffers itself.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <gloo/transport/unbound_buffer.h>

namespace caf_collective::detail {

class live_buffers {
 public:
  using buffer_ptr = std::unique_ptr<gloo::transport::UnboundBuffer>;

  /// One buffer while an op uses it: registered from construction until
  /// destruction. Its waits throw once the backend was aborted.
  class tracked {
   public:
    tracked(live_buffers& owner, buffer_ptr buf) : owner_(owner) {
      buf_ = std::move(buf);
      owner_.add(buf_.get());
    }

    tracked(const tracked&) = delete;
    tracked& operator=(const tracked&) = delete;

    ~tracked() { owner_.remove(buf_.get()); }

    gloo::transport::UnboundBuffer* operator->() const noexcept {
      return buf_.get();
    }

    void wait_recv(std::chrono::milliseconds timeout) {
      if (!buf_->waitRecv(timeout)) owner_.throw_aborted();
    }

    void wait_send(std::chrono::milliseconds timeout) {
      if (!buf_->waitSend(timeout)) owner_.throw_aborted();
    }

   private:
    live_buffers& owner_;
    buffer_ptr buf_;
  };

  /// Wakes every wait on a registered buffer, now and (since the mark is
  /// checked at registration) on any buffer registered later.
  void abort_all() {
    std::lock_guard<std::mutex> guard{mtx_};
    aborted_ = true;
    for (auto* buf : live_) {
      buf->abortWaitSend();
      buf->abortWaitRecv();
    }
  }

 private:
  void add(gloo::transport::UnboundBuffer* buf) {
    std::lock_guard<std::mutex> guard{mtx_};
    // An abort between the op's own check and here: the op must not start
    // a wait nobody would end.
    if (aborted_) throw_aborted();
    live_.push_back(buf);
  }

  void remove(gloo::transport::UnboundBuffer* buf) noexcept {
    std::lock_guard<std::mutex> guard{mtx_};
    live_.erase(std::remove(live_.begin(), live_.end(), buf), live_.end());
  }

  // gloo_backend::guarded turns any exception after an abort into the
  // abort's own error.
  [[noreturn]] static void throw_aborted() {
    throw std::runtime_error("the wait was woken by an abort");
  }

  std::mutex mtx_;
  bool aborted_ = false;
  std::vector<gloo::transport::UnboundBuffer*> live_;
};

} // namespace caf_collective::detail
