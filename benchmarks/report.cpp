#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>

namespace caf_collective::bench {

namespace {

std::string redop_name(const perf_options& opts) {
  return opts.redop == reduce_op::product ? "prod"
                                          : std::string{to_string(opts.redop)};
}

void print_timing(std::ostream& out, const timing& t) {
  if (!t.valid) {
    out << std::setw(10) << "n/a" << std::setw(8) << "n/a" << std::setw(8)
        << "n/a" << std::setw(7) << "n/a";
    return;
  }
  out << std::fixed << std::setw(10) << std::setprecision(1) << t.time_us
      << std::setw(8) << std::setprecision(3) << t.algbw << std::setw(8)
      << t.busbw << std::setw(7) << t.wrong;
}

std::string plot_name(const std::string& file, bench_op op, bool several) {
  if (!several) return file;
  auto dot = file.rfind('.');
  auto stem = dot == std::string::npos ? file : file.substr(0, dot);
  return stem + "-" + std::string{to_string(op)} + ".png";
}

} // namespace

void derive_bandwidth(timing& t, bench_op op, size_t bytes, int ranks) {
  if (!t.valid || t.time_us <= 0) return;
  t.algbw = static_cast<double>(bytes) / (t.time_us * 1e3);
  t.busbw = t.algbw * bus_factor(op, ranks);
}

void print_header(std::ostream& out, bench_op op, const perf_options& opts) {
  out << "#\n# " << to_string(op) << ", " << opts.ranks << " ranks as "
      << (opts.procs ? "processes" : "threads") << ", backend " << opts.backend
      << ", " << opts.iters << " iterations after " << opts.warmup_iters
      << " warm-up, check " << (opts.check ? "on" : "off") << "\n#"
      << std::string(60, ' ') << "out-of-place" << std::string(22, ' ')
      << "in-place\n"
      << "#         path         size      count     type  redop  root"
         "      time   algbw   busbw #wrong      time   algbw   busbw "
         "#wrong  algo\n"
      << "#                       (B) (elements)                    "
         "      (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n";
}

void print_row(std::ostream& out, const result_row& row,
               const perf_options& opts) {
  bool reduction = is_reduction(row.op);
  out << std::setw(22) << row.path << std::setw(13) << row.bytes
      << std::setw(11) << row.count << std::setw(9) << to_string(opts.type)
      << std::setw(7) << (reduction ? redop_name(opts) : "none") << std::setw(6)
      << (has_root(row.op) ? opts.root : -1);
  print_timing(out, row.out_of_place);
  print_timing(out, row.in_place);
  out << "  " << row.algo << "\n";
}

void print_footer(std::ostream& out, const std::vector<result_row>& rows,
                  const perf_options& opts) {
  std::map<std::string, std::pair<double, int>> sums;
  size_t wrong = 0;
  for (auto& row : rows) {
    for (auto* t : {&row.out_of_place, &row.in_place}) {
      if (!t->valid) continue;
      auto& [sum, n] = sums[row.path];
      sum += t->busbw;
      ++n;
      // A best-of row already counts the wrong results of its variants.
      if (row.path.rfind("gloo:", 0) != 0) wrong += t->wrong;
    }
  }
  for (auto& path : opts.paths)
    if (auto i = sums.find(path); i != sums.end())
      out << "# " << std::setw(14) << path
          << " avg bus bandwidth : " << std::fixed << std::setprecision(3)
          << i->second.first / i->second.second << " GB/s\n";
  out << "# Out of bounds values : " << wrong << (wrong ? " ERROR" : " OK")
      << "\n#\n";
}

void write_csv(const std::string& file, const std::vector<result_row>& rows,
               const perf_options& opts) {
  std::ofstream out{file};
  out << "op,path,algo,ranks,mode,size,count,type,redop,root";
  for (auto* prefix : {"oop", "ip"})
    out << "," << prefix << "_mean_us," << prefix << "_median_us," << prefix
        << "_max_us," << prefix << "_algbw," << prefix << "_busbw," << prefix
        << "_wrong";
  out << "\n";
  for (auto& row : rows) {
    out << to_string(row.op) << "," << row.path << "," << row.algo << ","
        << opts.ranks << "," << (opts.procs ? "procs" : "threads") << ","
        << row.bytes << "," << row.count << "," << to_string(opts.type) << ","
        << (is_reduction(row.op) ? redop_name(opts) : "none") << ","
        << (has_root(row.op) ? opts.root : -1);
    for (auto* t : {&row.out_of_place, &row.in_place}) {
      if (t->valid)
        out << "," << t->mean_us << "," << t->median_us << "," << t->max_us
            << "," << t->algbw << "," << t->busbw << "," << t->wrong;
      else
        out << ",,,,,,";
    }
    out << "\n";
  }
}

bool write_plot(const std::string& file, const std::vector<result_row>& rows,
                const perf_options& opts) {
  std::set<bench_op> ops;
  for (auto& row : rows)
    ops.insert(row.op);
  bool ok = true;
  for (auto op : ops) {
    auto data = file + "." + std::string{to_string(op)} + ".dat";
    auto script = data + ".gp";
    // Paths in order of appearance (with --variants, one per algorithm).
    std::vector<std::string> names;
    for (auto& row : rows)
      if (row.op == op &&
          std::find(names.begin(), names.end(), row.path) == names.end())
        names.push_back(row.path);
    std::vector<std::string> paths;
    {
      std::ofstream out{data};
      // One gnuplot data block per path, separated by two blank lines.
      for (auto& path : names) {
        bool any = false;
        for (auto& row : rows) {
          if (row.op != op || row.path != path || !row.out_of_place.valid)
            continue;
          out << row.bytes << " " << row.out_of_place.busbw << "\n";
          any = true;
        }
        if (any) {
          paths.push_back(path);
          out << "\n\n";
        }
      }
    }
    {
      std::ofstream out{script};
      // noenhanced: path names contain '_', which would print as subscripts.
      out << "set terminal png size 1000,600 noenhanced\n"
          << "set output '" << plot_name(file, op, ops.size() > 1) << "'\n"
          << "set title '" << to_string(op) << ", " << opts.ranks << " ranks ("
          << (opts.procs ? "processes" : "threads")
          << "), loopback TCP, out-of-place'\n"
          << "set logscale x 2\nset format x '%.0b%B'\n"
          << "set xlabel 'size (bytes)'\nset ylabel 'busbw (GB/s)'\n"
          << "set key top left\nset grid\nplot ";
      for (size_t i = 0; i < paths.size(); ++i)
        out << (i ? ", " : "") << "'" << data << "' index " << i
            << " using 1:2 with linespoints title '" << paths[i] << "'";
      out << "\n";
    }
    auto cmd = "gnuplot '" + script + "'";
    ok = std::system(cmd.c_str()) == 0 && ok;
    std::remove(script.c_str());
    std::remove(data.c_str());
  }
  return ok;
}

} // namespace caf_collective::bench
