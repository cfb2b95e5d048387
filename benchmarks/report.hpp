// nccl-tests-style output of the measurements (rank 0 only): the table,
// the average-busbw footer, CSV rows and a gnuplot PNG.
#pragma once

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

#include "perf_options.hpp"

namespace caf_collective::bench {

/// One timed series: times are the slowest rank's, in microseconds.
struct timing {
  bool valid = false;
  double mean_us = 0;
  /// What the table shows and bandwidths derive from: mean or median.
  double time_us = 0;
  double median_us = 0;
  double max_us = 0;
  double algbw = 0; // GB/s
  double busbw = 0; // GB/s
  size_t wrong = 0;
};

struct result_row {
  bench_op op;
  std::string path;
  std::string algo; // fastest variant (raw-gloo-best), else ""
  size_t bytes = 0;
  size_t count = 0;
  timing out_of_place;
  timing in_place;
};

/// Fills algbw and busbw from time_us (nccl-tests' definitions:
/// algbw = size / time, busbw = algbw * bus factor).
void derive_bandwidth(timing& t, bench_op op, size_t bytes, int ranks);

/// The measured copy bandwidth and the copy model's busbw bound (one line
/// per run; nothing when --copy-model 0).
void print_copy_model(std::ostream& out, const perf_options& opts);

/// busbw as a fraction of the copy model (0 when there is none).
double copy_fraction(const timing& t, const perf_options& opts);

/// The parser's notes (ops left out and why), one "# " line each.
void print_notes(std::ostream& out, const perf_options& opts);

void print_header(std::ostream& out, bench_op op, const perf_options& opts);
void print_row(std::ostream& out, const result_row& row,
               const perf_options& opts);
/// Average busbw per path over the rows of one op, and the wrong count.
void print_footer(std::ostream& out, const std::vector<result_row>& rows,
                  const perf_options& opts);

/// Returns false if the file could not be written completely.
bool write_csv(const std::string& file, const std::vector<result_row>& rows,
               const perf_options& opts);

/// One PNG per op (FILE-<op>.png when several ops ran); returns false if
/// gnuplot failed.
bool write_plot(const std::string& file, const std::vector<result_row>& rows,
                const perf_options& opts);

} // namespace caf_collective::bench
