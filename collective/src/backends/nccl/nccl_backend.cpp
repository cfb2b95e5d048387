#include "backends/nccl/nccl_backend.hpp"

#include <algorithm>
#include <vector>

#include "backends/nccl/nccl_ops.hpp"
#include "backends/nccl/nccl_rendezvous.hpp"
#include "runtime/backend_factory.hpp"
#include "vocabulary/log.hpp"

namespace caf_collective::detail {

namespace {

rendezvous_store_ptr nccl_store(const group_config& cfg) {
  // Own prefix: the Gloo backend of a group with the same name may share
  // the store.
  return make_prefix_store("nccl/" + cfg.name, cfg.store);
}

} // namespace

nccl_backend::nccl_backend(group_config cfg, std::unique_ptr<nccl_clique> main)
  : cfg_(std::move(cfg)), main_(std::move(main)) {
  // nop
}

// All communicators finalize side by side within one group timeout (each
// aborts instead if it was aborted, failed, or does not finish in time);
// the members' destructors then only free memory.
nccl_backend::~nccl_backend() {
  std::vector<nccl_clique*> all;
  {
    std::lock_guard<std::mutex> guard{p2p_mtx_};
    for (auto& [pair, clique] : p2p_)
      all.push_back(clique.get());
  }
  all.push_back(main_.get());
  nccl_clique::shutdown(all, std::chrono::steady_clock::now() + cfg_.timeout);
}

bool nccl_backend::supports(op_kind, device_kind kind,
                            dtype type) const noexcept {
  if (kind != device_kind::cuda) return false;
  switch (type) {
    case dtype::int8:
    case dtype::uint8:
    case dtype::int32:
    case dtype::int64:
    case dtype::float16:
    case dtype::bfloat16:
    case dtype::float32:
    case dtype::float64: return true;
  }
  return false;
}

nccl_step_ctx nccl_backend::step(op_kind op, const op_call& call) const {
  nccl_step_ctx ctx;
  ctx.where = error_context{cfg_.name, op, static_cast<int64_t>(call.seq),
                            cfg_.rank, cfg_.world_size};
  ctx.timeout = call.timeout.count() > 0 ? call.timeout : cfg_.timeout;
  ctx.deadline = std::chrono::steady_clock::now() + ctx.timeout;
  return ctx;
}

caf::expected<nccl_clique*> nccl_backend::p2p_clique(const nccl_step_ctx& ctx,
                                                     const p2p_pair& pair) {
  {
    std::lock_guard<std::mutex> guard{p2p_mtx_};
    if (auto i = p2p_.find(pair); i != p2p_.end()) return i->second.get();
  }
  if (aborted_.load())
    return make_error(errc::aborted, ctx.where, "the NCCL backend is aborted");
  // Formed outside the lock: it waits for the peer, and the other lane
  // may need a communicator of its own meanwhile. Each pair belongs to one
  // lane (sends to the send lane, receives to the main lane), so no two
  // threads form the same one.
  auto store = nccl_store(cfg_);
  auto store_key = p2p_store_key(pair);
  nccl_id_record record;
  if (cfg_.rank == pair.sender) {
    auto id = make_nccl_id(ctx.where);
    if (!id) {
      publish_nccl_failure(*store, store_key, id.error());
      return std::move(id.error());
    }
    record.id = *id;
    if (auto err = publish_nccl_id(*store, store_key, record, ctx.where))
      return err;
  } else {
    auto fetched =
      fetch_nccl_id(*store, store_key, ctx.where, ctx.deadline, &aborted_);
    if (!fetched) return std::move(fetched.error());
    record = *fetched;
  }
  nccl_clique_spec spec;
  spec.label = cfg_.name + " p2p " + p2p_text(pair);
  spec.nranks = 2;
  spec.first_rank = cfg_.rank == pair.sender ? 0 : 1;
  spec.devices = {cfg_.cuda_device};
  spec.id = record.id;
  spec.teardown_timeout = cfg_.timeout;
  auto created =
    nccl_clique::create(std::move(spec), ctx.where, ctx.deadline, &aborted_);
  if (!created) return std::move(created.error());
  std::lock_guard<std::mutex> guard{p2p_mtx_};
  auto* result = created->get();
  p2p_.emplace(pair, std::move(*created));
  // An abort that ran while this one formed did not see it.
  if (aborted_.load()) result->abort("the NCCL backend is aborted");
  return result;
}

caf::error nccl_backend::send(const op_call& call, const tensor_view& in,
                              const send_options& opts) {
  auto ctx = step(op_kind::send, call);
  auto c = p2p_clique(ctx, p2p_pair_of(cfg_.rank, opts.peer, opts.tag));
  if (!c) return std::move(c.error());
  return nccl_send_message(**c, ctx, in, opts.tag);
}

caf::error nccl_backend::recv(const op_call& call, const tensor_view& out,
                              const recv_options& opts) {
  auto ctx = step(op_kind::recv, call);
  auto c = p2p_clique(ctx, p2p_pair_of(opts.peer, cfg_.rank, opts.tag));
  if (!c) return std::move(c.error());
  return nccl_recv_message(**c, ctx, out, opts.tag, opts.peer);
}

caf::error nccl_backend::broadcast(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const broadcast_options& opts) {
  return nccl_broadcast(*main_, step(op_kind::broadcast, call), {&in, 1},
                        {&out, 1}, opts.root);
}

caf::error nccl_backend::reduce(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const reduce_options& opts) {
  return nccl_reduce(*main_, step(op_kind::reduce, call), {&in, 1}, {&out, 1},
                     opts.root, opts.op);
}

caf::error nccl_backend::allreduce(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const allreduce_options& opts) {
  // opts.algorithm names Gloo's algorithms; NCCL picks its own.
  return nccl_allreduce(*main_, step(op_kind::allreduce, call), {&in, 1},
                        {&out, 1}, opts.op);
}

caf::error nccl_backend::allgather(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const allgather_options&) {
  return nccl_allgather(*main_, step(op_kind::allgather, call), {&in, 1},
                        {&out, 1});
}

caf::error nccl_backend::allgatherv(const op_call& call, const tensor_view& in,
                                    const tensor_view& out,
                                    const allgatherv_options& opts) {
  return nccl_allgatherv(*main_, step(op_kind::allgatherv, call), {&in, 1},
                         {&out, 1}, opts.counts);
}

caf::error nccl_backend::gather(const op_call& call, const tensor_view& in,
                                const tensor_view& out,
                                const gather_options& opts) {
  return nccl_gather(*main_, step(op_kind::gather, call), {&in, 1}, {&out, 1},
                     opts.root);
}

caf::error nccl_backend::scatter(const op_call& call, const tensor_view& in,
                                 const tensor_view& out,
                                 const scatter_options& opts) {
  return nccl_scatter(*main_, step(op_kind::scatter, call), {&in, 1}, {&out, 1},
                      opts.root);
}

caf::error nccl_backend::reduce_scatter(const op_call& call,
                                        const tensor_view& in,
                                        const tensor_view& out,
                                        const reduce_scatter_options& opts) {
  return nccl_reduce_scatter(*main_, step(op_kind::reduce_scatter, call),
                             {&in, 1}, {&out, 1}, opts.op);
}

caf::error nccl_backend::alltoall(const op_call& call, const tensor_view& in,
                                  const tensor_view& out,
                                  const alltoall_options&) {
  return nccl_alltoall(*main_, step(op_kind::alltoall, call), {&in, 1},
                       {&out, 1});
}

caf::error nccl_backend::alltoallv(const op_call& call, const tensor_view& in,
                                   const tensor_view& out,
                                   const alltoallv_options& opts) {
  return nccl_alltoallv(*main_, step(op_kind::alltoallv, call), {&in, 1},
                        {&out, 1}, opts.send_counts, opts.recv_counts);
}

caf::error nccl_backend::barrier(const op_call& call, const barrier_options&) {
  return nccl_barrier(*main_, step(op_kind::barrier, call));
}

void nccl_backend::abort(std::string_view why) {
  aborted_ = true;
  if (main_) main_->abort(why);
  std::lock_guard<std::mutex> guard{p2p_mtx_};
  for (auto& [pair, clique] : p2p_)
    clique->abort(why);
}

size_t nccl_backend::p2p_communicators() const {
  std::lock_guard<std::mutex> guard{p2p_mtx_};
  return p2p_.size();
}

caf::error check_nccl_usable(const group_config& cfg) {
  error_context where{cfg.name, op_kind::barrier, -1, cfg.rank, cfg.world_size};
  where.op = -1;
  if (auto err = check_cuda_device(cfg.cuda_device, where)) return err;
  return check_nccl_version(loaded_nccl().version, where);
}

caf::expected<backend_ptr> make_nccl_backend(const group_config& cfg) {
  return make_nccl_backend(cfg, nullptr);
}

caf::expected<backend_ptr> make_nccl_backend(const group_config& cfg,
                                             const std::atomic<bool>* cancel) {
  error_context where{cfg.name, op_kind::barrier, -1, cfg.rank, cfg.world_size};
  where.op = -1;
  auto deadline = std::chrono::steady_clock::now() + cfg.timeout;
  auto store = nccl_store(cfg);
  const std::string key = "unique_id";
  auto local_err = check_nccl_usable(cfg);
  nccl_id_record record;
  if (cfg.rank == 0) {
    if (local_err) {
      publish_nccl_failure(*store, key, local_err);
      return local_err;
    }
    auto id = make_nccl_id(where);
    if (!id) {
      publish_nccl_failure(*store, key, id.error());
      return std::move(id.error());
    }
    record.id = *id;
    if (auto err = publish_nccl_id(*store, key, record, where)) return err;
  } else {
    // Rank 0 waits in communicator init until its deadline; nothing
    // better to tell it from here.
    if (local_err) return local_err;
    auto fetched = fetch_nccl_id(*store, key, where, deadline, cancel);
    if (!fetched) return std::move(fetched.error());
    record = *fetched;
  }
  nccl_clique_spec spec;
  spec.label = cfg.name;
  spec.nranks = cfg.world_size;
  spec.first_rank = cfg.rank;
  spec.devices = {cfg.cuda_device};
  spec.id = record.id;
  spec.teardown_timeout = cfg.timeout;
  auto clique = nccl_clique::create(std::move(spec), where, deadline, cancel);
  if (!clique) return std::move(clique.error());
  logger_for("nccl").debug("group '{}' rank {}/{} formed on cuda:{}", cfg.name,
                           cfg.rank, cfg.world_size, cfg.cuda_device);
  return backend_ptr{new nccl_backend(cfg, std::move(*clique))};
}

} // namespace caf_collective::detail
