#include "output_writer.hpp"

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <unistd.h>
#include <utility>

namespace caf_collective::launcher {

namespace {

struct writer_state {
  std::mutex mtx;
  std::condition_variable changed;
  std::deque<std::pair<int, std::string>> queue;
  size_t backlog = 0; // bytes in queue and in the write under way
  bool started = false;
};

// Never destroyed: the detached writer waits on it until the process ends
// (destroying a condition variable a thread waits on hangs the exit).
writer_state& state() {
  static auto* instance = new writer_state;
  return *instance;
}

void write_all(int fd, const std::string& text) {
  const char* pos = text.data();
  size_t left = text.size();
  while (left > 0) {
    auto n = ::write(fd, pos, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return; // the output is gone: nothing else to do
    pos += n;
    left -= static_cast<size_t>(n);
  }
}

// Runs, detached, until the process exits.
void run_writer() {
  auto& st = state();
  std::unique_lock<std::mutex> guard{st.mtx};
  for (;;) {
    st.changed.wait(guard, [&] { return !st.queue.empty(); });
    auto [fd, text] = std::move(st.queue.front());
    st.queue.pop_front();
    guard.unlock();
    write_all(fd, text);
    guard.lock();
    st.backlog -= text.size();
    st.changed.notify_all();
  }
}

} // namespace

void queue_output(int fd, std::string text) {
  if (text.empty()) return;
  auto& st = state();
  std::lock_guard<std::mutex> guard{st.mtx};
  if (!st.started) {
    try {
      std::thread{run_writer}.detach();
      st.started = true;
    } catch (const std::system_error&) {
      // No thread to spare: write here, as before there was a writer.
      write_all(fd, text);
      return;
    }
  }
  st.backlog += text.size();
  st.queue.emplace_back(fd, std::move(text));
  st.changed.notify_all();
}

size_t output_backlog() {
  auto& st = state();
  std::lock_guard<std::mutex> guard{st.mtx};
  return st.backlog;
}

void flush_output() {
  auto& st = state();
  std::unique_lock<std::mutex> guard{st.mtx};
  st.changed.wait(guard, [&] { return st.backlog == 0; });
}

} // namespace caf_collective::launcher
