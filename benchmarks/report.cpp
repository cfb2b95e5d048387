#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <map>
#include <ostream>
#include <set>
#include <tuple>

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

// The backend a path's rows ran on.
std::string backend_of(const std::string& path, const perf_options& opts) {
  if (path == "shm" || path == "shm-persistent") return "shm";
  if (path == "direct" || path == "driver" || path == "driver-overlap")
    return opts.backend;
  if (path == "mpi") return "mpi";
  return "gloo";
}

// Which backend the paths of this run use, e.g. "shm, direct on gloo".
std::string backends(const perf_options& opts) {
  std::string result;
  for (auto& path : opts.paths) {
    auto backend = backend_of(path, opts);
    if (path.rfind("raw-gloo", 0) == 0) continue;
    result += (result.empty() ? "" : ", ") + path + " on " + backend;
  }
  return result.empty() ? "backend " + opts.backend : result;
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

void print_copy_model(std::ostream& out, const perf_options& opts) {
  if (!opts.copy_model || !opts.copy.valid()) return;
  auto& c = opts.copy;
  out << "# copy model: " << c.threads << " threads copying " << (c.bytes >> 20)
      << " MiB each at once, best of " << c.reps << ": " << std::fixed
      << std::setprecision(2) << c.total_gbs
      << " GB/s together; busbw bound for " << opts.ranks
      << " ranks = " << c.total_gbs << " / " << opts.ranks << " = "
      << c.model_busbw(opts.ranks)
      << " GB/s (%copy: out-of-place busbw / bound)\n";
}

double copy_fraction(const timing& t, const perf_options& opts) {
  auto model = opts.copy_model ? opts.copy.model_busbw(opts.ranks) : 0.0;
  return t.valid && model > 0 ? t.busbw / model : 0.0;
}

void print_notes(std::ostream& out, const perf_options& opts) {
  for (auto& note : opts.notes)
    out << "# " << note << "\n";
}

void print_header(std::ostream& out, bench_op op, const perf_options& opts) {
  bool copy = opts.copy_model && opts.copy.valid();
  out << "#\n# " << to_string(op) << ", " << opts.ranks << " ranks as "
      << (opts.procs ? "processes" : "threads") << ", " << backends(opts)
      << ", " << opts.iters << " iterations after " << opts.warmup_iters
      << " warm-up";
  if (opts.iter_budget > 0)
    out << " (at most " << opts.iter_budget << " B / size, >= 2 and 1)";
  out << ", check " << (opts.check ? "on" : "off") << "\n#"
      << std::string(60, ' ') << "out-of-place" << std::string(22, ' ')
      << "in-place\n"
      << "#         path         size      count     type  redop  root"
         "      time   algbw   busbw #wrong      time   algbw   busbw "
         "#wrong"
      << (copy ? "  %copy" : "") << "  algo\n"
      << "#                       (B) (elements)                    "
         "      (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)\n";
  // The driver answers these with the input's ref: it runs them in place,
  // though its row fills the out-of-place columns (it has no other form).
  bool driver = std::any_of(
    opts.paths.begin(), opts.paths.end(),
    [](const std::string& path) { return path.rfind("driver", 0) == 0; });
  if (driver && (op == bench_op::allreduce || op == bench_op::broadcast ||
                 op == bench_op::reduce))
    out << "# driver: runs " << to_string(op)
        << " in place (the result replaces the input object); compare it "
           "with the other paths' in-place columns\n";
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
  if (opts.copy_model && opts.copy.valid()) {
    if (row.out_of_place.valid && opts.ranks > 1)
      out << std::setw(6) << std::setprecision(0)
          << 100 * copy_fraction(row.out_of_place, opts) << "%";
    else
      out << std::setw(7) << "-";
  }
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
  // Out-of-place fraction of the copy model at >= 1 MiB: average, minimum.
  std::map<std::string, std::tuple<double, double, int>> fractions;
  for (auto& row : rows) {
    auto f = copy_fraction(row.out_of_place, opts);
    if (f <= 0 || row.bytes < (size_t{1} << 20)) continue;
    auto [it, fresh] = fractions.try_emplace(row.path, 0.0, f, 0);
    auto& [sum, least, n] = it->second;
    sum += f;
    least = std::min(least, f);
    ++n;
  }
  for (auto& path : opts.paths) {
    auto i = sums.find(path);
    if (i == sums.end()) continue;
    out << "# " << std::setw(14) << path
        << " avg bus bandwidth : " << std::fixed << std::setprecision(3)
        << i->second.first / i->second.second << " GB/s";
    if (auto j = fractions.find(path); j != fractions.end()) {
      auto& [sum, least, n] = j->second;
      out << std::setprecision(0) << ", at >= 1 MiB " << 100 * sum / n
          << "% of the copy model (min " << 100 * least << "%)";
    }
    out << "\n";
  }
  out << "# Out of bounds values : " << wrong << (wrong ? " ERROR" : " OK")
      << "\n#\n";
}

bool write_csv(const std::string& file, const std::vector<result_row>& rows,
               const perf_options& opts) {
  std::ofstream out{file};
  if (!out) return false;
  out << "op,path,algo,ranks,mode,backend,size,count,type,redop,root";
  for (auto* prefix : {"oop", "ip"})
    out << "," << prefix << "_mean_us," << prefix << "_median_us," << prefix
        << "_max_us," << prefix << "_algbw," << prefix << "_busbw," << prefix
        << "_wrong";
  out << ",copy_model_busbw,oop_copy_frac\n";
  for (auto& row : rows) {
    out << to_string(row.op) << "," << row.path << "," << row.algo << ","
        << opts.ranks << "," << (opts.procs ? "procs" : "threads") << ","
        << backend_of(row.path, opts) << "," << row.bytes << "," << row.count
        << "," << to_string(opts.type) << ","
        << (is_reduction(row.op) ? redop_name(opts) : "none") << ","
        << (has_root(row.op) ? opts.root : -1);
    for (auto* t : {&row.out_of_place, &row.in_place}) {
      if (t->valid)
        out << "," << t->mean_us << "," << t->median_us << "," << t->max_us
            << "," << t->algbw << "," << t->busbw << "," << t->wrong;
      else
        out << ",,,,,,";
    }
    auto model = opts.copy_model ? opts.copy.model_busbw(opts.ranks) : 0.0;
    out << ",";
    if (model > 0) out << model;
    out << ",";
    if (model > 0 && row.out_of_place.valid)
      out << copy_fraction(row.out_of_place, opts);
    out << "\n";
  }
  out.close();
  return !out.fail();
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
          << (opts.procs ? "processes" : "threads") << "), out-of-place"
          << (opts.backend != "gloo" ? ", direct on " + opts.backend : "")
          << "'\n"
          << "set logscale x 2\nset format x '%.0b%B'\n"
          << "set xlabel 'size (bytes)'\nset ylabel 'busbw (GB/s)'\n"
          << "set key top left\nset grid\nplot ";
      for (size_t i = 0; i < paths.size(); ++i)
        out << (i ? ", " : "") << "'" << data << "' index " << i
            << " using 1:2 with linespoints title '" << paths[i] << "'";
      if (auto model =
            opts.copy_model ? opts.copy.model_busbw(opts.ranks) : 0.0;
          model > 0 && !paths.empty())
        out << ", " << model << " with lines dashtype 2 title 'copy model'";
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
