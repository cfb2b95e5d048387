// Runs every collective through a driver on object refs and checks each
// result against a reference computed here. Shared by the demo and the
// actor-layer tests, so the demo's claims are the tests' claims.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <caf/scoped_actor.hpp>

#include <caf_collective/client.hpp>
#include <caf_collective/error.hpp>
#include <caf_collective/messages.hpp>
#include <caf_collective/object_store.hpp>

namespace caf_collective::demo {

struct op_report {
  std::string op;
  size_t bytes = 0; // input bytes per rank
  double ms = 0;
  bool ok = false;
  std::string error;
};

using floats = std::vector<float>;

// Puts every input; a failed put's ref stays invalid and, given `failure`,
// the first failed put's error (out of memory, say) goes there.
inline std::vector<object_ref> put_all(object_store& store,
                                       const std::vector<floats>& xs,
                                       caf::error* failure = nullptr) {
  std::vector<object_ref> refs;
  for (auto& x : xs) {
    auto ref = store.put(tensor::from_vector(x));
    if (!ref && failure != nullptr && !*failure)
      *failure = std::move(ref.error());
    refs.push_back(ref ? *ref : object_ref{});
  }
  return refs;
}

inline floats read(object_store& store, const object_ref& ref) {
  auto view = store.get(ref);
  if (!view) return {};
  auto* p = view->data_as<float>();
  return floats(p, p + view->numel());
}

/// How many ops run_every_op runs on a group of `ws` ranks.
inline size_t every_op_count(int ws) {
  return ws >= 2 ? 12 : 11;
}

/// Runs allreduce, send (groups of 2 or more: the last rank sends to rank 0
/// while the others stand by), broadcast, reduce, allgather, allgatherv,
/// gather, scatter, reduce_scatter, alltoall, alltoallv and barrier on
/// `group` (world size `ws`), `n_per_rank` elements per rank (a multiple of
/// ws). Every op after the send also shows that the bystanders stayed in
/// step.
inline std::vector<op_report>
run_every_op(caf::scoped_actor& self, const driver_actor& driver,
             object_store& store, const std::string& group, int ws,
             size_t n_per_rank, std::chrono::milliseconds timeout) {
  std::vector<op_report> reports;
  auto W = static_cast<size_t>(ws);
  auto n = n_per_rank;
  auto input = [&](size_t r) {
    floats x(n);
    for (size_t i = 0; i < n; ++i)
      x[i] = static_cast<float>((r + 1) * 10 + i % 7);
    return x;
  };
  std::vector<floats> xs;
  for (size_t r = 0; r < W; ++r)
    xs.push_back(input(r));
  floats sum(n, 0.0f);
  for (auto& x : xs)
    for (size_t i = 0; i < n; ++i)
      sum[i] += x[i];
  floats concat;
  for (auto& x : xs)
    concat.insert(concat.end(), x.begin(), x.end());
  auto run = [&](const std::string& name, op_kind op,
                 const std::vector<floats>& ins, op_params params,
                 auto&& expected_of) {
    op_report rep;
    rep.op = name;
    rep.bytes = ins.empty() ? 0 : ins[0].size() * sizeof(float);
    caf::error put_failure;
    auto refs = put_all(store, ins, &put_failure);
    if (ins.empty()) refs.clear();
    if (put_failure) {
      // The inputs never reached the store: the op is not asked for.
      rep.error = "putting the inputs failed: " + render(put_failure);
      for (auto& ref : refs)
        if (ref.valid()) store.release(ref);
      reports.push_back(rep);
      return;
    }
    op_request req{group, op, refs, std::move(params)};
    auto t0 = std::chrono::steady_clock::now();
    auto res = run_op(self, driver, std::move(req), timeout);
    rep.ms = std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - t0)
               .count();
    if (!res) {
      rep.error = render(res.error());
    } else {
      rep.ok = true;
      for (size_t r = 0; r < W && rep.ok; ++r) {
        floats want = expected_of(r);
        floats got = r < res->refs.size() && res->refs[r].valid()
                       ? read(store, res->refs[r])
                       : floats{};
        if (got != want) {
          rep.ok = false;
          rep.error = "wrong result on rank " + std::to_string(r);
        }
      }
      for (auto& ref : res->refs)
        if (ref.valid()) store.release(ref);
    }
    for (auto& ref : refs)
      if (ref.valid()) store.release(ref);
    reports.push_back(rep);
  };
  op_params p;
  run("allreduce", op_kind::allreduce, xs, p, [&](size_t) { return sum; });
  p.root = ws - 1;
  if (ws >= 2) {
    op_params ps;
    ps.root = ws - 1;
    ps.peer = 0;
    run("send", op_kind::send, xs, ps,
        [&](size_t r) { return r == 0 ? xs[W - 1] : floats{}; });
  }
  run("broadcast", op_kind::broadcast, xs, p,
      [&](size_t) { return xs[W - 1]; });
  p.root = 0;
  run("reduce", op_kind::reduce, xs, p, [&](size_t r) {
    return r == 0 ? sum : xs[r]; // off the root the input is unchanged
  });
  run("allgather", op_kind::allgather, xs, p, [&](size_t) { return concat; });
  {
    std::vector<floats> vs;
    floats all;
    op_params pv;
    for (size_t r = 0; r < W; ++r) {
      floats v(r + 1, static_cast<float>(r));
      all.insert(all.end(), v.begin(), v.end());
      vs.push_back(v);
      pv.counts.push_back(r + 1);
    }
    run("allgatherv", op_kind::allgatherv, vs, pv, [&](size_t) { return all; });
  }
  run("gather", op_kind::gather, xs, p,
      [&](size_t r) { return r == 0 ? concat : floats{}; });
  // Off the root the inputs are unused (they could be empty refs).
  run("scatter", op_kind::scatter, xs, p, [&](size_t r) {
    return floats(xs[0].begin() + r * (n / W),
                  xs[0].begin() + (r + 1) * (n / W));
  });
  run("reduce_scatter", op_kind::reduce_scatter, xs, p, [&](size_t r) {
    return floats(sum.begin() + r * (n / W), sum.begin() + (r + 1) * (n / W));
  });
  run("alltoall", op_kind::alltoall, xs, p, [&](size_t r) {
    floats out;
    for (size_t j = 0; j < W; ++j)
      out.insert(out.end(), xs[j].begin() + r * (n / W),
                 xs[j].begin() + (r + 1) * (n / W));
    return out;
  });
  {
    // counts[i][j] = i + j + 1 elements from rank i to rank j, valued
    // 100 * i + j so every block is recognizable.
    op_params pv;
    std::vector<floats> vs(W);
    for (size_t i = 0; i < W; ++i)
      for (size_t j = 0; j < W; ++j) {
        pv.counts.push_back(i + j + 1);
        vs[i].insert(vs[i].end(), i + j + 1, static_cast<float>(100 * i + j));
      }
    run("alltoallv", op_kind::alltoallv, vs, pv, [&](size_t r) {
      floats out;
      for (size_t i = 0; i < W; ++i)
        out.insert(out.end(), i + r + 1, static_cast<float>(100 * i + r));
      return out;
    });
  }
  run("barrier", op_kind::barrier, {}, p, [&](size_t) { return floats{}; });
  return reports;
}

} // namespace caf_collective::demo
