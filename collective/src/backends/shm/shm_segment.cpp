#include "backends/shm/shm_segment.hpp"

#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <random>
#include <string_view>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "caf_collective/error.hpp"
#include "caf_collective/options.hpp"

namespace caf_collective::detail::shm {

namespace {

// The layout's version is its last character: bump it with every change of
// the layout or of how the ops use it (3: the sync line carries the key and
// a small input; 4: staged reduce_scatter and alltoall place a window per
// block in the area, reduce and the rooted copies use both areas, allreduce
// stages only its peers' slices), so that a process of
// another build refuses the segment instead of misreading it.
constexpr uint64_t segment_magic = 0x6361666d73686d35ull; // "cafmshm5"

// A stale segment is swept this long after its formation deadline: room
// for wall-clock adjustments between the creator's clock read and ours.
constexpr auto sweep_slack = std::chrono::seconds{2};

// Segment names in /dev/shm start with this (fresh_segment_name).
constexpr std::string_view name_prefix = "caf_collective_";

int64_t wall_clock_ns(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           t.time_since_epoch())
    .count();
}

constexpr size_t round_up(size_t x) noexcept {
  return (x + cache_line - 1) / cache_line * cache_line;
}

size_t header_bytes() noexcept {
  return round_up(sizeof(segment_header));
}

size_t controls_bytes(size_t w) noexcept {
  return w * sizeof(rank_control);
}

// Per rank and parity: a header of the uneven-size ops, at most
// [dtype, W send counts, W recv counts] (agreement.hpp), plus one spare.
size_t counts_stride(size_t w) noexcept {
  return 2 * w + 2;
}

size_t counts_bytes(size_t w) noexcept {
  return round_up(w * 2 * counts_stride(w) * sizeof(uint64_t));
}

size_t smalls_bytes(size_t w, size_t small_bytes) noexcept {
  return w * 2 * round_up(small_bytes);
}

size_t mailbox_stride(size_t mailbox_bytes) noexcept {
  return round_up(sizeof(mailbox_header)) + round_up(mailbox_bytes);
}

caf::error system_error(const std::string& what, const std::string& name) {
  return make_error(errc::backend_error, "shared memory: " + what + " '" +
                                           name + "': " + std::strerror(errno));
}

} // namespace

segment::segment(segment&& other) noexcept
  : base_(std::exchange(other.base_, nullptr)),
    bytes_(std::exchange(other.bytes_, 0)),
    header_(std::exchange(other.header_, nullptr)),
    name_(std::move(other.name_)) {
  other.name_.clear();
}

segment& segment::operator=(segment&& other) noexcept {
  if (this != &other) {
    this->~segment();
    new (this) segment(std::move(other));
  }
  return *this;
}

segment::~segment() {
  unlink();
  if (base_ != nullptr) munmap(base_, bytes_);
}

size_t segment::layout_bytes(int world_size, size_t area_bytes,
                             size_t mailbox_bytes,
                             size_t small_bytes) noexcept {
  auto w = static_cast<size_t>(world_size);
  return header_bytes() + controls_bytes(w) + counts_bytes(w) +
         smalls_bytes(w, small_bytes) + w * 2 * round_up(area_bytes) +
         w * w * mailbox_stride(mailbox_bytes);
}

caf::expected<segment>
segment::create(const std::string& name, int world_size, size_t area_bytes,
                size_t mailbox_bytes, size_t small_bytes,
                std::chrono::system_clock::time_point attach_by) {
  sweep_stale_segments();
  auto bytes = layout_bytes(world_size, area_bytes, mailbox_bytes, small_bytes);
  // tmpfs gives pages on first touch, so a segment larger than /dev/shm's
  // free space maps fine and fails later, mid-op, with SIGBUS (a
  // container's /dev/shm is 64 MiB by default): refuse it here instead.
  struct statvfs fs {};
  if (statvfs("/dev/shm", &fs) == 0) {
    auto free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (free_bytes < bytes)
      return make_error(
        errc::backend_error,
        "shared memory: a segment for " + std::to_string(world_size) +
          " ranks needs " + std::to_string(bytes >> 20) +
          " MiB, but /dev/shm has " + std::to_string(free_bytes >> 20) +
          " MiB free (in a container: a larger --shm-size; else fewer ranks "
          "per host, or backend gloo)");
  }
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return system_error("cannot create", name);
  segment result;
  result.name_ = name;
  result.bytes_ = bytes;
  // tmpfs allocates pages on first touch: the unused parts of the mailboxes
  // and areas cost nothing.
  if (ftruncate(fd, static_cast<off_t>(result.bytes_)) != 0) {
    auto err = system_error("cannot size", name);
    close(fd);
    return err;
  }
  void* base =
    mmap(nullptr, result.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return system_error("cannot map", name);
  result.base_ = static_cast<std::byte*>(base);
  result.header_ = new (base) segment_header{};
  auto& h = *result.header_;
  h.attach_by_ns = wall_clock_ns(attach_by);
  h.world_size = static_cast<uint32_t>(world_size);
  h.area_bytes = round_up(area_bytes);
  h.mailbox_bytes = round_up(mailbox_bytes);
  h.small_bytes = static_cast<uint32_t>(round_up(small_bytes));
  h.abort_mark.store(0);
  for (int r = 0; r < world_size; ++r)
    new (&result.control(r)) rank_control{};
  for (int from = 0; from < world_size; ++from)
    for (int to = 0; to < world_size; ++to)
      new (&result.mailbox(from, to)) mailbox_header{};
  // Last: a rank that attaches checks the magic before trusting the rest.
  std::atomic_ref<uint64_t>{h.magic}.store(segment_magic,
                                           std::memory_order_release);
  return result;
}

caf::expected<segment> segment::attach(const std::string& name) {
  int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return system_error("cannot open", name);
  struct stat st {};
  if (fstat(fd, &st) != 0 || size_t(st.st_size) < sizeof(segment_header)) {
    close(fd);
    return make_error(errc::backend_error,
                      "shared memory: segment '" + name + "' is truncated");
  }
  segment result;
  result.bytes_ = static_cast<size_t>(st.st_size);
  void* base =
    mmap(nullptr, result.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) return system_error("cannot map", name);
  result.base_ = static_cast<std::byte*>(base);
  result.header_ = static_cast<segment_header*>(base);
  auto magic = std::atomic_ref<uint64_t>{result.header_->magic}.load(
    std::memory_order_acquire);
  if (magic != segment_magic ||
      layout_bytes(result.world_size(), result.header_->area_bytes,
                   result.header_->mailbox_bytes,
                   result.header_->small_bytes) != result.bytes_)
    return make_error(errc::backend_error,
                      "shared memory: segment '" + name +
                        "' is not a caf-collective segment of this version");
  // Past its creator's deadline the segment is stale: another formation
  // may remove its name at any moment (sweep_stale_segments).
  if (result.header_->attach_by_ns <
      wall_clock_ns(std::chrono::system_clock::now()) -
        std::chrono::nanoseconds{sweep_slack}.count())
    return make_error(errc::timeout,
                      "shared memory: segment '" + name +
                        "' is past its formation's deadline (rank 0 gave up "
                        "on this formation)");
  // Any rank may remove the name, not only its creator: a formation that
  // fails after the creator died must not leave the segment behind.
  result.name_ = name;
  return result;
}

void segment::unlink() {
  if (name_.empty()) return;
  shm_unlink(name_.c_str());
  name_.clear();
}

rank_control& segment::control(int rank) const noexcept {
  auto* first = reinterpret_cast<rank_control*>(base_ + header_bytes());
  return first[rank];
}

uint64_t* segment::counts(int rank, int parity) const noexcept {
  auto w = static_cast<size_t>(world_size());
  auto* first =
    reinterpret_cast<uint64_t*>(base_ + header_bytes() + controls_bytes(w));
  return first +
         (static_cast<size_t>(rank) * 2 + size_t(parity)) * counts_stride(w);
}

std::byte* segment::small_slot(int rank, int parity) const noexcept {
  auto w = static_cast<size_t>(world_size());
  auto* first = base_ + header_bytes() + controls_bytes(w) + counts_bytes(w);
  return first +
         (static_cast<size_t>(rank) * 2 + size_t(parity)) * small_bytes();
}

std::byte* segment::area(int rank, int which) const noexcept {
  auto w = static_cast<size_t>(world_size());
  auto* first = base_ + header_bytes() + controls_bytes(w) + counts_bytes(w) +
                smalls_bytes(w, small_bytes());
  return first + (static_cast<size_t>(rank) * 2 + size_t(which)) * area_bytes();
}

mailbox_header& segment::mailbox(int from, int to) const noexcept {
  auto w = static_cast<size_t>(world_size());
  auto* first = base_ + header_bytes() + controls_bytes(w) + counts_bytes(w) +
                smalls_bytes(w, small_bytes()) + w * 2 * area_bytes();
  auto index = static_cast<size_t>(from) * w + static_cast<size_t>(to);
  return *reinterpret_cast<mailbox_header*>(
    first + index * mailbox_stride(mailbox_bytes()));
}

std::byte* segment::mailbox_data(int from, int to) const noexcept {
  return reinterpret_cast<std::byte*>(&mailbox(from, to)) +
         round_up(sizeof(mailbox_header));
}

std::string fresh_segment_name(const std::string& group) {
  std::random_device rd;
  std::string safe;
  for (char c : group.substr(0, 32))
    safe += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return "/caf_collective_" + safe + "_" + std::to_string(getpid()) + "_" +
         std::to_string(rd()) + std::to_string(rd());
}

// sweep_stale_segments reads these two words of a segment it never maps.
static_assert(offsetof(segment_header, magic) == 0 &&
              offsetof(segment_header, attach_by_ns) == sizeof(uint64_t));

void sweep_stale_segments() noexcept {
  auto now = wall_clock_ns(std::chrono::system_clock::now());
  auto slack = std::chrono::nanoseconds{sweep_slack}.count();
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  while (auto* entry = readdir(dir)) {
    std::string_view file = entry->d_name;
    if (!file.starts_with(name_prefix)) continue;
    // Read-only and never mapped: a segment being created, or one of
    // another user (whose name we could not remove from the sticky
    // /dev/shm anyway), is only looked at.
    int fd = openat(dirfd(dir), entry->d_name,
                    O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st {};
    uint64_t head[2] = {0, 0}; // magic, attach_by_ns
    bool ours =
      fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid();
    bool read = ours && pread(fd, head, sizeof(head), 0) ==
                          static_cast<ssize_t>(sizeof(head));
    bool stale;
    if (read && head[0] == segment_magic && head[1] != 0) {
      stale = static_cast<int64_t>(head[1]) < now - slack;
    } else {
      // Its creator was killed before it wrote the header (or it is of no
      // version we know): stale once older than any formation can last.
      auto age = std::chrono::seconds{time(nullptr) - st.st_mtime};
      stale = ours && age > max_timeout + sweep_slack;
    }
    close(fd);
    // shm_unlink takes the name with its leading slash.
    if (stale) shm_unlink(("/" + std::string{file}).c_str());
  }
  closedir(dir);
}

} // namespace caf_collective::detail::shm
