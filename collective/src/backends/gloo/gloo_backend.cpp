// Gloo backend: formation, warm-up, error translation, point-to-point ops
// and barrier. Collectives live in gloo_data_movement.cpp,
// gloo_reductions.cpp and gloo_reduce_scatter.cpp.
#include "backends/gloo/gloo_backend.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <netdb.h>

#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <caf/expected.hpp>

#include "backends/gloo/gloo_formation_watchdog.hpp"
#include "backends/gloo/gloo_store_adapter.hpp"
#include "backends/gloo/slots.hpp"
#include "runtime/backend_factory.hpp"
#include "runtime/bounded_resolve.hpp"

namespace caf_collective::detail {

std::byte* scratch_buffer::reserve(size_t bytes) {
  if (bytes > capacity_) {
    // Grow geometrically so a slowly increasing size reallocates rarely.
    auto capacity = std::max(bytes, capacity_ + capacity_ / 2);
    data_.reset(new std::byte[capacity]);
    capacity_ = capacity;
  }
  return data_.get();
}

gloo_backend::gloo_backend(const group_config& cfg,
                           std::shared_ptr<gloo::Context> ctx)
  : group_name_(cfg.name), rank_(cfg.rank), world_size_(cfg.world_size),
    context_(std::move(ctx)) {
  if (world_size_ > 1) watchdog_.emplace([this] { end_every_wait(); });
}

void gloo_backend::end_every_wait() noexcept {
  // As Gloo does when one of its waits times out: every connection of the
  // group fails, which wakes every wait in Gloo and tells the peers; live_
  // wakes the waits whose transfer was half done, which Gloo leaves.
  timed_out_.store(true);
  fail_connections();
  live_.abort_all();
}

namespace {

// The watchdog rings this long after an op's deadline: an op whose single
// wait in Gloo runs out then reports Gloo's own words (which wait, in which
// of its files), and only an op of several waits is cut short by the ring.
std::chrono::milliseconds ring_grace(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 10, std::chrono::milliseconds{50},
                    std::chrono::milliseconds{2000});
}

} // namespace

gloo_backend::op_watch::op_watch(gloo_backend& self, op_kind op,
                                 const op_call& call)
  : dog_(self.watchdog_ ? &*self.watchdog_ : nullptr),
    slot_(op == op_kind::send ? 1 : 0), seq_(call.seq) {
  owner_ = dog_ != nullptr && call.timeout.count() > 0 &&
           dog_->watch(slot_, seq_,
                       op_watchdog::clock::now() + call.timeout +
                         ring_grace(call.timeout));
}

gloo_backend::op_watch::~op_watch() {
  if (owner_) dog_->unwatch(slot_);
}

bool gloo_backend::op_watch::finish_late() {
  if (!owner_) return rang();
  owner_ = false;
  return dog_->unwatch(slot_);
}

bool gloo_backend::op_watch::rang() const {
  return dog_ != nullptr && dog_->expired(slot_, seq_);
}

gloo_backend::~gloo_backend() {
  // Gloo closes its sockets hard (SO_LINGER 0: a reset, not a FIN), which
  // can destroy data a slower peer has not read yet. Meet the peers in a
  // short barrier first, so every rank has received everything before any
  // connection closes. Skipped when the group failed: peers may be gone.
  if (!aborted_.load() && world_size_ > 1) {
    try {
      gloo::BarrierOptions opts{context_};
      opts.setTag(shutdown_tag);
      opts.setTimeout(
        std::min(context_->getTimeout(), std::chrono::milliseconds{5000}));
      gloo::barrier(opts);
    } catch (const std::exception&) {
      // A peer left first or is gone: nothing left to protect.
    }
  }
  // Algorithms reference the context: drop them first.
  legacy_cache_.clear();
}

bool gloo_backend::supports(op_kind, device_kind kind, dtype) const noexcept {
  return kind == device_kind::cpu;
}

caf::error gloo_backend::translate(op_kind op, const op_call& call,
                                   const std::exception& ex) const {
  std::string what = ex.what();
  auto contains = [&](const char* needle) {
    return what.find(needle) != std::string::npos;
  };
  // When any wait of a group times out, Gloo closes every connection of
  // the group: the other ops then in flight fail with this, and it is not
  // their own timeout. So do the waits end_every_wait() woke (live_).
  if (contains("Application timeout caused pair closure") || timed_out_.load())
    return make_error(errc::aborted, context(op, call),
                      "another op of this rank's group timed out, and Gloo "
                      "then closes every connection of the group; Gloo: " +
                        what);
  if (contains("Timed out") || contains("timed out") || contains("Timeout") ||
      contains("timeout"))
    return timed_out(op, call, "Gloo: " + what);
  if (contains("Connection closed") || contains("Socket closed") ||
      contains("reset by peer") || contains("Broken pipe") ||
      contains("Connection refused")) {
    auto peer = name_peer(what);
    return make_error(errc::peer_lost, context(op, call),
                      "connection to " +
                        (peer.empty() ? std::string{"a peer"} : peer) +
                        " lost; Gloo: " + what);
  }
  return make_error(errc::backend_error, context(op, call), "Gloo: " + what);
}

caf::error gloo_backend::settled(op_kind op, const op_call& call,
                                 op_watch& watch, caf::error err) const {
  if (!err && watch.finish_late())
    return timed_out(op, call, "stopped at the op's deadline");
  return err;
}

caf::error gloo_backend::timed_out(op_kind op, const op_call& call,
                                   const std::string& detail) const {
  return make_error(
    errc::timeout, context(op, call),
    "not finished within " + std::to_string(call.timeout.count()) +
      " ms: a peer did not call this operation, is too slow, or called it "
      "with other arguments (op, dtype, element count, root and reduce op "
      "must match on every rank); " +
      detail);
}

caf::error gloo_backend::aborted_error(op_kind op, const op_call& call) {
  std::lock_guard<std::mutex> guard{abort_mtx_};
  return make_error(errc::aborted, context(op, call),
                    "backend aborted: " + abort_reason_);
}

void gloo_backend::abort(std::string_view why) {
  {
    std::lock_guard<std::mutex> guard{abort_mtx_};
    if (abort_reason_.empty()) abort_reason_ = std::string{why};
  }
  if (aborted_.exchange(true)) return;
  if (world_size_ == 1) return;
  fail_connections();
  live_.abort_all();
}

void gloo_backend::fail_connections() noexcept {
  // Gloo fails every connection of a context when a wait of the
  // application times out: the failed connections wake every thread waiting
  // in Gloo at once, their sockets close (so peers waiting on this rank
  // fail with peer_lost now, not at their deadline) and Gloo's network
  // thread has let go of them (it touches no buffer of a running operation
  // afterwards). Its public interface offers no other way to fail a
  // context, so a receive that nobody sends to waits 0 ms here.
  std::byte unused{};
  try {
    auto probe = context_->createUnboundBuffer(&unused, sizeof(unused));
    probe->waitRecv(nullptr, std::chrono::milliseconds{0});
  } catch (const std::exception&) {
    // The timeout we asked for.
  }
}

void gloo_backend::warm_up(size_t bytes) {
  if (world_size_ == 1) return;
  // Gloo's TCP pair sets SO_SNDBUF from the first message that goes through
  // its buffer path (unbound-buffer sends never resize it). Setting it pins
  // the size and turns off the kernel's auto-tuning, so a tiny first message
  // leaves a 4.6 KiB buffer and later 16-256 KiB messages stall on delayed
  // ACKs (88 ms per call here). One large message per connection first pins
  // the buffer at the kernel's maximum instead.
  constexpr size_t address_bytes = 256;
  auto peers = static_cast<size_t>(world_size_ - 1);
  std::vector<std::byte> out(bytes * peers);
  std::vector<std::byte> in(bytes * peers);
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> recvs;
  std::vector<int> ranks;
  auto slot = context_->nextSlot();
  size_t offset = 0;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    auto& pair = context_->getPair(peer);
    // Our end's address of this connection is the peer's "peer address":
    // the one Gloo names when the connection breaks.
    auto self = pair->address().str().substr(0, address_bytes - 1);
    std::memcpy(out.data() + offset, self.c_str(), self.size() + 1);
    recvs.push_back(pair->createRecvBuffer(slot, in.data() + offset, bytes));
    sends.push_back(pair->createSendBuffer(slot, out.data() + offset, bytes));
    ranks.push_back(peer);
    offset += bytes;
  }
  for (auto& buf : sends)
    buf->send(0, bytes);
  for (auto& buf : recvs)
    buf->waitRecv();
  for (auto& buf : sends)
    buf->waitSend();
  for (size_t i = 0; i < ranks.size(); ++i) {
    auto* text = reinterpret_cast<const char*>(in.data() + i * bytes);
    peer_addresses_.emplace_back(
      std::string{text, strnlen(text, address_bytes)}, ranks[i]);
  }
}

std::string gloo_backend::name_peer(const std::string& gloo_message) const {
  for (const auto& [address, rank] : peer_addresses_)
    if (!address.empty() && gloo_message.find(address) != std::string::npos)
      return "rank " + std::to_string(rank) + " (" + address + ")";
  return {};
}

caf::error gloo_backend::send(const op_call& call, const tensor_view& in,
                              const send_options& opts) {
  return guarded(op_kind::send, call, [&] {
    live_buffers::tracked buf{
      live_, context_->createUnboundBuffer(non_null(in.data()), in.nbytes())};
    buf->send(opts.peer, p2p_slot(opts.tag, in.nbytes(), uint8_t(in.type())), 0,
              in.nbytes());
    buf.wait_send(call.timeout);
  });
}

caf::error gloo_backend::recv(const op_call& call, const tensor_view& out,
                              const recv_options& opts) {
  return guarded(op_kind::recv, call, [&] {
    live_buffers::tracked buf{
      live_, context_->createUnboundBuffer(non_null(out.data()), out.nbytes())};
    buf->recv(opts.peer, p2p_slot(opts.tag, out.nbytes(), uint8_t(out.type())),
              0, out.nbytes());
    buf.wait_recv(call.timeout);
  });
}

caf::error gloo_backend::barrier(const op_call& call, const barrier_options&) {
  return guarded(op_kind::barrier, call, [&] {
    if (world_size_ == 1) return;
    gloo::BarrierOptions opts{context_};
    opts.setTag(tag_of(call.seq, agreement_key({uint64_t(op_kind::barrier)})));
    opts.setTimeout(call.timeout);
    gloo::barrier(opts);
  });
}

void gloo_backend::meet_empty(const op_call& call, uint64_t key) {
  if (world_size_ == 1) return;
  gloo::BarrierOptions opts{context_};
  opts.setTag(tag_of(call.seq, key));
  opts.setTimeout(call.timeout);
  gloo::barrier(opts);
}

namespace {

std::string resolve_hostname(const group_config& cfg) {
  if (!cfg.hostname.empty()) return cfg.hostname;
  if (const char* env = std::getenv("CAF_COLLECTIVE_HOSTNAME"); env && *env)
    return env;
  return "127.0.0.1";
}

// Size of the warm-up message per connection: large enough that Gloo's
// first send on each connection grows the socket buffers past the sizes
// at which we saw 88 ms delayed-ACK stalls (16-256 KiB).
constexpr size_t warm_up_bytes = 1 << 20;

// Gloo writes to its sockets without MSG_NOSIGNAL: a peer that closed its
// end would raise SIGPIPE and kill the whole process instead of failing one
// operation with peer_lost. Ignore SIGPIPE unless the program installed a
// handler of its own.
void ignore_sigpipe_once() {
  static std::once_flag flag;
  std::call_once(flag, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 &&
        current.sa_handler == SIG_DFL)
      std::signal(SIGPIPE, SIG_IGN);
  });
}

} // namespace

// Whether this rank's hostname resolves, checked before Gloo sees it:
// Gloo's own lookup only treats -1 as a getaddrinfo failure and goes on
// with an unset result for the others (e.g. EAI_NONAME), which crashed a
// process under TSan, and has no deadline. Bounded by the group's timeout:
// a resolver that does not answer fails the formation with timeout naming
// the name, instead of holding it.
caf::error check_gloo_usable(const group_config& cfg) {
  auto host = resolve_hostname(cfg);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  detail::bounded_resolver resolver{host, "", hints};
  auto found = resolver.resolve(std::chrono::steady_clock::now() + cfg.timeout);
  if (found.list) return {};
  return make_error(found.timed_out ? errc::timeout : errc::backend_error,
                    error_context::member(cfg.name, cfg.rank, cfg.world_size),
                    "forming the group failed: " + found.why +
                      " (this rank's hostname '" + host + "', within " +
                      std::to_string(cfg.timeout.count()) + " ms)");
}

caf::expected<backend_ptr> make_gloo_backend(const group_config& cfg,
                                             milliseconds op_timeout) {
  // Formation is no operation: the context names group and rank only.
  auto where = error_context::member(cfg.name, cfg.rank, cfg.world_size);
  ignore_sigpipe_once();
  auto host = resolve_hostname(cfg);
  auto deadline = std::chrono::steady_clock::now() + cfg.timeout;
  gloo_store_adapter adapter{make_prefix_store("gloo/" + cfg.name, cfg.store),
                             cfg.rank, cfg.world_size, host, cfg.timeout};
  formation_watchdog watchdog{cfg.rank, cfg.world_size, deadline,
                              [&adapter] { return adapter.own_addresses(); }};
  bool warm_up_late = false; // read once the alarm stopped
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = host;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx =
      std::make_shared<gloo::rendezvous::Context>(cfg.rank, cfg.world_size);
    // The connections keep the context's timeout as theirs for good: the
    // group's, not the formation's time left (the store adapter and the
    // watchdog bound the formation).
    ctx->setTimeout(op_timeout);
    ctx->connectFullMesh(adapter, device);
    watchdog.stop();
    auto result = std::make_unique<gloo_backend>(cfg, ctx);
    {
      deadline_alarm alarm{deadline, [&result, &warm_up_late] {
                             warm_up_late = true;
                             result->abort("formation deadline passed");
                           }};
      result->warm_up(warm_up_bytes);
    }
    if (warm_up_late) throw std::runtime_error("warm-up too late");
    return backend_ptr{std::move(result)};
  } catch (const std::exception& ex) {
    // The store or the peer check failed: keep their code and text.
    if (const auto& err = adapter.failure()) {
      return make_error(is_collective_error(err) ? code_of(err)
                                                 : errc::backend_error,
                        where, "forming the group failed: " + detail_of(err));
    }
    watchdog.stop();
    if (auto late = watchdog.late_peers(); !late.empty())
      return make_error(
        errc::timeout, where,
        "forming the group failed: the connections to rank(s) " +
          list_ranks(late) +
          " were not established by the formation deadline (" +
          std::to_string(cfg.timeout.count()) +
          " ms): they stopped or died after joining");
    // After the peers the watchdog named: its pokes at the deadline can look
    // like a connection to Gloo, which then fails in the warm-up.
    if (warm_up_late)
      return make_error(errc::timeout, where,
                        "forming the group failed: a peer connected but did "
                        "not finish the warm-up exchange by the formation "
                        "deadline (" +
                          std::to_string(cfg.timeout.count()) +
                          " ms): it stopped or hangs");
    std::string what = ex.what();
    auto code = what.find("timeout") != std::string::npos ||
                    what.find("Timed out") != std::string::npos ||
                    what.find("did not appear") != std::string::npos
                  ? errc::timeout
                  : errc::backend_error;
    return make_error(code, where,
                      "forming the group failed (every rank must join within " +
                        std::to_string(cfg.timeout.count()) + " ms): " + what);
  }
}

} // namespace caf_collective::detail
