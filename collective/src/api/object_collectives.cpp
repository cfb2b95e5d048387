// The byte exchanges of the object collectives. Wire format, per op:
//
//   header   int64 [status, size]: status 0 = the payload is the object's
//            bytes; otherwise an errc and the payload is the text saying why
//            this rank could not serialize (so every rank can report it).
//   payload  uint8 [size], moved by the tensor op that fits the collective
//            (allgatherv, broadcast, send/recv; gather and scatter padded
//            to the largest size when that costs little, else an alltoallv
//            whose only blocks go to or come from the root: see
//            payload_layout).
//   verdict  int64 [status, source]: whether this rank could read what it
//            received (and from whom), agreed by an allgather (collectives)
//            or sent back to the sender (send/recv).
//
// Every tensor op runs with the caller's timeout; its failure (peer_lost,
// timeout, ...) is rethrown with the object op and phase added.
#include "caf_collective/object_collectives.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <new>

#include "caf_collective/group.hpp"
#include "runtime/lane.hpp"

namespace caf_collective::detail {

namespace {

using header = std::array<int64_t, 2>;

// The largest payload a header may announce: far above any object worth
// sending through a collective, far below sizes whose allocation would take
// the process down when a header is corrupted.
constexpr int64_t max_payload = int64_t{1} << 36;

std::string where(const object_call& call) {
  return "group '" + call.grp.name() + "' " + std::string{call.op} + " rank " +
         std::to_string(call.grp.rank()) + "/" +
         std::to_string(call.grp.world_size()) + ": ";
}

[[noreturn]] void fail(const object_call& call, errc code,
                       const std::string& detail) {
  throw collective_error{make_error(code, where(call) + detail)};
}

// Runs one tensor op of phase `phase` to completion in the calling thread
// (inline when the lane is idle, as the blocking API does).
void run(const object_call& call, const char* phase,
         const std::function<work()>& submit) {
  caf::error err;
  {
    run_inline_scope allow_inline;
    err = submit().wait();
  }
  if (err)
    fail(call, code_of(err) != errc{} ? code_of(err) : errc::backend_error,
         std::string{"while exchanging "} + phase + ": " + render(err));
}

tensor_view bytes_view(void* data, size_t size) {
  return tensor_view{data, dtype::uint8, size};
}

template<class Int>
tensor_view int64_view(Int& xs) {
  return tensor_view{xs.data(), dtype::int64, xs.size()};
}

// What this rank puts on the wire: its bytes, or the text of its failure.
header prepare(encoded_object& mine) {
  if (mine.failure) {
    auto text = render(mine.failure);
    mine.bytes.assign(text.begin(), text.end());
    return {static_cast<int64_t>(code_of(mine.failure)),
            static_cast<int64_t>(mine.bytes.size())};
  }
  if (auto& hook = test_hooks().tamper) hook(mine.bytes);
  return {0, static_cast<int64_t>(mine.bytes.size())};
}

void between_phases() {
  if (auto& hook = test_hooks().between_phases) hook();
}

// The code a failed rank announced. Ranks only ever announce
// invalid_argument (they could not serialize) or out_of_memory; anything
// else is a header that was not written by an object op.
errc status_code(int64_t status) {
  auto code = static_cast<errc>(status);
  return code == errc::invalid_argument || code == errc::out_of_memory
           ? code
           : errc::mismatch;
}

// What a reader tells the others about the bytes it received: 0, or why it
// could not read them (out_of_memory: the object did not fit; mismatch:
// the bytes do not read as its type).
int64_t verdict_of(const caf::error& decode_failure) {
  if (!decode_failure) return 0;
  return static_cast<int64_t>(code_of(decode_failure) == errc::out_of_memory
                                ? errc::out_of_memory
                                : errc::mismatch);
}

size_t checked_size(const object_call& call, int64_t size, int from) {
  if (size < 0 || size > max_payload)
    fail(call, errc::mismatch,
         "rank " + std::to_string(from) + " announced " + std::to_string(size) +
           " bytes, which no object collective sends (a corrupted header, or "
           "that rank did not call an object op here)");
  return static_cast<size_t>(size);
}

// A failure text from a peer, cut short: it is meant for a log line.
std::string text_of(const char* data, size_t size) {
  constexpr size_t longest = 2048;
  if (size <= longest) return std::string{data, size};
  return std::string{data, longest} + "... (" + std::to_string(size) +
         " bytes)";
}

// The ranks whose header says they could not serialize, with their texts
// (moved by an allgatherv of the failed ranks' texts only), as one error.
[[noreturn]] void fail_serialization(const object_call& call,
                                     const std::vector<header>& headers,
                                     const encoded_object& mine) {
  auto world = headers.size();
  std::vector<size_t> counts(world, 0);
  std::vector<int> failed;
  for (size_t r = 0; r < world; ++r)
    if (headers[r][0] != 0) {
      counts[r] = checked_size(call, headers[r][1], static_cast<int>(r));
      failed.push_back(static_cast<int>(r));
    }
  size_t total = 0;
  for (auto c : counts)
    total += c;
  std::vector<char> texts(total);
  auto me = static_cast<size_t>(call.grp.rank());
  allgatherv_options opts;
  opts.timeout = call.opts.timeout;
  opts.counts = counts;
  auto in = const_cast<char*>(mine.bytes.data());
  run(call, "the failure texts", [&] {
    return call.grp.allgatherv(bytes_view(in, counts[me]),
                               bytes_view(texts.data(), total), opts);
  });
  std::string detail =
    "rank(s) " + list_ranks(failed) + " could not serialize their object:";
  size_t offset = 0;
  for (size_t r = 0; r < world; ++r) {
    if (headers[r][0] == 0) continue;
    detail += " [rank " + std::to_string(r) + "] " +
              text_of(texts.data() + offset, counts[r]);
    offset += counts[r];
  }
  fail(call, status_code(headers[static_cast<size_t>(failed[0])][0]), detail);
}

std::vector<header> allgather_headers(const object_call& call,
                                      const header& mine) {
  auto world = static_cast<size_t>(call.grp.world_size());
  std::vector<int64_t> flat(2 * world, 0);
  header in = mine;
  allgather_options opts;
  opts.timeout = call.opts.timeout;
  run(call, "the headers", [&] {
    return call.grp.allgather(int64_view(in), int64_view(flat), opts);
  });
  std::vector<header> result(world);
  for (size_t r = 0; r < world; ++r)
    result[r] = {flat[2 * r], flat[2 * r + 1]};
  return result;
}

bool any_failed(const std::vector<header>& headers) {
  return std::any_of(headers.begin(), headers.end(),
                     [](const header& h) { return h[0] != 0; });
}

// Refuses the call as its first tensor op (`first`) would be refused: the
// refusal takes that op's sequence number, so that when only this rank
// refuses, its next op does not meet the op its peers ran (it paired with
// it and returned their object as its own; docs/api.md, "Errors only one
// rank can see").
[[noreturn]] void refuse(const object_call& call, op_kind first,
                         const std::string& detail) {
  auto err = make_error(errc::invalid_argument, where(call) + detail);
  call.grp.refuse(first, err);
  throw collective_error{std::move(err)};
}

void check_rank(const object_call& call, int rank, const char* role,
                op_kind first) {
  if (rank < 0 || rank >= call.grp.world_size())
    refuse(call, first,
           std::string{role} + " " + std::to_string(rank) +
             " is not a rank of a group of " +
             std::to_string(call.grp.world_size()));
}

void check_peer(const object_call& call, int peer, const char* role,
                op_kind first) {
  check_rank(call, peer, role, first);
  if (peer == call.grp.rank())
    refuse(call, first,
           std::string{role} + " " + std::to_string(peer) +
             " is the caller itself");
}

// Splits `flat` (blocks of `stride` bytes, or of each rank's own size for a
// stride of 0) into the first `sizes[r]` bytes of each block.
std::vector<std::vector<char>> split(const std::vector<char>& flat,
                                     const std::vector<size_t>& sizes,
                                     size_t stride) {
  std::vector<std::vector<char>> result(sizes.size());
  size_t offset = 0;
  for (size_t r = 0; r < sizes.size(); ++r) {
    auto first = flat.begin() + static_cast<ptrdiff_t>(offset);
    result[r].assign(first, first + static_cast<ptrdiff_t>(sizes[r]));
    offset += stride != 0 ? stride : sizes[r];
  }
  return result;
}

// Padding may add this many bytes on top of twice the payloads' total.
constexpr size_t padding_allowance = size_t{64} << 10;

// How gather and scatter move payloads whose sizes every rank knows.
// Padded, each payload takes a block of the largest size and one gather or
// scatter moves them: the cheaper op (Gloo's alltoallv costs an agreement
// round and a message per pair of ranks), taken when padding adds little.
// Otherwise each payload moves at its own size through an alltoallv whose
// only blocks go to or come from the root: one wide object among small ones
// must not make every rank send, and the root hold, world times its size.
struct payload_layout {
  std::vector<size_t> sizes;
  size_t total = 0;
  size_t widest = 0;
  bool padded = false;

  explicit payload_layout(std::vector<size_t> all) : sizes(std::move(all)) {
    for (auto size : sizes) {
      total += size;
      widest = std::max(widest, size);
    }
    padded = widest * sizes.size() <= 2 * total + padding_allowance;
  }

  /// The bytes rank r's payload occupies in the root's buffer.
  size_t block(size_t r) const { return padded ? widest : sizes[r]; }

  /// The root's buffer: every block, back to back.
  size_t flat_size() const { return padded ? widest * sizes.size() : total; }

  /// split()'s stride: 0 for blocks of each payload's own size.
  size_t stride() const { return padded ? widest : 0; }
};

// An alltoallv that moves nothing yet: the caller fills in the blocks that
// go to or come from the root (a gather or scatter of uneven sizes).
alltoallv_options empty_alltoallv(const object_call& call) {
  auto world = static_cast<size_t>(call.grp.world_size());
  alltoallv_options opts;
  opts.timeout = call.opts.timeout;
  opts.send_counts.assign(world, 0);
  opts.recv_counts.assign(world, 0);
  return opts;
}

} // namespace

object_test_hooks& test_hooks() {
  thread_local object_test_hooks hooks;
  return hooks;
}

namespace {

std::vector<char> broadcast_exchange(const object_call& call, int root,
                                     encoded_object mine) {
  check_rank(call, root, "root", op_kind::broadcast);
  bool is_root = call.grp.rank() == root;
  header hdr{0, 0};
  if (is_root) hdr = prepare(mine);
  broadcast_options opts;
  opts.timeout = call.opts.timeout;
  opts.root = root;
  run(call, "the header", [&] {
    return call.grp.broadcast(int64_view(hdr), int64_view(hdr), opts);
  });
  between_phases();
  auto size = checked_size(call, hdr[1], root);
  std::vector<char> bytes =
    is_root ? std::move(mine.bytes) : std::vector<char>(size);
  if (size > 0)
    run(call, "the payload", [&] {
      auto v = bytes_view(bytes.data(), size);
      return call.grp.broadcast(v, v, opts);
    });
  if (hdr[0] != 0)
    fail(call, status_code(hdr[0]),
         "root " + std::to_string(root) + " could not serialize its object: " +
           text_of(bytes.data(), bytes.size()));
  return bytes;
}

std::vector<std::vector<char>> allgather_exchange(const object_call& call,
                                                  encoded_object mine) {
  auto headers = allgather_headers(call, prepare(mine));
  between_phases();
  if (any_failed(headers)) fail_serialization(call, headers, mine);
  std::vector<size_t> sizes;
  size_t total = 0;
  for (size_t r = 0; r < headers.size(); ++r) {
    sizes.push_back(checked_size(call, headers[r][1], static_cast<int>(r)));
    total += sizes.back();
  }
  std::vector<char> flat(total);
  if (total > 0) {
    allgatherv_options opts;
    opts.timeout = call.opts.timeout;
    opts.counts = sizes;
    run(call, "the payloads", [&] {
      return call.grp.allgatherv(
        bytes_view(mine.bytes.data(), mine.bytes.size()),
        bytes_view(flat.data(), total), opts);
    });
  }
  return split(flat, sizes, 0);
}

std::vector<std::vector<char>> gather_exchange(const object_call& call,
                                               int root, encoded_object mine) {
  check_rank(call, root, "root", op_kind::allgather);
  // Every rank learns every size (and every failure), so all of them agree
  // on the counts of the exchange below and on whether to run it at all.
  auto headers = allgather_headers(call, prepare(mine));
  between_phases();
  if (any_failed(headers)) fail_serialization(call, headers, mine);
  std::vector<size_t> sizes;
  for (size_t r = 0; r < headers.size(); ++r)
    sizes.push_back(checked_size(call, headers[r][1], static_cast<int>(r)));
  payload_layout layout{std::move(sizes)};
  bool is_root = call.grp.rank() == root;
  std::vector<char> flat(is_root ? layout.flat_size() : 0);
  if (layout.padded) {
    if (layout.widest > 0) {
      mine.bytes.resize(layout.widest);
      gather_options opts;
      opts.timeout = call.opts.timeout;
      opts.root = root;
      run(call, "the payloads", [&] {
        return call.grp.gather(bytes_view(mine.bytes.data(), layout.widest),
                               bytes_view(flat.data(), flat.size()), opts);
      });
    }
  } else {
    auto me = static_cast<size_t>(call.grp.rank());
    auto opts = empty_alltoallv(call);
    opts.send_counts[static_cast<size_t>(root)] = layout.sizes[me];
    if (is_root) opts.recv_counts = layout.sizes;
    run(call, "the payloads", [&] {
      return call.grp.alltoallv(
        bytes_view(mine.bytes.data(), mine.bytes.size()),
        bytes_view(flat.data(), flat.size()), opts);
    });
  }
  if (!is_root) return {};
  return split(flat, layout.sizes, layout.stride());
}

std::vector<char> scatter_exchange(const object_call& call, int root,
                                   std::vector<encoded_object> parts) {
  check_rank(call, root, "root", op_kind::broadcast);
  auto world = static_cast<size_t>(call.grp.world_size());
  bool is_root = call.grp.rank() == root;
  // Header from the root: [status, text size, size of part 0, ...].
  std::vector<int64_t> hdr(2 + world, 0);
  std::vector<char> text;
  if (is_root) {
    auto bad =
      std::find_if(parts.begin(), parts.end(), [](const encoded_object& p) {
        return static_cast<bool>(p.failure);
      });
    if (bad != parts.end()) {
      auto h = prepare(*bad);
      hdr[0] = h[0];
      hdr[1] = h[1];
      text = std::move(bad->bytes);
    } else {
      for (size_t r = 0; r < world; ++r) {
        auto h = prepare(parts[r]);
        hdr[2 + r] = h[1];
      }
    }
  }
  broadcast_options bopts;
  bopts.timeout = call.opts.timeout;
  bopts.root = root;
  run(call, "the header", [&] {
    return call.grp.broadcast(int64_view(hdr), int64_view(hdr), bopts);
  });
  between_phases();
  if (hdr[0] != 0) {
    auto size = checked_size(call, hdr[1], root);
    text.resize(size);
    if (size > 0)
      run(call, "the failure text", [&] {
        auto v = bytes_view(text.data(), size);
        return call.grp.broadcast(v, v, bopts);
      });
    fail(call, status_code(hdr[0]),
         "root " + std::to_string(root) + " could not serialize its objects: " +
           text_of(text.data(), text.size()));
  }
  std::vector<size_t> sizes;
  for (size_t r = 0; r < world; ++r)
    sizes.push_back(checked_size(call, hdr[2 + r], root));
  payload_layout layout{std::move(sizes)};
  auto me = static_cast<size_t>(call.grp.rank());
  auto mine = layout.sizes[me];
  std::vector<char> flat;
  if (is_root) {
    // Each part at the start of its block.
    flat.resize(layout.flat_size());
    size_t offset = 0;
    for (size_t r = 0; r < world; ++r) {
      std::copy(parts[r].bytes.begin(), parts[r].bytes.end(),
                flat.begin() + static_cast<ptrdiff_t>(offset));
      offset += layout.block(r);
    }
  }
  std::vector<char> result(layout.block(me));
  if (layout.padded) {
    if (layout.widest > 0) {
      scatter_options opts;
      opts.timeout = call.opts.timeout;
      opts.root = root;
      run(call, "the payloads", [&] {
        return call.grp.scatter(bytes_view(flat.data(), flat.size()),
                                bytes_view(result.data(), layout.widest), opts);
      });
    }
    result.resize(mine);
  } else {
    auto opts = empty_alltoallv(call);
    if (is_root) opts.send_counts = layout.sizes;
    opts.recv_counts[static_cast<size_t>(root)] = mine;
    run(call, "the payloads", [&] {
      return call.grp.alltoallv(bytes_view(flat.data(), flat.size()),
                                bytes_view(result.data(), mine), opts);
    });
  }
  return result;
}

void send_exchange(const object_call& call, int dst, encoded_object mine) {
  check_peer(call, dst, "destination", op_kind::send);
  auto hdr = prepare(mine);
  send_options opts;
  opts.timeout = call.opts.timeout;
  opts.peer = dst;
  opts.tag = call.opts.tag;
  run(call, "the header", [&] { return call.grp.send(int64_view(hdr), opts); });
  between_phases();
  if (!mine.bytes.empty())
    run(call, "the payload", [&] {
      return call.grp.send(bytes_view(mine.bytes.data(), mine.bytes.size()),
                           opts);
    });
  if (mine.failure)
    fail(call, code_of(mine.failure),
         "could not serialize the object: " + render(mine.failure));
  header verdict{0, 0};
  recv_options ropts;
  ropts.timeout = call.opts.timeout;
  ropts.peer = dst;
  ropts.tag = call.opts.tag;
  run(call, "the receiver's verdict",
      [&] { return call.grp.recv(int64_view(verdict), ropts); });
  if (verdict[0] != 0)
    fail(call, status_code(verdict[0]),
         "rank " + std::to_string(dst) +
           (status_code(verdict[0]) == errc::out_of_memory
              ? " ran out of memory reading the object this rank sent ("
              : " could not deserialize the object this rank sent (") +
           std::to_string(mine.bytes.size()) + " bytes)");
}

std::vector<char> recv_exchange(const object_call& call, int src) {
  check_peer(call, src, "source", op_kind::recv);
  header hdr{0, 0};
  recv_options opts;
  opts.timeout = call.opts.timeout;
  opts.peer = src;
  opts.tag = call.opts.tag;
  run(call, "the header", [&] { return call.grp.recv(int64_view(hdr), opts); });
  between_phases();
  auto size = checked_size(call, hdr[1], src);
  std::vector<char> bytes(size);
  if (size > 0)
    run(call, "the payload",
        [&] { return call.grp.recv(bytes_view(bytes.data(), size), opts); });
  if (hdr[0] != 0)
    fail(call, status_code(hdr[0]),
         "rank " + std::to_string(src) + " could not serialize its object: " +
           text_of(bytes.data(), bytes.size()));
  return bytes;
}

void send_verdict_exchange(const object_call& call, int src,
                           const caf::error& decode_failure) {
  header verdict{verdict_of(decode_failure), src};
  send_options opts;
  opts.timeout = call.opts.timeout;
  opts.peer = src;
  opts.tag = call.opts.tag;
  run(call, "the verdict",
      [&] { return call.grp.send(int64_view(verdict), opts); });
  if (decode_failure)
    fail(call, status_code(verdict[0]),
         "the object from rank " + std::to_string(src) +
           " does not deserialize: " + render(decode_failure));
}

void agree_on_decoding_exchange(const object_call& call,
                                const caf::error& failure, int source) {
  header mine{verdict_of(failure), failure ? source : -1};
  auto verdicts = allgather_headers(call, mine);
  std::vector<int> failed;
  std::string sources;
  // out_of_memory only when every failed reader ran out of memory: bytes
  // that do not read as the type are the graver news.
  bool all_out_of_memory = true;
  for (size_t r = 0; r < verdicts.size(); ++r)
    if (verdicts[r][0] != 0) {
      failed.push_back(static_cast<int>(r));
      sources += (sources.empty() ? "" : ", ") + std::to_string(r) + " <- " +
                 std::to_string(verdicts[r][1]);
      all_out_of_memory &= status_code(verdicts[r][0]) == errc::out_of_memory;
    }
  if (failed.empty()) return;
  std::string detail =
    "rank(s) " + list_ranks(failed) +
    (all_out_of_memory ? " ran out of memory reading what they received"
                       : " could not deserialize what they received") +
    " (reader <- sender: " + sources + ")";
  if (failure) detail += "; here: " + render(failure);
  fail(call, all_out_of_memory ? errc::out_of_memory : errc::mismatch, detail);
}

// A rank that runs out of memory in the middle of an object op cannot
// take part in the exchange its peers are in (or about to enter): it
// aborts its group, so they fail at once (peer_lost or aborted, naming
// this rank) instead of at their deadline, and no later op of this rank
// pairs with an exchange it skipped.
template<class Exchange>
auto within_memory(const object_call& call, Exchange&& exchange)
  -> decltype(exchange()) {
  try {
    return exchange();
  } catch (const std::bad_alloc&) {
    auto why = "ran out of memory in the middle of the op (std::bad_alloc)";
    call.grp.abort(where(call) + why);
    fail(call, errc::out_of_memory,
         std::string{why} + "; the group is aborted, since its peers wait "
                            "for this rank in the op's exchanges");
  }
}

} // namespace

std::vector<char> broadcast_bytes(const object_call& call, int root,
                                  encoded_object mine) {
  return within_memory(
    call, [&] { return broadcast_exchange(call, root, std::move(mine)); });
}

std::vector<std::vector<char>> allgather_bytes(const object_call& call,
                                               encoded_object mine) {
  return within_memory(
    call, [&] { return allgather_exchange(call, std::move(mine)); });
}

std::vector<std::vector<char>> gather_bytes(const object_call& call, int root,
                                            encoded_object mine) {
  return within_memory(
    call, [&] { return gather_exchange(call, root, std::move(mine)); });
}

std::vector<char> scatter_bytes(const object_call& call, int root,
                                std::vector<encoded_object> parts) {
  return within_memory(
    call, [&] { return scatter_exchange(call, root, std::move(parts)); });
}

void send_bytes(const object_call& call, int dst, encoded_object mine) {
  within_memory(call, [&] { send_exchange(call, dst, std::move(mine)); });
}

std::vector<char> recv_bytes(const object_call& call, int src) {
  return within_memory(call, [&] { return recv_exchange(call, src); });
}

void send_verdict(const object_call& call, int src,
                  const caf::error& decode_failure) {
  within_memory(call,
                [&] { send_verdict_exchange(call, src, decode_failure); });
}

void agree_on_decoding(const object_call& call, const caf::error& failure,
                       int source) {
  within_memory(call,
                [&] { agree_on_decoding_exchange(call, failure, source); });
}

} // namespace caf_collective::detail
