// caf_collective_mpi_reference: the ops of caf_collective_perf through MPI,
// the reference the shm backend is measured against (issue 10). On one host
// Open MPI moves the data through its shared-memory transport. Run it under
// mpirun (the ranks are MPI's processes); it takes caf_collective_perf's
// flags (--ranks, --path, --backend, --procs are ignored) and prints the
// same columns, CSV and plot, with one path: "mpi".
//
//   mpirun -np 2 caf_collective_mpi_reference --op allreduce -b 8 -e 64M
//
// Out-of-place broadcast: the root broadcasts its input and then copies it
// into its output (MPI has no out-of-place broadcast); in-place forms
// (MPI_IN_PLACE) for allreduce, reduce and broadcast, like our direct path.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <mpi.h>

#include "bench_path.hpp"
#include "data_pattern.hpp"
#include "perf_options.hpp"
#include "report.hpp"

using namespace caf_collective;
using namespace caf_collective::bench;

namespace {

using clock_type = std::chrono::steady_clock;

MPI_Datatype mpi_type(dtype t) {
  switch (t) {
    case dtype::int8: return MPI_INT8_T;
    case dtype::uint8: return MPI_UINT8_T;
    case dtype::int32: return MPI_INT32_T;
    case dtype::int64: return MPI_INT64_T;
    case dtype::float32: return MPI_FLOAT;
    case dtype::float64: return MPI_DOUBLE;
    default: throw std::invalid_argument("unsupported dtype");
  }
}

MPI_Op mpi_op(reduce_op op) {
  switch (op) {
    case reduce_op::product: return MPI_PROD;
    case reduce_op::min: return MPI_MIN;
    case reduce_op::max: return MPI_MAX;
    default: return MPI_SUM;
  }
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS)
    throw std::runtime_error(std::string{what} + " failed");
}

int as_count(size_t n) {
  if (n > static_cast<size_t>(INT_MAX))
    throw std::invalid_argument("count exceeds MPI's int");
  return static_cast<int>(n);
}

// One collective through MPI on this rank's buffers.
void run(const op_args& a) {
  auto counts = counts_of(a.op, a.total, a.ranks);
  auto dt = mpi_type(a.type);
  auto op = mpi_op(a.redop);
  auto block = as_count(a.block());
  auto comm = MPI_COMM_WORLD;
  auto* in = a.in_place() ? MPI_IN_PLACE : a.in;
  switch (a.op) {
    case bench_op::allreduce:
      return check_mpi(
        MPI_Allreduce(in, a.out, as_count(counts.out), dt, op, comm),
        "MPI_Allreduce");
    case bench_op::reduce: {
      // In place: the root reduces into its buffer, the others send theirs.
      auto* send = a.in_place() && a.rank != a.root ? a.out : in;
      return check_mpi(
        MPI_Reduce(send, a.out, as_count(counts.out), dt, op, a.root, comm),
        "MPI_Reduce");
    }
    case bench_op::broadcast: {
      auto n = as_count(counts.out);
      if (a.in_place() || a.rank != a.root)
        return check_mpi(MPI_Bcast(a.out, n, dt, a.root, comm), "MPI_Bcast");
      check_mpi(MPI_Bcast(a.in, n, dt, a.root, comm), "MPI_Bcast");
      std::memcpy(a.out, a.in, counts.out * size_of(a.type));
      return;
    }
    case bench_op::allgather:
      return check_mpi(MPI_Allgather(a.in, block, dt, a.out, block, dt, comm),
                       "MPI_Allgather");
    case bench_op::reduce_scatter:
      return check_mpi(
        MPI_Reduce_scatter_block(a.in, a.out, block, dt, op, comm),
        "MPI_Reduce_scatter_block");
    case bench_op::alltoall:
      return check_mpi(MPI_Alltoall(a.in, block, dt, a.out, block, dt, comm),
                       "MPI_Alltoall");
    case bench_op::gather:
      return check_mpi(
        MPI_Gather(a.in, block, dt, a.out, block, dt, a.root, comm),
        "MPI_Gather");
    case bench_op::scatter:
      return check_mpi(
        MPI_Scatter(a.in, block, dt, a.out, block, dt, a.root, comm),
        "MPI_Scatter");
    case bench_op::sendrecv: {
      auto n = as_count(counts.out);
      return check_mpi(MPI_Sendrecv(a.in, n, dt, (a.rank + 1) % a.ranks, 0,
                                    a.out, n, dt,
                                    (a.rank + a.ranks - 1) % a.ranks, 0, comm,
                                    MPI_STATUS_IGNORE),
                       "MPI_Sendrecv");
    }
    case bench_op::barrier: return check_mpi(MPI_Barrier(comm), "MPI_Barrier");
  }
}

bool supports_in_place(bench_op op) {
  return op == bench_op::allreduce || op == bench_op::broadcast ||
         op == bench_op::reduce;
}

// A barrier whose waiters sleep: MPI's own barrier polls, which would steal
// the cores the copy measurement runs on.
void sleeping_barrier() {
  MPI_Request req;
  check_mpi(MPI_Ibarrier(MPI_COMM_WORLD, &req), "MPI_Ibarrier");
  for (int done = 0; !done;) {
    check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds{1});
  }
}

struct aligned_deleter {
  void operator()(std::byte* p) const {
    ::operator delete (p, std::align_val_t{64});
  }
};

using buffer = std::unique_ptr<std::byte, aligned_deleter>;

// 64-byte aligned, allocated once for the largest size and touched.
buffer make_buffer(size_t bytes) {
  bytes = std::max<size_t>(bytes, 64);
  buffer result{
    static_cast<std::byte*>(::operator new (bytes, std::align_val_t{64}))};
  std::memset(result.get(), 0, bytes);
  return result;
}

class mpi_runner {
 public:
  mpi_runner(const perf_options& opts, int rank) : opts_(opts), rank_(rank) {}

  int run_all() {
    auto in = make_buffer(opts_.max_bytes + 64);
    auto out = make_buffer(opts_.max_bytes + 64);
    std::vector<result_row> all;
    for (auto op : opts_.ops) {
      std::vector<result_row> rows;
      if (rank_ == 0) print_header(std::cout, op, opts_);
      for (auto bytes : op_sizes(opts_, op)) {
        result_row row{op, "mpi", {}, bytes, bytes / size_of(opts_.type),
                       {}, {}};
        op_args args;
        args.op = op;
        args.type = opts_.type;
        args.redop = opts_.redop;
        args.root = opts_.root;
        args.rank = rank_;
        args.ranks = opts_.ranks;
        args.total = row.count;
        args.in = in.get();
        args.out = out.get();
        row.out_of_place = measure_one(args);
        if (supports_in_place(op)) {
          args.in = out.get();
          row.in_place = measure_one(args);
        }
        derive_bandwidth(row.out_of_place, op, bytes, opts_.ranks);
        derive_bandwidth(row.in_place, op, bytes, opts_.ranks);
        if (rank_ == 0) print_row(std::cout, row, opts_);
        rows.push_back(std::move(row));
      }
      if (rank_ == 0) print_footer(std::cout, rows, opts_);
      all.insert(all.end(), rows.begin(), rows.end());
    }
    size_t wrong = 0;
    for (auto& row : all)
      wrong += row.out_of_place.wrong + row.in_place.wrong;
    bool written = true;
    if (rank_ == 0) {
      if (!opts_.csv_file.empty() && !write_csv(opts_.csv_file, all, opts_)) {
        std::cerr << "caf_collective_mpi_reference: writing " << opts_.csv_file
                  << " failed\n";
        written = false;
      }
      if (!opts_.plot_file.empty() && !write_plot(opts_.plot_file, all, opts_))
        std::cerr << "caf_collective_mpi_reference: gnuplot failed\n";
    }
    if (!written) return 2;
    return wrong > 0 ? 1 : 0;
  }

 private:
  timing measure_one(const op_args& args) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    double wrong = 0;
    if (opts_.check && args.op != bench_op::barrier) {
      fill_inputs(args);
      run(args);
      wrong = static_cast<double>(count_wrong(args));
    }
    auto bytes = args.total * size_of(args.type);
    for (int i = 0, n = warmup_iters_at(opts_, bytes); i < n; ++i)
      run(args);
    timing t;
    for (int r = 0; r < opts_.repeat; ++r) {
      // Outside the timed window, as in the tool: the check below must see
      // what the timed ops wrote, not check's or an earlier series' result.
      if (opts_.check) poison_output(args);
      auto series = time_series(args, iters_at(opts_, bytes));
      if (!t.valid || series.time_us < t.time_us) t = series;
    }
    // As the tool does: what the last timed op left (out-of-place only).
    if (opts_.check && args.op != bench_op::barrier && !args.in_place())
      wrong += static_cast<double>(count_wrong(args));
    double total_wrong = 0;
    check_mpi(MPI_Allreduce(&wrong, &total_wrong, 1, MPI_DOUBLE, MPI_SUM,
                            MPI_COMM_WORLD),
              "MPI_Allreduce");
    t.wrong = static_cast<size_t>(total_wrong);
    return t;
  }

  // One timed series; the slowest rank defines the time (as in the tool).
  timing time_series(const op_args& args, int iters) {
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    std::vector<double> samples;
    samples.reserve(static_cast<size_t>(iters));
    auto start = clock_type::now();
    auto last = start;
    for (int i = 0; i < iters; ++i) {
      run(args);
      auto now = clock_type::now();
      samples.push_back(
        std::chrono::duration<double, std::micro>(now - last).count());
      last = now;
    }
    auto total = std::chrono::duration<double, std::micro>(last - start);
    std::sort(samples.begin(), samples.end());
    double stats[3] = {total.count() / iters, samples[samples.size() / 2],
                       samples.back()};
    double worst[3] = {};
    check_mpi(
      MPI_Allreduce(stats, worst, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
      "MPI_Allreduce");
    timing t;
    t.valid = true;
    t.mean_us = worst[0];
    t.median_us = worst[1];
    t.max_us = worst[2];
    t.time_us = opts_.median_time ? t.median_us : t.mean_us;
    return t;
  }

  const perf_options& opts_;
  int rank_;
};

} // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int status = 0;
  // The parser checks -r and the ops' sizes against --ranks: give it MPI's
  // size first, and drop a --ranks of the caller's (ignored, as the header
  // says). First, not last: appended, it became the value of a trailing
  // flag the caller left without one ("-n --ranks").
  auto world = std::to_string(ranks);
  std::vector<char*> args{argv[0], const_cast<char*>("--ranks"), world.data()};
  for (int i = 1; i < argc; ++i) {
    if (std::string_view{argv[i]} == "--ranks" && i + 1 < argc) {
      ++i; // and its value
      continue;
    }
    args.push_back(argv[i]);
  }
  auto opts =
    parse_perf_options(static_cast<int>(args.size()), args.data(), status);
  if (opts) {
    if (rank == 0) print_notes(std::cout, *opts);
    opts->ranks = ranks;
    opts->procs = true;
    opts->backend = "mpi";
    opts->paths = {"mpi"};
    // Rank 0 measures the copy bandwidth while the others sleep.
    if (opts->copy_model) {
      if (rank == 0) {
        opts->copy = measure_copy_bandwidth(copy_threads_for(ranks));
        print_copy_model(std::cout, *opts);
      }
      sleeping_barrier();
      double total = opts->copy.total_gbs;
      MPI_Bcast(&total, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      opts->copy.total_gbs = total;
    }
    try {
      status = mpi_runner{*opts, rank}.run_all();
    } catch (const std::exception& ex) {
      std::cerr << "caf_collective_mpi_reference: rank " << rank
                << " failed: " << ex.what() << "\n";
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int worst = 0;
    MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    status = worst;
    // Again after the sweep: shows how much the machine's load moved.
    if (opts->copy_model) {
      if (rank == 0) {
        auto after = measure_copy_bandwidth(opts->copy.threads,
                                            opts->copy.bytes, opts->copy.reps);
        std::cout << "# copy bandwidth after the sweep: " << std::fixed
                  << std::setprecision(2) << after.total_gbs
                  << " GB/s together (%copy used " << opts->copy.total_gbs
                  << ")\n";
      }
      sleeping_barrier();
    }
    if (status == 1 && rank == 0)
      std::cerr << "caf_collective_mpi_reference: wrong results\n";
  }
  std::cout.flush();
  MPI_Finalize();
  return status;
}
