// shm backend: forming a group. Every rank publishes its host identity; if
// all ranks are on one host, rank 0 creates the segment and publishes its
// name, the others attach, and the name is removed once every rank mapped
// it, so a killed process leaves nothing in /dev/shm.
#include <fstream>
#include <string>
#include <thread>

#include <unistd.h>

#include <sys/stat.h>

#include "backends/shm/shm_backend.hpp"
#include "runtime/store_text.hpp"
#include "runtime/time_left.hpp"

namespace caf_collective::detail::shm {

namespace {

using clock = std::chrono::steady_clock;

// Per rank: the input chunk area and the reduced-slice area (staged mode),
// and one mailbox per peer. tmpfs backs only the pages that are touched.
constexpr size_t area_bytes_small_groups = size_t{4} << 20;
constexpr size_t area_bytes_large_groups = size_t{1} << 20;
constexpr size_t mailbox_bytes_small_groups = size_t{256} << 10;
constexpr size_t mailbox_bytes_large_groups = size_t{64} << 10;
// Per rank and epoch parity: the input of an op that takes one sync step
// (every rank reduces or copies all of it from every slot, so the slot
// shrinks as groups grow).
constexpr size_t small_bytes_small_groups = size_t{8} << 10;
constexpr size_t small_bytes_large_groups = size_t{2} << 10;

error_context where_of(const group_config& cfg) {
  return error_context::member(cfg.name, cfg.rank, cfg.world_size);
}

caf::error formation_error(const group_config& cfg, errc code,
                           std::string detail) {
  return make_error(code, where_of(cfg),
                    "forming the shm group failed: " + detail);
}

// A store wait that failed while forming: a timeout says what did not
// happen in time (`late`) with the store's words; anything else (an abort,
// a store that broke) keeps its code and words.
caf::error wait_failed(const group_config& cfg, const caf::error& err,
                       const std::string& late) {
  if (code_of(err) == errc::timeout)
    return formation_error(cfg, errc::timeout, late + " (" + render(err) + ")");
  return formation_error(
    cfg, is_collective_error(err) ? code_of(err) : errc::backend_error,
    detail_of(err));
}

// The backend's own errors name group and rank already, as formation_error
// does: keep their code and words, name them once.
caf::error formation_error(const group_config& cfg, const caf::error& err) {
  auto text = detail_of(err);
  auto named = detail_of(make_error(code_of(err), where_of(cfg), ""));
  if (text.starts_with(named)) text.erase(0, named.size());
  return formation_error(cfg, code_of(err), std::move(text));
}

} // namespace

std::string host_identity() {
  std::string boot_id;
  std::ifstream in{"/proc/sys/kernel/random/boot_id"};
  std::getline(in, boot_id);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  // Processes of one PID namespace see each other's pids: the one-process
  // test (equal pids), the death checks (pidfd_open, kill) and
  // process_vm_readv rely on that. Containers that share /dev/shm, the
  // boot id and the hostname (--ipc=host --network=host, a pod's
  // containers) may each run a rank as pid 1.
  char pid_namespace[64] = {};
  auto n =
    readlink("/proc/self/ns/pid", pid_namespace, sizeof(pid_namespace) - 1);
  if (n < 0) pid_namespace[0] = '\0';
  // Containers of one kernel and hostname may still have /dev/shm of their
  // own (a private tmpfs: docker without --ipc=host): the segment one
  // creates is not there for the other. Each tmpfs has a device number of
  // its own.
  struct stat shm_dir {};
  auto shm_device = stat("/dev/shm", &shm_dir) == 0
                      ? std::to_string(shm_dir.st_dev)
                      : std::string{"none"};
  // The boot id tells apart machines (and containers of other kernels) that
  // share a hostname; the hostname tells apart containers of one kernel.
  return boot_id + "/" + host + "/" + pid_namespace + "/shm:" + shm_device;
}

shm_backend::shm_backend(const group_config& cfg, segment seg)
  : group_name_(cfg.name), rank_(cfg.rank), world_size_(cfg.world_size),
    seg_(std::move(seg)), pids_(size_t(cfg.world_size), 0),
    pidfds_(size_t(cfg.world_size), -1), acc_(16 * 2048), tmp_(16 * 2048),
    sources_(size_t(cfg.world_size)) {
  probe_word_ = probe_value(cfg.rank);
  // Published before this rank counts itself as attached (finish_formation).
  seg_.control(rank_).probe_addr = reinterpret_cast<uint64_t>(&probe_word_);
  seg_.control(rank_).pid = static_cast<int32_t>(getpid());
}

shm_backend::~shm_backend() {
  // Peers are never waiting for this rank once the group is done with its
  // ops: nothing to tell them. A broken group was aborted already. The
  // watchdog marks through another rank's mapping from now on.
  if (hub_) hub_->detach_header(rank_);
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
}

bool shm_backend::supports(op_kind, device_kind kind, dtype) const noexcept {
  return kind == device_kind::cpu;
}

namespace {

// What rank 0 publishes instead of the segment's name when it could not
// create the segment, followed by why. No segment name starts with it.
constexpr std::string_view creation_failed = "!not created: ";

} // namespace

caf::expected<backend_ptr> make_shm_backend(const group_config& cfg,
                                            const std::atomic<bool>* cancel) {
  auto deadline = clock::now() + cfg.timeout;
  if (cfg.world_size > max_world_size)
    return formation_error(cfg, errc::invalid_argument,
                           "world size " + std::to_string(cfg.world_size) +
                             " exceeds shm's limit of " +
                             std::to_string(max_world_size));
  auto store = make_prefix_store("shm/" + cfg.name, cfg.store);
  auto me = host_identity();
  if (auto err = store->set("host/" + std::to_string(cfg.rank), bytes_of(me)))
    return err;
  std::vector<int> elsewhere;
  std::string other_host;
  for (int r = 0; r < cfg.world_size; ++r) {
    auto host = store->get("host/" + std::to_string(r), time_left(deadline));
    if (!host)
      return wait_failed(cfg, host.error(),
                         "rank " + std::to_string(r) + " did not join within " +
                           std::to_string(cfg.timeout.count()) + " ms");
    if (text_of(*host) != me) {
      elsewhere.push_back(r);
      other_host = text_of(*host);
    }
  }
  if (!elsewhere.empty()) {
    std::string ranks;
    for (auto r : elsewhere)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return formation_error(cfg, errc::invalid_argument,
                           "backend shm needs every rank on one host, but "
                           "ranks [" +
                             ranks + "] run on '" + other_host +
                             "' and this rank on '" + me +
                             "' (use gloo, or auto)");
  }
  auto small = cfg.world_size <= 8;
  std::string name;
  if (cfg.rank == 0) {
    name = fresh_segment_name(cfg.name);
  } else {
    auto published = store->get("segment", time_left(deadline));
    if (!published)
      return wait_failed(cfg, published.error(),
                         "rank 0 did not publish the segment within " +
                           std::to_string(cfg.timeout.count()) + " ms");
    name = text_of(*published);
    if (name.starts_with(creation_failed))
      return formation_error(cfg, errc::backend_error,
                             "rank 0 could not create the shared segment: " +
                               name.substr(creation_failed.size()));
  }
  auto seg =
    cfg.rank == 0
      ? segment::create(
          name, cfg.world_size,
          small ? area_bytes_small_groups : area_bytes_large_groups,
          small ? mailbox_bytes_small_groups : mailbox_bytes_large_groups,
          small ? small_bytes_small_groups : small_bytes_large_groups,
          std::chrono::system_clock::now() +
            std::chrono::duration_cast<std::chrono::system_clock::duration>(
              deadline - clock::now()))
      : segment::attach(name);
  if (!seg) {
    // The others wait for the segment's name: tell them why none comes.
    if (cfg.rank == 0)
      store->set("segment",
                 bytes_of(std::string{creation_failed} + render(seg.error())));
    return formation_error(cfg, errc::backend_error, render(seg.error()));
  }
  if (cfg.rank == 0)
    if (auto err = store->set("segment", bytes_of(name))) return err;
  auto result = std::make_unique<shm_backend>(cfg, std::move(*seg));
  if (auto err = result->finish_formation(name, deadline, cancel))
    return formation_error(cfg, err);
  return backend_ptr{std::move(result)};
}

} // namespace caf_collective::detail::shm
