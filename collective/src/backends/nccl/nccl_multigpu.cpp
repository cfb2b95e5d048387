#include "caf_collective/nccl_multigpu.hpp"

#include <algorithm>
#include <set>

#include "backends/nccl/nccl_clique.hpp"
#include "backends/nccl/nccl_ops.hpp"
#include "backends/nccl/nccl_rendezvous.hpp"
#include "caf_collective/error.hpp"

namespace caf_collective {

namespace {

using detail::views;

/// Everything a multi-GPU call must agree on locally before NCCL sees it:
/// NCCL cannot tell one local device's count from another's, and a wrong
/// size would make it read or write past a buffer.
class call_check {
 public:
  call_check(const error_context& where, size_t devices)
    : where_(where), devices_(devices) {
    // nop
  }

  caf::error timeout(const op_options& opts) const {
    if (opts.timeout.count() < 0)
      return fail("negative timeout " + std::to_string(opts.timeout.count()) +
                  " ms");
    return {};
  }

  /// One tensor per device, all of one dtype and `count` elements.
  caf::error side(views xs, std::string_view name, size_t count,
                  const tensor_view* like) const {
    if (xs.size() != devices_)
      return fail("expected one '" + std::string{name} +
                  "' tensor per device (" + std::to_string(devices_) +
                  "), got " + std::to_string(xs.size()));
    for (size_t i = 0; i < xs.size(); ++i) {
      if (xs[i].numel() != count)
        return fail("'" + std::string{name} + "' tensor " + std::to_string(i) +
                    " has " + std::to_string(xs[i].numel()) +
                    " elements, expected " + std::to_string(count));
      if (like != nullptr && xs[i].type() != like->type())
        return fail("'" + std::string{name} + "' tensor " + std::to_string(i) +
                    " is " + std::string{to_string(xs[i].type())} +
                    ", expected " + std::string{to_string(like->type())});
    }
    return {};
  }

  caf::error root(int rank, size_t device, int world_size) const {
    if (rank < 0 || rank >= world_size)
      return fail("root rank " + std::to_string(rank) + " is not in [0, " +
                  std::to_string(world_size) + ")");
    if (device >= devices_)
      return fail("root device " + std::to_string(device) + " is not in [0, " +
                  std::to_string(devices_) + ")");
    return {};
  }

 private:
  caf::error fail(std::string text) const {
    return make_error(errc::invalid_argument, where_, std::move(text));
  }

  const error_context& where_;
  size_t devices_;
};

caf::error validate(const multigpu_config& cfg) {
  auto where = "multigpu group '" + cfg.name + "': ";
  auto bad = [&](std::string text) {
    return make_error(errc::invalid_argument, where + text);
  };
  if (cfg.name.empty()) return bad("empty group name");
  if (cfg.world_size < 1)
    return bad("world size " + std::to_string(cfg.world_size) + " < 1");
  if (cfg.rank < 0 || cfg.rank >= cfg.world_size)
    return bad("rank " + std::to_string(cfg.rank) + " is not in [0, " +
               std::to_string(cfg.world_size) + ")");
  if (cfg.cuda_devices.empty()) return bad("no CUDA devices given");
  std::set<int> distinct(cfg.cuda_devices.begin(), cfg.cuda_devices.end());
  if (distinct.size() != cfg.cuda_devices.size())
    return bad("a CUDA device appears twice (NCCL runs one rank per device)");
  if (cfg.store == nullptr) return bad("no rendezvous store given");
  if (cfg.timeout.count() <= 0)
    return bad("timeout " + std::to_string(cfg.timeout.count()) +
               " ms is not positive");
  return {};
}

} // namespace

int cuda_device_count() noexcept {
  return detail::count_cuda_devices().count;
}

multigpu_group::multigpu_group(multigpu_config cfg,
                               std::unique_ptr<detail::nccl_clique> clique)
  : cfg_(std::move(cfg)), clique_(std::move(clique)) {
  // nop
}

multigpu_group::~multigpu_group() = default;

caf::expected<std::unique_ptr<multigpu_group>>
multigpu_group::create(multigpu_config cfg) {
  if (auto err = validate(cfg)) return err;
  auto where = error_context::member(cfg.name, cfg.rank, cfg.world_size);
  auto deadline = std::chrono::steady_clock::now() + cfg.timeout;
  caf::error device_err;
  for (auto ordinal : cfg.cuda_devices)
    if (!device_err) device_err = detail::check_cuda_device(ordinal, where);
  if (!device_err)
    device_err =
      detail::check_nccl_version(detail::loaded_nccl().version, where);
  auto store = make_prefix_store("nccl_multigpu/" + cfg.name, cfg.store);
  const std::string key = "unique_id";
  auto per_member = static_cast<int32_t>(cfg.cuda_devices.size());
  detail::nccl_id_record record;
  if (cfg.rank == 0) {
    if (device_err) {
      detail::publish_nccl_failure(*store, key, device_err);
      return device_err;
    }
    auto id = detail::make_nccl_id(where);
    if (!id) {
      detail::publish_nccl_failure(*store, key, id.error());
      return std::move(id.error());
    }
    record.id = *id;
    record.devices_per_member = per_member;
    if (auto err = detail::publish_nccl_id(*store, key, record, where))
      return err;
  } else {
    if (device_err) return device_err;
    auto fetched = detail::fetch_nccl_id(*store, key, where, deadline);
    if (!fetched) return std::move(fetched.error());
    record = *fetched;
    // NCCL ranks are rank * devices + index: with different counts two
    // members would claim the same ranks.
    if (record.devices_per_member != per_member)
      return make_error(
        errc::mismatch, where,
        "rank 0 drives " + std::to_string(record.devices_per_member) +
          " CUDA devices but this member drives " + std::to_string(per_member) +
          "; every member must drive as many");
  }
  detail::nccl_clique_spec spec;
  spec.label = cfg.name;
  spec.nranks = cfg.world_size * per_member;
  spec.first_rank = cfg.rank * per_member;
  spec.devices = cfg.cuda_devices;
  spec.id = record.id;
  spec.teardown_timeout = cfg.timeout;
  auto clique = detail::nccl_clique::create(std::move(spec), where, deadline);
  if (!clique) return std::move(clique.error());
  return std::unique_ptr<multigpu_group>{
    new multigpu_group(std::move(cfg), std::move(*clique))};
}

int multigpu_group::nccl_world_size() const noexcept {
  return cfg_.world_size * static_cast<int>(cfg_.cuda_devices.size());
}

int multigpu_group::nccl_rank(size_t index) const noexcept {
  return cfg_.rank * static_cast<int>(cfg_.cuda_devices.size()) +
         static_cast<int>(index);
}

bool multigpu_group::broken() const noexcept {
  return clique_->aborted();
}

void multigpu_group::abort(std::string why) {
  clique_->abort(why);
}

namespace {

detail::nccl_step_ctx make_ctx(const multigpu_config& cfg, op_kind op,
                               uint64_t seq, const op_options& opts) {
  detail::nccl_step_ctx ctx;
  ctx.where = error_context{cfg.name, op, static_cast<int64_t>(seq), cfg.rank,
                            cfg.world_size};
  ctx.timeout = opts.timeout.count() > 0 ? opts.timeout : cfg.timeout;
  ctx.deadline = std::chrono::steady_clock::now() + ctx.timeout;
  return ctx;
}

size_t first_numel(views xs) {
  return xs.empty() ? 0 : xs[0].numel();
}

} // namespace

caf::error multigpu_group::allreduce(std::span<const tensor_view> in,
                                     std::span<const tensor_view> out,
                                     allreduce_options opts) {
  auto ctx = make_ctx(cfg_, op_kind::allreduce, next_seq_++, opts);
  call_check check{ctx.where, cfg_.cuda_devices.size()};
  auto n = first_numel(in);
  auto* like = in.empty() ? nullptr : &in[0];
  if (auto err = check.timeout(opts)) return err;
  if (auto err = check.side(in, "in", n, like)) return err;
  if (auto err = check.side(out, "out", n, like)) return err;
  return detail::nccl_allreduce(*clique_, ctx, in, out, opts.op);
}

caf::error multigpu_group::allreduce(std::span<const tensor_view> tensors,
                                     allreduce_options opts) {
  return allreduce(tensors, tensors, std::move(opts));
}

caf::error multigpu_group::broadcast(std::span<const tensor_view> in,
                                     std::span<const tensor_view> out,
                                     multigpu_broadcast_options opts) {
  auto ctx = make_ctx(cfg_, op_kind::broadcast, next_seq_++, opts);
  call_check check{ctx.where, cfg_.cuda_devices.size()};
  auto n = first_numel(out);
  auto* like = out.empty() ? nullptr : &out[0];
  if (auto err = check.timeout(opts)) return err;
  if (auto err = check.root(opts.root, opts.root_device, cfg_.world_size))
    return err;
  if (auto err = check.side(out, "out", n, like)) return err;
  if (opts.root == cfg_.rank) {
    // Only the root device's input is read; the others may be empty.
    if (in.size() != cfg_.cuda_devices.size())
      return check.side(in, "in", n, like);
    views root_in{&in[opts.root_device], 1};
    if (auto err = call_check{ctx.where, 1}.side(root_in, "in", n, like))
      return err;
  }
  auto root = opts.root * static_cast<int>(cfg_.cuda_devices.size()) +
              static_cast<int>(opts.root_device);
  // Non-root members pass no inputs at all if they like.
  std::vector<tensor_view> ins(in.begin(), in.end());
  ins.resize(cfg_.cuda_devices.size());
  return detail::nccl_broadcast(*clique_, ctx, ins, out, root);
}

caf::error multigpu_group::reduce(std::span<const tensor_view> in,
                                  std::span<const tensor_view> out,
                                  multigpu_reduce_options opts) {
  auto ctx = make_ctx(cfg_, op_kind::reduce, next_seq_++, opts);
  call_check check{ctx.where, cfg_.cuda_devices.size()};
  auto n = first_numel(in);
  auto* like = in.empty() ? nullptr : &in[0];
  if (auto err = check.timeout(opts)) return err;
  if (auto err = check.root(opts.root, opts.root_device, cfg_.world_size))
    return err;
  if (auto err = check.side(in, "in", n, like)) return err;
  if (opts.root == cfg_.rank) {
    if (out.size() != cfg_.cuda_devices.size())
      return check.side(out, "out", n, like);
    views root_out{&out[opts.root_device], 1};
    if (auto err = call_check{ctx.where, 1}.side(root_out, "out", n, like))
      return err;
  }
  auto root = opts.root * static_cast<int>(cfg_.cuda_devices.size()) +
              static_cast<int>(opts.root_device);
  std::vector<tensor_view> outs(out.begin(), out.end());
  outs.resize(cfg_.cuda_devices.size());
  return detail::nccl_reduce(*clique_, ctx, in, outs, root, opts.op);
}

caf::error multigpu_group::allgather(std::span<const tensor_view> in,
                                     std::span<const tensor_view> out,
                                     allgather_options opts) {
  auto ctx = make_ctx(cfg_, op_kind::allgather, next_seq_++, opts);
  call_check check{ctx.where, cfg_.cuda_devices.size()};
  auto n = first_numel(in);
  auto* like = in.empty() ? nullptr : &in[0];
  if (auto err = check.timeout(opts)) return err;
  if (auto err = check.side(in, "in", n, like)) return err;
  auto total = n * static_cast<size_t>(nccl_world_size());
  if (auto err = check.side(out, "out", total, like)) return err;
  return detail::nccl_allgather(*clique_, ctx, in, out);
}

caf::error multigpu_group::reduce_scatter(std::span<const tensor_view> in,
                                          std::span<const tensor_view> out,
                                          reduce_scatter_options opts) {
  auto ctx = make_ctx(cfg_, op_kind::reduce_scatter, next_seq_++, opts);
  call_check check{ctx.where, cfg_.cuda_devices.size()};
  auto n = first_numel(out);
  auto* like = out.empty() ? nullptr : &out[0];
  if (auto err = check.timeout(opts)) return err;
  if (auto err = check.side(out, "out", n, like)) return err;
  auto total = n * static_cast<size_t>(nccl_world_size());
  if (auto err = check.side(in, "in", total, like)) return err;
  return detail::nccl_reduce_scatter(*clique_, ctx, in, out, opts.op);
}

caf::error multigpu_group::barrier(barrier_options opts) {
  auto ctx = make_ctx(cfg_, op_kind::barrier, next_seq_++, opts);
  if (auto err = call_check{ctx.where, 0}.timeout(opts)) return err;
  return detail::nccl_barrier(*clique_, ctx);
}

} // namespace caf_collective
