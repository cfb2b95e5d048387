#include "runtime/validate.hpp"

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string_view>

namespace caf_collective::detail {

namespace {

// A check's finding: empty when the check passed. An empty optional costs
// nothing, while every caf::error is built and destroyed by calls into
// libcaf_core: with a dozen checks per op, those calls were 7% of a profile
// of 8 B allreduces at one rank (docs/benchmarks.md, "Views without an
// allocation").
using problem = std::optional<caf::error>;

std::string describe(const tensor_view& x) {
  return std::to_string(x.numel()) + " " + std::string{to_string(x.type())} +
         " elements on " + to_string(x.dev());
}

// "float32", or "dtype 77" for a value outside the enum.
std::string name_of(dtype type) {
  if (is_valid(type)) return std::string{to_string(type)};
  return "dtype " + std::to_string(static_cast<int>(type));
}

caf::error invalid(const call_site& at, std::string detail) {
  return make_error(errc::invalid_argument, at.where, std::move(detail));
}

// A malformed view has no elements; without this check an operation on it
// would "succeed" while moving nothing.
problem check_well_formed(const call_site& at, const char* name,
                          const tensor_view& x) {
  if (x.defect() != nullptr)
    return invalid(at, std::string{name} + " is malformed: shape " +
                         to_string(x.shape()) + " of " + name_of(x.type()) +
                         " has " + x.defect());
  return {};
}

problem check_buffer(const call_site& at, const char* name,
                     const tensor_view& x) {
  if (auto err = check_well_formed(at, name, x)) return err;
  if (x.data() == nullptr && x.numel() > 0)
    return invalid(at, std::string{name} + " has " + std::to_string(x.numel()) +
                         " elements but a null data pointer");
  return {};
}

problem check_same_type(const call_site& at, const tensor_view& in,
                        const tensor_view& out) {
  if (in.type() != out.type())
    return invalid(at, "dtype mismatch: input is " +
                         std::string{to_string(in.type())} + ", output is " +
                         std::string{to_string(out.type())});
  if (in.dev() != out.dev())
    return invalid(at, "device mismatch: input on " + to_string(in.dev()) +
                         ", output on " + to_string(out.dev()));
  return {};
}

bool overlap(const tensor_view& in, const tensor_view& out) {
  if (in.nbytes() == 0 || out.nbytes() == 0) return false;
  auto in_begin = reinterpret_cast<uintptr_t>(in.data());
  auto out_begin = reinterpret_cast<uintptr_t>(out.data());
  return in_begin < out_begin + out.nbytes() &&
         out_begin < in_begin + in.nbytes();
}

// broadcast, reduce, allreduce and alltoall(v) take the same buffer as input
// and output (in place: alltoall's backends work from a copy of the input),
// or two buffers apart. Buffers that overlap otherwise would have elements
// overwritten before they are sent or reduced.
problem check_apart_or_same(const call_site& at, const tensor_view& in,
                            const tensor_view& out) {
  if (in.data() == out.data() || !overlap(in, out)) return {};
  return invalid(at, "input and output overlap but do not start at the "
                     "same address: pass one buffer as both (in place) or "
                     "two that do not overlap");
}

// Ops whose input and output differ in size: shm peers read a rank's input
// while it writes its output, so an input elsewhere inside the output came
// back as other ranks' blocks (wrong data, reported as success). allgather,
// allgatherv and gather take an input that is exactly the rank's own block
// of the output (MPI's in-place form: the rank copies nothing);
// `own_block` is that block's byte offset, or no_block for the ops
// without that form (scatter, reduce_scatter).
constexpr size_t no_block = SIZE_MAX;

problem check_apart(const call_site& at, const tensor_view& in,
                    const tensor_view& out, size_t own_block = no_block) {
  if (!overlap(in, out)) return {};
  if (own_block != no_block &&
      in.data() == static_cast<const std::byte*>(out.data()) + own_block &&
      own_block + in.nbytes() <= out.nbytes())
    return {};
  return invalid(at, own_block == no_block
                       ? "input and output overlap: this op has no in-place "
                         "form, pass two buffers that do not overlap"
                       : "input and output overlap, and the input is not "
                         "this rank's own block of the output: pass that "
                         "block (in place) or two buffers that do not "
                         "overlap");
}

problem check_rank(const call_site& at, const char* what, int value) {
  if (value < 0 || value >= at.world_size)
    return invalid(at, std::string{what} + " " + std::to_string(value) +
                         " is outside [0, " + std::to_string(at.world_size) +
                         ")");
  return {};
}

problem check_count(const call_site& at, const char* name, const tensor_view& x,
                    size_t expected, std::string_view why) {
  if (x.numel() != expected)
    return invalid(at, std::string{name} + " has " + describe(x) +
                         ", expected " + std::to_string(expected) + " (" +
                         std::string{why} + ")");
  return {};
}

problem check_reduce_op(const call_site& at, reduce_op op, dtype type) {
  if (!is_valid(op))
    return invalid(at, "reduce op " + std::to_string(static_cast<int>(op)) +
                         " is not one of sum, product, min, max, avg, band, "
                         "bor, bxor");
  if (!is_defined(op, type))
    return invalid(at, "reduce op " + std::string{to_string(op)} +
                         " is not defined on " + std::string{to_string(type)} +
                         " (bitwise ops need an integer dtype)");
  return {};
}

problem check_counts_vector(const call_site& at, const char* name,
                            const std::vector<size_t>& counts) {
  if (counts.size() != static_cast<size_t>(at.world_size))
    return invalid(at, std::string{name} + " has " +
                         std::to_string(counts.size()) +
                         " entries, expected one per rank (" +
                         std::to_string(at.world_size) + ")");
  return {};
}

// The sum of `counts` elements of `type`, or an error when the sum (or its
// size in bytes) does not fit in size_t: a wrapped sum would pass the size
// checks with buffers far too small.
problem checked_sum(const call_site& at, const char* name,
                    const std::vector<size_t>& counts, dtype type,
                    size_t& sum) {
  sum = 0;
  for (auto count : counts)
    if (__builtin_add_overflow(sum, count, &sum))
      return invalid(at, std::string{name} +
                           ": the sum of the counts does not fit in size_t");
  size_t bytes = 0;
  if (__builtin_mul_overflow(sum, size_of(type), &bytes))
    return invalid(at, std::string{name} + ": " + std::to_string(sum) + " " +
                         name_of(type) +
                         " elements do not fit in size_t bytes");
  return {};
}

// `x`'s elements times the world size, as the size of the other buffer of
// allgather, gather and scatter: refused when that count (or its bytes)
// does not fit in size_t, instead of comparing against a wrapped size.
problem check_scalable(const call_site& at, const char* name,
                       const tensor_view& x) {
  size_t count = 0;
  size_t bytes = 0;
  if (__builtin_mul_overflow(x.numel(), size_t(at.world_size), &count) ||
      __builtin_mul_overflow(count, size_of(x.type()), &bytes))
    return invalid(at, std::string{name} + " has " + describe(x) +
                         ": times the world size " +
                         std::to_string(at.world_size) +
                         " they do not fit in size_t");
  return {};
}

// Returns the first failure. Every check runs (they are cheap: text is
// built only when a check fails), which keeps the call sites flat.
template<class... Problems>
problem first_of(Problems&&... problems) {
  problem* first = nullptr;
  ((first = first != nullptr ? first : (problems ? &problems : nullptr)), ...);
  return first != nullptr ? std::move(*first) : problem{};
}

caf::error settle(problem p) {
  return p ? std::move(*p) : caf::error{};
}

} // namespace

caf::error validate_config(const group_config& cfg) {
  auto where = "group '" + cfg.name + "': ";
  if (cfg.name.empty())
    return make_error(errc::invalid_argument, "group name must not be empty");
  if (cfg.world_size < 1)
    return make_error(errc::invalid_argument, where + "world size " +
                                                std::to_string(cfg.world_size) +
                                                " must be at least 1");
  if (cfg.world_size > max_world_size)
    return make_error(errc::invalid_argument,
                      where + "world size " + std::to_string(cfg.world_size) +
                        " exceeds the limit of " +
                        std::to_string(max_world_size) +
                        " ranks (every member keeps one connection per peer)");
  if (cfg.rank < 0 || cfg.rank >= cfg.world_size)
    return make_error(errc::invalid_argument,
                      where + "rank " + std::to_string(cfg.rank) +
                        " is outside [0, " + std::to_string(cfg.world_size) +
                        ")");
  if (cfg.store == nullptr)
    return make_error(errc::invalid_argument,
                      where + "no rendezvous store given");
  if (cfg.timeout.count() <= 0 || cfg.timeout > max_timeout)
    return make_error(errc::invalid_argument,
                      where + "timeout must be in (0, " +
                        std::to_string(max_timeout.count()) + "] ms, got " +
                        std::to_string(cfg.timeout.count()) + " ms");
  if (cfg.backend != "gloo" && cfg.backend != "shm" && cfg.backend != "nccl" &&
      cfg.backend != "auto")
    return make_error(errc::invalid_argument,
                      where + "unknown backend '" + cfg.backend +
                        "' (expected gloo, shm, nccl or auto)");
  return {};
}

caf::error check_timeout(const call_site& at, const op_options& opts) {
  if (opts.timeout.count() < 0 || opts.timeout > max_timeout)
    return invalid(at, "timeout " + std::to_string(opts.timeout.count()) +
                         " ms is outside [0, " +
                         std::to_string(max_timeout.count()) + "] ms");
  return {};
}

caf::error check_send(const call_site& at, const tensor_view& in,
                      const send_options& opts) {
  if (auto err = check_rank(at, "destination rank", opts.peer))
    return std::move(*err);
  if (opts.peer == at.rank)
    return invalid(at,
                   "send to oneself (rank " + std::to_string(at.rank) + ")");
  return settle(check_buffer(at, "input", in));
}

caf::error check_recv(const call_site& at, const tensor_view& out,
                      const recv_options& opts) {
  if (auto err = check_rank(at, "source rank", opts.peer))
    return std::move(*err);
  if (opts.peer == at.rank)
    return invalid(at, "receive from oneself (rank " + std::to_string(at.rank) +
                         ")");
  return settle(check_buffer(at, "output", out));
}

caf::error check_broadcast(const call_site& at, const tensor_view& in,
                           const tensor_view& out,
                           const broadcast_options& opts) {
  if (auto err = first_of(check_rank(at, "root", opts.root),
                          check_buffer(at, "output", out),
                          check_well_formed(at, "input", in)))
    return std::move(*err);
  // Off the root the input is unused: it may be empty, but
  // one of the wrong size is still a caller error, caught on every rank.
  if (at.rank != opts.root && in.numel() == 0) return {};
  return settle(
    first_of(check_buffer(at, "input", in), check_same_type(at, in, out),
             check_count(at, "output", out, in.numel(), "same as the input"),
             check_apart_or_same(at, in, out)));
}

caf::error check_reduce(const call_site& at, const tensor_view& in,
                        const tensor_view& out, const reduce_options& opts) {
  if (auto err = first_of(check_rank(at, "root", opts.root),
                          check_buffer(at, "input", in),
                          check_well_formed(at, "output", out),
                          check_reduce_op(at, opts.op, in.type())))
    return std::move(*err);
  // Off the root the output is unused: it may be empty, but
  // one of the wrong size is still a caller error, caught on every rank.
  if (at.rank != opts.root && out.numel() == 0) return {};
  return settle(
    first_of(check_buffer(at, "output", out), check_same_type(at, in, out),
             check_count(at, "output", out, in.numel(), "same as the input"),
             check_apart_or_same(at, in, out)));
}

caf::error check_allreduce(const call_site& at, const tensor_view& in,
                           const tensor_view& out,
                           const allreduce_options& opts) {
  if (opts.algorithm > allreduce_algorithm::ring_options_api)
    return invalid(at, "allreduce algorithm " +
                         std::to_string(static_cast<int>(opts.algorithm)) +
                         " is not one of the enum's values");
  return settle(first_of(
    check_buffer(at, "input", in), check_buffer(at, "output", out),
    check_same_type(at, in, out), check_reduce_op(at, opts.op, in.type()),
    check_count(at, "output", out, in.numel(), "same as the input"),
    check_apart_or_same(at, in, out)));
}

caf::error check_allgather(const call_site& at, const tensor_view& in,
                           const tensor_view& out) {
  return settle(
    first_of(check_buffer(at, "input", in), check_buffer(at, "output", out),
             check_same_type(at, in, out), check_scalable(at, "input", in),
             check_count(at, "output", out, in.numel() * at.world_size,
                         "input elements x world size"),
             check_apart(at, in, out, size_t(at.rank) * in.nbytes())));
}

caf::error check_allgatherv(const call_site& at, const tensor_view& in,
                            const tensor_view& out,
                            const allgatherv_options& opts) {
  size_t total = 0;
  if (auto err =
        first_of(check_counts_vector(at, "counts", opts.counts),
                 check_buffer(at, "input", in), check_buffer(at, "output", out),
                 check_same_type(at, in, out)))
    return std::move(*err);
  if (auto err = checked_sum(at, "counts", opts.counts, in.type(), total))
    return std::move(*err);
  return settle(first_of(
    check_count(at, "input", in, opts.counts[at.rank], "counts[rank]"),
    check_count(at, "output", out, total, "sum of counts"),
    check_apart(at, in, out,
                std::accumulate(opts.counts.begin(),
                                opts.counts.begin() + at.rank, size_t{0}) *
                  size_of(in.type()))));
}

caf::error check_gather(const call_site& at, const tensor_view& in,
                        const tensor_view& out, const gather_options& opts) {
  if (auto err = first_of(
        check_rank(at, "root", opts.root), check_buffer(at, "input", in),
        check_well_formed(at, "output", out), check_scalable(at, "input", in)))
    return std::move(*err);
  // Off the root the output is unused: it may be empty, but
  // one of the wrong size is still a caller error, caught on every rank.
  if (at.rank != opts.root && out.numel() == 0) return {};
  return settle(
    first_of(check_buffer(at, "output", out), check_same_type(at, in, out),
             check_count(at, "output", out, in.numel() * at.world_size,
                         "input elements x world size"),
             check_apart(at, in, out, size_t(at.rank) * in.nbytes())));
}

caf::error check_scatter(const call_site& at, const tensor_view& in,
                         const tensor_view& out, const scatter_options& opts) {
  if (auto err = first_of(
        check_rank(at, "root", opts.root), check_buffer(at, "output", out),
        check_well_formed(at, "input", in), check_scalable(at, "output", out)))
    return std::move(*err);
  // Off the root the input is unused: it may be empty, but
  // one of the wrong size is still a caller error, caught on every rank.
  if (at.rank != opts.root && in.numel() == 0) return {};
  return settle(
    first_of(check_buffer(at, "input", in), check_same_type(at, in, out),
             check_count(at, "input", in, out.numel() * at.world_size,
                         "output elements x world size"),
             check_apart(at, in, out)));
}

caf::error check_reduce_scatter(const call_site& at, const tensor_view& in,
                                const tensor_view& out,
                                const reduce_scatter_options& opts) {
  if (auto err = first_of(
        check_buffer(at, "input", in), check_buffer(at, "output", out),
        check_same_type(at, in, out), check_reduce_op(at, opts.op, in.type())))
    return std::move(*err);
  if (in.numel() % at.world_size != 0)
    return invalid(at, "input has " + describe(in) +
                         ", not divisible by world size " +
                         std::to_string(at.world_size));
  return settle(
    first_of(check_count(at, "output", out, in.numel() / at.world_size,
                         "input elements / world size"),
             check_apart(at, in, out)));
}

caf::error check_alltoall(const call_site& at, const tensor_view& in,
                          const tensor_view& out) {
  if (auto err = first_of(
        check_buffer(at, "input", in), check_buffer(at, "output", out),
        check_same_type(at, in, out),
        check_count(at, "output", out, in.numel(), "same as the input"),
        check_apart_or_same(at, in, out)))
    return std::move(*err);
  if (in.numel() % at.world_size != 0)
    return invalid(at, "input has " + describe(in) +
                         ", not divisible by world size " +
                         std::to_string(at.world_size));
  return {};
}

caf::error check_alltoallv(const call_site& at, const tensor_view& in,
                           const tensor_view& out,
                           const alltoallv_options& opts) {
  if (auto err = first_of(
        check_counts_vector(at, "send_counts", opts.send_counts),
        check_counts_vector(at, "recv_counts", opts.recv_counts),
        check_buffer(at, "input", in), check_buffer(at, "output", out),
        check_same_type(at, in, out), check_apart_or_same(at, in, out)))
    return std::move(*err);
  // Sequenced: the size checks read the sums.
  size_t sent = 0;
  size_t received = 0;
  if (auto err = first_of(
        checked_sum(at, "send_counts", opts.send_counts, in.type(), sent),
        checked_sum(at, "recv_counts", opts.recv_counts, in.type(), received)))
    return std::move(*err);
  // The block a rank keeps is copied, not exchanged: no peer's agreement
  // key can catch a rank that sends itself more or less than it receives,
  // and the copy would run past its output block (or leave it short).
  auto me = static_cast<size_t>(at.rank);
  if (opts.send_counts[me] != opts.recv_counts[me])
    return invalid(at, "send_counts[" + std::to_string(at.rank) +
                         "] = " + std::to_string(opts.send_counts[me]) +
                         " but recv_counts[" + std::to_string(at.rank) +
                         "] = " + std::to_string(opts.recv_counts[me]) +
                         ": rank " + std::to_string(at.rank) +
                         " must receive from itself what it sends itself");
  return settle(
    first_of(check_count(at, "input", in, sent, "sum of send_counts"),
             check_count(at, "output", out, received, "sum of recv_counts")));
}

} // namespace caf_collective::detail
