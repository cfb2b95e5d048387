#include "gloo_session.hpp"

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

namespace caf_collective::bench {

std::shared_ptr<gloo::Context> connect_gloo(gloo::rendezvous::Store& store,
                                            const std::string& prefix, int rank,
                                            int ranks,
                                            std::chrono::milliseconds timeout) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, ranks);
  ctx->setTimeout(timeout);
  gloo::rendezvous::PrefixStore prefixed{prefix, store};
  ctx->connectFullMesh(prefixed, device);
  return ctx;
}

void warm_up_pairs(gloo::Context& ctx, size_t bytes) {
  if (ctx.size < 2) return;
  auto peers = static_cast<size_t>(ctx.size - 1);
  std::vector<char> out(bytes * peers);
  std::vector<char> in(bytes * peers);
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> recvs;
  auto slot = ctx.nextSlot();
  size_t offset = 0;
  for (int peer = 0; peer < ctx.size; ++peer) {
    if (peer == ctx.rank) continue;
    auto& pair = ctx.getPair(peer);
    recvs.push_back(pair->createRecvBuffer(slot, in.data() + offset, bytes));
    sends.push_back(pair->createSendBuffer(slot, out.data() + offset, bytes));
    offset += bytes;
  }
  for (auto& buf : sends)
    buf->send(0, bytes);
  for (auto& buf : recvs)
    buf->waitRecv();
  for (auto& buf : sends)
    buf->waitSend();
}

control_channel::control_channel(std::shared_ptr<gloo::Context> ctx)
  : ctx_(std::move(ctx)) {
  // nop
}

void control_channel::barrier() {
  if (ctx_->size < 2) return;
  gloo::BarrierOptions opts{ctx_};
  opts.setTag(tag_++);
  gloo::barrier(opts);
}

void control_channel::max(std::vector<double>& xs) {
  if (ctx_->size < 2 || xs.empty()) return;
  gloo::AllreduceOptions opts{ctx_};
  opts.setTag(tag_++);
  opts.setOutput(xs.data(), xs.size());
  using fn = void (*)(void*, const void*, const void*, size_t);
  opts.setReduceFunction(static_cast<fn>(&gloo::max<double>));
  gloo::allreduce(opts);
}

double control_channel::sum(double x) {
  if (ctx_->size < 2) return x;
  gloo::AllreduceOptions opts{ctx_};
  opts.setTag(tag_++);
  opts.setOutput(&x, 1);
  using fn = void (*)(void*, const void*, const void*, size_t);
  opts.setReduceFunction(static_cast<fn>(&gloo::sum<double>));
  gloo::allreduce(opts);
  return x;
}

} // namespace caf_collective::bench
