#include "caf_collective/rendezvous.hpp"

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <unistd.h>

#include <caf/expected.hpp>

#include "caf_collective/error.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective {

rendezvous_store::~rendezvous_store() {
  // nop
}

caf::error rendezvous_store::set_within(const std::string& key,
                                        const std::vector<char>& value,
                                        std::chrono::milliseconds) {
  return set(key, value);
}

namespace {

caf::error key_timeout(const std::string& key,
                       std::chrono::milliseconds timeout,
                       std::string_view where, std::string_view hint = {}) {
  return make_error(
    errc::timeout,
    "rendezvous key '" + key + "' did not appear in the " + std::string{where} +
      " within " + std::to_string(timeout.count()) + " ms" + std::string{hint});
}

class in_process_store : public rendezvous_store {
 public:
  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      entries_[key] = value;
    }
    cv_.notify_all();
    return {};
  }

  caf::expected<std::vector<char>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    timeout = detail::bounded_wait(timeout);
    std::unique_lock<std::mutex> guard{mtx_};
    auto present = [&] { return entries_.count(key) > 0; };
    if (!cv_.wait_for(guard, timeout, present))
      return key_timeout(
        key, timeout, "in-process store",
        "; an in-process store reaches only members in this process: ranks "
        "in other processes meet through caf_collective_run, "
        "CAF_COLLECTIVE_STORE or MASTER_ADDR/MASTER_PORT (docs/config.md)");
    return entries_[key];
  }

 private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> entries_;
};

// One file per key. Values are written to a temporary file and renamed into
// place, so a reader never sees a partial value.
class file_store : public rendezvous_store {
 public:
  explicit file_store(std::string directory) : dir_(std::move(directory)) {
    // nop
  }

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
    if (ec)
      return make_error(errc::backend_error, "file store: cannot create " +
                                               dir_.string() + ": " +
                                               ec.message());
    auto target = path_of(key);
    auto tmp = target;
    tmp +=
      ".tmp." + std::to_string(::getpid()) + "." +
      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
    {
      std::ofstream out{tmp, std::ios::binary | std::ios::trunc};
      out.write(value.data(), static_cast<std::streamsize>(value.size()));
      if (!out)
        return make_error(errc::backend_error,
                          "file store: cannot write " + tmp.string());
    }
    std::filesystem::rename(tmp, target, ec);
    if (ec)
      return make_error(errc::backend_error, "file store: cannot rename to " +
                                               target.string() + ": " +
                                               ec.message());
    return {};
  }

  caf::expected<std::vector<char>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    timeout = detail::bounded_wait(timeout);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    auto target = path_of(key);
    auto pause = std::chrono::milliseconds{1};
    for (;;) {
      std::ifstream in{target, std::ios::binary};
      if (in)
        return std::vector<char>{std::istreambuf_iterator<char>{in},
                                 std::istreambuf_iterator<char>{}};
      if (std::chrono::steady_clock::now() >= deadline)
        return key_timeout(key, timeout, "file store " + dir_.string());
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds{20});
    }
  }

 private:
  // Keys may contain '/' (prefix stores): one file name per key, every
  // other byte as %XX so that no two keys share a file (flattening each to
  // a plain '%' made "a/b" and "a:b" one key).
  std::filesystem::path path_of(const std::string& key) const {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string name;
    for (char c : key) {
      auto byte = static_cast<unsigned char>(c);
      if (std::isalnum(byte) || c == '-' || c == '_' || c == '.') {
        name += c;
      } else {
        name += '%';
        name += hex[byte >> 4];
        name += hex[byte & 0xf];
      }
    }
    return dir_ / name;
  }

  std::filesystem::path dir_;
};

class prefix_store : public rendezvous_store {
 public:
  prefix_store(std::string prefix, rendezvous_store_ptr base)
    : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {
    // nop
  }

  caf::error set(const std::string& key,
                 const std::vector<char>& value) override {
    return base_->set(prefix_ + key, value);
  }

  caf::error set_within(const std::string& key, const std::vector<char>& value,
                        std::chrono::milliseconds timeout) override {
    return base_->set_within(prefix_ + key, value, timeout);
  }

  caf::expected<std::vector<char>>
  get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_->get(prefix_ + key, timeout);
  }

 private:
  std::string prefix_;
  rendezvous_store_ptr base_;
};

} // namespace

rendezvous_store_ptr make_in_process_store() {
  return std::make_shared<in_process_store>();
}

rendezvous_store_ptr shared_in_process_store(const std::string& name) {
  static std::mutex mtx;
  static std::map<std::string, std::weak_ptr<rendezvous_store>> stores;
  std::lock_guard<std::mutex> guard{mtx};
  // Drop entries whose groups are gone, so a later group of the same name
  // starts from an empty store instead of stale addresses.
  for (auto i = stores.begin(); i != stores.end();)
    i = i->second.expired() ? stores.erase(i) : std::next(i);
  if (auto existing = stores[name].lock()) return existing;
  auto fresh = make_in_process_store();
  stores[name] = fresh;
  return fresh;
}

rendezvous_store_ptr make_file_store(std::string directory) {
  return std::make_shared<file_store>(std::move(directory));
}

rendezvous_store_ptr make_prefix_store(std::string prefix,
                                       rendezvous_store_ptr base) {
  return std::make_shared<prefix_store>(std::move(prefix), std::move(base));
}

} // namespace caf_collective
