// Property-based test of the imperative API: random shapes (negative
// extents, products that wrap, huge counts, size_t(-k)), dtypes and reduce
// ops (also values outside their enums), roots and peers (also out of
// range), counts vectors (wrong lengths, sums that wrap), buffer sizes
// (right, too small, too big) and null data pointers, fed to every
// operation in its blocking form, its _async form, as a group method and
// (collectives) as a persistent op prepared and run once.
//
// Every rank draws the same call from the same PRNG stream, and the test
// predicts from its own model of the documented rules (docs/api.md) what
// each rank must get. Calls the ranks would not all refuse alike (a root's
// output only the root checks, sizes that differ between a send and its
// recv) are redrawn, so every call ends on every rank either in the right
// result (checked against a reference), or in `invalid_argument` with
// nothing written; `unsupported` (CUDA views on Gloo) and `mismatch`
// (allgatherv / alltoallv counts that disagree) where documented. After
// every call the group must still reduce correctly.
//
// A failure names the seed and the case. To replay one case:
//   CAF_COLLECTIVE_PROPERTY_SEED=<seed> CAF_COLLECTIVE_PROPERTY_CASE=<case>
// A crash prints the call each rank was making before the usual report.
#include <atomic>
#include <barrier>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>

#include <unistd.h>

#include "test_support.hpp"

namespace col = caf_collective;
using namespace std::chrono_literals;
using test::rank_log;

namespace {

using u128 = unsigned __int128;

constexpr size_t size_max = std::numeric_limits<size_t>::max();
constexpr size_t int64_max = size_t{std::numeric_limits<int64_t>::max()};
constexpr int max_world = 3;
/// The longest per-op deadline accepted (24 h); longer ones are refused.
constexpr int64_t max_timeout_ms = 24 * 3600 * 1000;
/// Views larger than this are backed by 64 bytes only: calls on them must
/// be refused (the test never issues a call it predicts to succeed on one).
constexpr size_t max_backed_bytes = size_t{1} << 20;

// -- seed and case selection --------------------------------------------------

uint64_t base_seed() {
  if (const char* env = std::getenv("CAF_COLLECTIVE_PROPERTY_SEED");
      env && *env)
    return std::strtoull(env, nullptr, 0);
  return 0xc0ffee2024;
}

std::optional<size_t> only_case() {
  if (const char* env = std::getenv("CAF_COLLECTIVE_PROPERTY_CASE");
      env && *env)
    return static_cast<size_t>(std::strtoull(env, nullptr, 0));
  return std::nullopt;
}

// -- crash report: what each rank was calling ---------------------------------

char crash_notes[max_world][2048];
struct sigaction previous_actions[NSIG];

extern "C" void on_fatal_signal(int sig) {
  for (auto& note : crash_notes) {
    size_t len = strnlen(note, sizeof note);
    if (len == 0) continue;
    static const char prefix[] = "\n[test_property] crashed during: ";
    [[maybe_unused]] auto a = ::write(2, prefix, sizeof prefix - 1);
    [[maybe_unused]] auto b = ::write(2, note, len);
  }
  [[maybe_unused]] auto c = ::write(2, "\n", 1);
  sigaction(sig, &previous_actions[sig], nullptr);
  raise(sig);
}

void install_crash_report() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) {
    struct sigaction action {};
    action.sa_handler = on_fatal_signal;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, &previous_actions[sig]);
  }
}

void note_call(int rank, const std::string& what) {
  auto& note = crash_notes[rank];
  std::snprintf(note, sizeof note, "%s", what.c_str());
}

// -- random numbers
// ------------------------------------------------------------

struct rng_t {
  std::mt19937_64 gen;

  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(gen() % n); }

  bool chance(double p) {
    return static_cast<double>(gen() >> 11) * 0x1p-53 < p;
  }

  template<class T, size_t N>
  T pick(const T (&xs)[N]) {
    return xs[below(N)];
  }
};

// -- the test's own model of views
// ---------------------------------------------

// Element widths and integer-ness of the eight dtypes, by raw value.
constexpr size_t widths[8] = {1, 1, 4, 8, 2, 2, 4, 8};

bool valid_type(uint8_t t) {
  return t < 8;
}

bool integral_type(uint8_t t) {
  return t < 4;
}

/// A view as drawn: raw dtype, either a 1-D count (the size_t constructor)
/// or a shape, and whether its data pointer is null.
struct vspec {
  uint8_t type = 0;
  bool by_count = true;
  size_t count = 0;
  col::shape_type shape;
  bool null_data = false;
};

/// What the documented rules make of a view: whether it describes memory,
/// its element count and byte size (exact arithmetic, no wrapping).
struct vmodel {
  bool well_formed = false;
  size_t numel = 0;
  size_t bytes = 0;
};

vmodel model_of(const vspec& v) {
  vmodel bad;
  if (!valid_type(v.type)) return bad;
  col::shape_type shape = v.shape;
  if (v.by_count) {
    if (v.count > int64_max) return bad;
    shape = {static_cast<int64_t>(v.count)};
  }
  bool empty = false;
  for (auto e : shape) {
    if (e < 0) return bad;
    empty = empty || e == 0;
  }
  if (empty) return {true, 0, 0};
  u128 n = 1;
  for (auto e : shape) {
    n *= static_cast<u128>(e);
    if (n > size_max) return bad;
  }
  u128 bytes = n * widths[v.type];
  if (bytes > size_max) return bad;
  return {true, static_cast<size_t>(n), static_cast<size_t>(bytes)};
}

/// Well-formed, and no null pointer with elements.
bool good_buffer(const vspec& v) {
  auto m = model_of(v);
  return m.well_formed && !(v.null_data && m.numel > 0);
}

bool backed(const vspec& v) {
  auto m = model_of(v);
  return m.well_formed && m.bytes <= max_backed_bytes;
}

std::string describe(const vspec& v) {
  std::string s = "{";
  if (valid_type(v.type))
    s += std::string{col::to_string(static_cast<col::dtype>(v.type))};
  else
    s += "dtype " + std::to_string(int{v.type});
  if (v.by_count)
    s += " count " + std::to_string(v.count);
  else
    s += " shape " + col::to_string(v.shape);
  if (v.null_data) s += " null";
  return s + "}";
}

// -- drawing views
// ---------------------------------------------------------------

enum class pert : uint8_t {
  right,
  smaller,
  bigger,
  zero,
  null,
  malformed,
  huge,
  bad_dtype,
  other_dtype,
};

/// How one buffer deviates from its right size; drawn once per call and
/// applied to every rank's right size (which differs by rank for the v
/// forms), so every rank makes the same mistake.
struct perturb {
  pert kind = pert::right;
  size_t delta = 1;
  int variant = 0;
  int style = 0;
  uint8_t bad_type = 77;
};

perturb draw_perturb(rng_t& r, double wrong) {
  perturb p;
  p.style = static_cast<int>(r.below(6));
  p.delta = 1 + r.below(3);
  p.variant = static_cast<int>(r.below(64));
  p.bad_type = static_cast<uint8_t>(8 + r.below(248));
  if (!r.chance(wrong)) return p;
  constexpr pert kinds[] = {pert::smaller,   pert::bigger,      pert::zero,
                            pert::null,      pert::malformed,   pert::huge,
                            pert::bad_dtype, pert::other_dtype, pert::smaller,
                            pert::bigger};
  p.kind = r.pick(kinds);
  return p;
}

/// A right-sized view of `count` elements in one of several shapes.
vspec sized(uint8_t type, size_t count, int style) {
  vspec v;
  v.type = type;
  if (style == 0 || count > int64_max) {
    v.by_count = true;
    v.count = count;
    return v;
  }
  v.by_count = false;
  auto e = static_cast<int64_t>(count);
  switch (style) {
    case 1: v.shape = {e}; break;
    case 2: {
      int64_t a = e > 0 && e % 2 == 0 ? 2 : e > 0 && e % 3 == 0 ? 3 : 1;
      v.shape = {a, e / a};
      break;
    }
    case 3: v.shape = {1, e, 1}; break;
    case 4: v.shape = e == 1 ? col::shape_type{} : col::shape_type{e}; break;
    default:
      // No elements even though the other extents multiply past size_t.
      v.shape = e == 0 ? col::shape_type{int64_t{1} << 40, 0, int64_t{1} << 40}
                       : col::shape_type{e, 1};
      break;
  }
  return v;
}

vspec malformed_view(uint8_t type, int variant) {
  vspec v;
  v.type = type;
  auto shape = [&](col::shape_type s) {
    v.by_count = false;
    v.shape = std::move(s);
    return v;
  };
  auto count = [&](size_t n) {
    v.by_count = true;
    v.count = n;
    return v;
  };
  constexpr int64_t big = std::numeric_limits<int64_t>::max();
  switch (variant % 12) {
    case 0: return count(size_max);      // size_t(-1)
    case 1: return count(size_max - 4);  // size_t(-5)
    case 2: return count(int64_max + 1); // 2^63
    case 3: return shape({-1});
    case 4: return shape({2, -3});
    case 5: return shape({-1, 0}); // negative beats empty
    case 6: return shape({int64_t{1} << 32, int64_t{1} << 32}); // 2^64
    case 7: return shape({int64_t{1} << 40, int64_t{1} << 30, 3});
    case 8: return shape({big, 2});
    case 9: return shape({int64_t{1} << 62, 2}); // bytes overflow unless 1 B
    case 10: return shape({0, -5});
    default: return count(size_max - 1 - static_cast<size_t>(variant));
  }
}

/// Well-formed views (mostly) far larger than any buffer of the test.
vspec huge_view(uint8_t type, int variant) {
  vspec v;
  v.type = type;
  switch (variant % 5) {
    case 0: v.count = int64_max; break;
    case 1: v.count = size_t{1} << 62; break;
    case 2: v.count = (size_t{1} << 40) + 3; break;
    case 3: v.count = size_t{1} << 33; break;
    default:
      v.by_count = false;
      v.shape = {int64_t{1} << 31, int64_t{1} << 31};
      break;
  }
  return v;
}

vspec apply(const perturb& p, uint8_t type, size_t right) {
  size_t n = right;
  uint8_t t = type;
  bool null = false;
  switch (p.kind) {
    case pert::right: break;
    case pert::smaller:
      n = right >= p.delta ? right - p.delta : right + p.delta;
      break;
    case pert::bigger: n = right + p.delta; break;
    case pert::zero: n = 0; break;
    case pert::null: null = true; break;
    case pert::malformed: return malformed_view(type, p.variant);
    case pert::huge: return huge_view(type, p.variant);
    case pert::bad_dtype: t = p.bad_type; break;
    case pert::other_dtype:
      t = static_cast<uint8_t>((type + 1 + p.variant % 7) % 8);
      break;
  }
  auto v = sized(t, n, p.style);
  v.null_data = null;
  return v;
}

/// An off-root buffer the op does not use: empty, sometimes null.
vspec empty_view(uint8_t type, bool null) {
  vspec v;
  v.type = type;
  v.null_data = null;
  return v;
}

// -- calls
// -------------------------------------------------------------------------

enum class op : uint8_t {
  p2p, // every rank sends to rank + shift and receives from rank - shift
  broadcast,
  reduce,
  allreduce,
  allgather,
  allgatherv,
  gather,
  scatter,
  reduce_scatter,
  alltoall,
  alltoallv,
  barrier,
};

constexpr const char* op_names[] = {
  "send/recv",      "broadcast",  "reduce",    "allreduce",
  "allgather",      "allgatherv", "gather",    "scatter",
  "reduce_scatter", "alltoall",   "alltoallv", "barrier",
};

enum class form : uint8_t { blocking, async, method, persistent };

constexpr const char* form_names[] = {"blocking", "async", "group method",
                                      "persistent op"};

enum class outcome : uint8_t { success, invalid, unsupported, mismatch };

constexpr const char* outcome_names[] = {"success", "invalid_argument",
                                         "unsupported", "mismatch"};

/// Whether a form calls the group object (its method or a persistent op),
/// where the in-place forms take the root from the options only.
bool on_group_form(form how) {
  return how == form::method || how == form::persistent;
}

/// One call as every rank draws it, with every rank's arguments.
struct call {
  op kind = op::barrier;
  form how = form::blocking;
  form recv_how = form::blocking; // p2p: how the receive is made
  bool in_place = false;
  bool cuda = false;
  int world = 0;
  std::vector<vspec> in;  // per rank
  std::vector<vspec> out; // per rank (unused when in place)
  int root = 0;
  /// opts.root (broadcast, reduce: default 0) or opts.peer (send, recv:
  /// default -1) of the free in-place forms, which also take it as argument.
  int option_root = 0;
  std::vector<int> dst; // p2p, per rank
  std::vector<int> src;
  uint32_t tag = 0;
  uint8_t rop = 0;
  uint8_t algo = 0;
  int64_t timeout_ms = 0;
  std::vector<std::vector<size_t>> counts;      // allgatherv, per rank
  std::vector<std::vector<size_t>> send_counts; // alltoallv, per rank
  std::vector<std::vector<size_t>> recv_counts;
};

const vspec& out_of(const call& c, int r) {
  return c.in_place ? c.in[r] : c.out[r];
}

std::string describe(const std::vector<size_t>& xs) {
  std::string s = "{";
  for (size_t i = 0; i < xs.size(); ++i)
    s += (i > 0 ? ", " : "") + std::to_string(xs[i]);
  return s + "}";
}

std::string describe(const call& c, int rank) {
  std::string s = std::string{op_names[static_cast<int>(c.kind)]} + " (" +
                  form_names[static_cast<int>(c.how)];
  if (c.kind == op::p2p)
    s += std::string{" send, "} + form_names[static_cast<int>(c.recv_how)] +
         " recv";
  s += std::string{c.in_place ? ", in place" : ""} + ") world " +
       std::to_string(c.world) + " rank " + std::to_string(rank) + ":";
  if (c.kind != op::barrier) {
    s += " in " + describe(c.in[rank]);
    if (!c.in_place) s += " out " + describe(c.out[rank]);
  }
  switch (c.kind) {
    case op::p2p:
      s += " dst " + std::to_string(c.dst[rank]) + " src " +
           std::to_string(c.src[rank]) + " opts.peer " +
           std::to_string(c.option_root) + " tag " + std::to_string(c.tag);
      break;
    case op::broadcast:
    case op::reduce:
    case op::gather:
    case op::scatter:
      s += " root " + std::to_string(c.root);
      if (c.in_place) s += " opts.root " + std::to_string(c.option_root);
      break;
    case op::allgatherv: s += " counts " + describe(c.counts[rank]); break;
    case op::alltoallv:
      s += " send_counts " + describe(c.send_counts[rank]) + " recv_counts " +
           describe(c.recv_counts[rank]);
      break;
    default: break;
  }
  if (c.kind == op::reduce || c.kind == op::allreduce ||
      c.kind == op::reduce_scatter)
    s += " op " + std::to_string(int{c.rop});
  if (c.kind == op::allreduce) s += " algorithm " + std::to_string(int{c.algo});
  if (c.timeout_ms != 0)
    s += " timeout " + std::to_string(c.timeout_ms) + " ms";
  if (c.cuda) s += " on cuda:0";
  return s;
}

// -- drawing calls
// --------------------------------------------------------------------

int draw_rank(rng_t& r, int n) {
  if (r.chance(0.88)) return static_cast<int>(r.below(static_cast<size_t>(n)));
  const int odd[] = {-1, -2, n, n + 1, INT_MAX, INT_MIN};
  return r.pick(odd);
}

size_t draw_base(rng_t& r) {
  auto k = r.below(100);
  if (k < 10) return 0;
  if (k < 22) return 1;
  if (k < 75) return 2 + r.below(40);
  if (k < 95) return 40 + r.below(1000);
  return 1000 + r.below(20000);
}

size_t draw_small_count(rng_t& r) {
  return r.chance(0.15) ? 0 : 1 + r.below(30);
}

size_t draw_huge_count(rng_t& r) {
  const size_t huge[] = {size_max,        size_max - 1,    size_max - 7,
                         int64_max + 1,   size_t{1} << 62, size_t{1} << 61,
                         size_t{1} << 40, int64_max};
  return r.pick(huge);
}

size_t wrapping_sum(const std::vector<size_t>& xs) {
  size_t s = 0;
  for (auto x : xs)
    s += x; // wraps on purpose: the "right" size of a wrong call
  return s;
}

call draw_common(rng_t& r, int n, op kind) {
  call c;
  c.kind = kind;
  c.world = n;
  // Point-to-point ops have no persistent form.
  c.how = static_cast<form>(r.below(kind == op::p2p ? 3 : 4));
  c.recv_how = static_cast<form>(r.below(3));
  c.cuda = kind != op::barrier && r.chance(0.02);
  c.rop = r.chance(0.92) ? static_cast<uint8_t>(r.below(8))
                         : static_cast<uint8_t>(8 + r.below(248));
  c.algo = r.chance(0.75)  ? 0
           : r.chance(0.8) ? static_cast<uint8_t>(1 + r.below(5))
                           : static_cast<uint8_t>(6 + r.below(250));
  auto t = r.below(100);
  const int64_t beyond[] = {max_timeout_ms + 1, int64_t{10'000'000'000'000},
                            std::numeric_limits<int64_t>::max()};
  const int64_t negative[] = {-1, -1000, std::numeric_limits<int64_t>::min()};
  c.timeout_ms = t < 93   ? 0
                 : t < 95 ? 4000
                 : t < 96 ? max_timeout_ms
                 : t < 98 ? r.pick(negative)
                          : r.pick(beyond);
  c.root = draw_rank(r, n);
  c.option_root = r.chance(0.9) ? 0 : r.chance(0.5) ? c.root : draw_rank(r, n);
  c.tag = static_cast<uint32_t>(r.gen());
  c.in.resize(static_cast<size_t>(n));
  c.out.resize(static_cast<size_t>(n));
  return c;
}

/// Fills in and out of every rank from the right sizes, applying one
/// perturbation per buffer (the same on every rank).
void size_buffers(rng_t& r, call& c, uint8_t type,
                  const std::vector<size_t>& in_right,
                  const std::vector<size_t>& out_right, double wrong) {
  auto pin = draw_perturb(r, wrong);
  auto pout = r.chance(0.15) ? pin : draw_perturb(r, wrong);
  for (int q = 0; q < c.world; ++q) {
    c.in[q] = apply(pin, type, in_right[q]);
    c.out[q] = apply(pout, type, out_right[q]);
  }
}

call draw_call(rng_t& r, int n, op kind) {
  auto c = draw_common(r, n, kind);
  auto type = static_cast<uint8_t>(r.below(8));
  auto m = draw_base(r);
  auto w = static_cast<size_t>(n);
  std::vector<size_t> same(w, m);
  std::vector<size_t> times_n(w, m * w);
  constexpr double wrong = 0.3;
  // Off the root, an unused buffer may be empty (and null).
  bool off_root_empty = r.chance(0.3);
  bool off_root_null = r.chance(0.5);
  auto empty_off_root = [&](std::vector<vspec>& xs) {
    if (!off_root_empty) return;
    for (int q = 0; q < n; ++q)
      if (q != c.root) xs[q] = empty_view(xs[q].type, off_root_null);
  };
  switch (kind) {
    case op::p2p: {
      int shift = r.chance(0.9) ? 1 + static_cast<int>(r.below(w - 1)) : 0;
      bool absolute = r.chance(0.06);
      int peer = draw_rank(r, n);
      c.dst.resize(w);
      c.src.resize(w);
      for (int q = 0; q < n; ++q) {
        c.dst[q] = absolute ? peer : (q + shift) % n;
        c.src[q] = absolute ? peer : (q - shift + n) % n;
      }
      c.option_root = r.chance(0.92) ? -1 : draw_rank(r, n);
      // Mostly the same deviation on both sides: sizes that differ between
      // a send and its recv are a disagreement (a timeout), redrawn.
      auto pin = draw_perturb(r, 0.3);
      auto pout = r.chance(0.8) ? pin : draw_perturb(r, 0.3);
      for (int q = 0; q < n; ++q) {
        c.in[q] = apply(pin, type, m);
        c.out[q] = apply(pout, type, m);
      }
      break;
    }
    case op::broadcast:
    case op::reduce:
    case op::allreduce:
      c.in_place = r.chance(0.5);
      size_buffers(r, c, type, same, same, wrong);
      if (!c.in_place && kind == op::broadcast) empty_off_root(c.in);
      if (!c.in_place && kind == op::reduce) empty_off_root(c.out);
      break;
    case op::allgather: size_buffers(r, c, type, same, times_n, wrong); break;
    case op::gather:
      size_buffers(r, c, type, same, times_n, wrong);
      empty_off_root(c.out);
      break;
    case op::scatter:
      size_buffers(r, c, type, times_n, same, wrong);
      empty_off_root(c.in);
      break;
    case op::reduce_scatter:
      size_buffers(r, c, type, times_n, same, wrong);
      break;
    case op::alltoall: size_buffers(r, c, type, times_n, times_n, wrong); break;
    case op::allgatherv: {
      std::vector<size_t> counts(w);
      for (auto& x : counts)
        x = draw_small_count(r);
      c.counts.assign(w, counts);
      auto mode = r.below(100);
      if (mode < 8) {
        // Wrong length, the same on every rank.
        const size_t lengths[] = {0, w - 1, w + 1};
        auto len = r.pick(lengths);
        for (auto& xs : c.counts)
          xs.resize(len, 3);
      } else if (mode < 20) {
        // A huge entry: sums that wrap, or that overflow in bytes.
        auto at = r.below(w);
        auto huge = draw_huge_count(r);
        for (auto& xs : c.counts)
          xs[at] = huge;
      } else if (mode < 32) {
        // One rank believes other counts (its own buffers fit them).
        auto who = r.below(w);
        auto a = r.below(w);
        auto b = r.below(w);
        auto d = 1 + r.below(3);
        c.counts[who][a] += d;
        if (a != b && c.counts[who][b] >= d && r.chance(0.5))
          c.counts[who][b] -= d; // same total, other split
      }
      std::vector<size_t> in_right(w);
      std::vector<size_t> out_right(w);
      for (size_t q = 0; q < w; ++q) {
        in_right[q] = q < c.counts[q].size() ? c.counts[q][q] : m;
        out_right[q] = wrapping_sum(c.counts[q]);
      }
      size_buffers(r, c, type, in_right, out_right, 0.15);
      break;
    }
    case op::alltoallv: {
      // matrix[i][j]: elements rank i sends to rank j.
      std::vector<std::vector<size_t>> matrix(w, std::vector<size_t>(w));
      for (auto& row : matrix)
        for (auto& x : row)
          x = draw_small_count(r);
      c.send_counts.assign(w, {});
      c.recv_counts.assign(w, {});
      for (size_t q = 0; q < w; ++q) {
        c.send_counts[q] = matrix[q];
        for (size_t i = 0; i < w; ++i)
          c.recv_counts[q].push_back(matrix[i][q]);
      }
      auto mode = r.below(100);
      if (mode < 8) {
        const size_t lengths[] = {0, w - 1, w + 1};
        auto len = r.pick(lengths);
        auto& target = r.chance(0.5) ? c.send_counts : c.recv_counts;
        for (auto& xs : target)
          xs.resize(len, 2);
      } else if (mode < 20) {
        auto huge = draw_huge_count(r);
        bool both = r.chance(0.5);
        for (size_t q = 0; q < w; ++q) {
          c.send_counts[q][(q + 1) % w] = huge;
          if (both) c.recv_counts[(q + 1) % w][q] = huge;
        }
      } else if (mode < 32) {
        // Rank `who` expects more or fewer elements from `from` than sent.
        auto who = r.below(w);
        auto from = r.below(w);
        auto& x = c.recv_counts[who][from];
        auto d = 1 + r.below(3);
        x = x >= d && r.chance(0.5) ? x - d : x + d;
      }
      std::vector<size_t> in_right(w);
      std::vector<size_t> out_right(w);
      for (size_t q = 0; q < w; ++q) {
        in_right[q] = wrapping_sum(c.send_counts[q]);
        out_right[q] = wrapping_sum(c.recv_counts[q]);
      }
      size_buffers(r, c, type, in_right, out_right, 0.15);
      break;
    }
    case op::barrier: break;
  }
  return c;
}

/// Views whose element count times the world size wraps around size_t to a
/// small number: allgather's and gather's input, scatter's output.
call draw_wrapping_call(rng_t& r, int n) {
  const op kinds[] = {op::allgather, op::gather, op::scatter};
  auto c = draw_common(r, n, r.pick(kinds));
  c.cuda = false;
  c.timeout_ms = 0;
  c.root = static_cast<int>(r.below(static_cast<size_t>(n)));
  const uint8_t types[] = {0, 1, 4, 5}; // 1- and 2-byte elements
  auto type = r.pick(types);
  // huge * n == small (mod 2^64).
  auto w = static_cast<u128>(n);
  size_t small = 0;
  size_t huge = 0;
  for (;;) {
    small = r.below(64);
    auto total = (u128{1} << 64) + small;
    if (total % w == 0) {
      huge = static_cast<size_t>(total / w);
      if (huge <= int64_max) break;
    }
  }
  bool as_shape = r.chance(0.5) && huge % 2 == 0;
  auto huge_view_of = [&] {
    vspec v;
    v.type = type;
    if (as_shape) {
      v.by_count = false;
      v.shape = {2, static_cast<int64_t>(huge / 2)};
    } else {
      v.count = huge;
    }
    return v;
  };
  for (int q = 0; q < n; ++q) {
    if (c.kind == op::scatter) {
      c.in[q] = sized(type, small, 0);
      c.out[q] = huge_view_of();
    } else {
      c.in[q] = huge_view_of();
      c.out[q] = sized(type, small, 0);
    }
  }
  return c;
}

// -- the model: what each rank must get
// ---------------------------------------------

bool defined_op(uint8_t rop, uint8_t type) {
  return rop < 8 && valid_type(type) && (rop < 5 || integral_type(type));
}

bool rank_ok(int x, int n) {
  return x >= 0 && x < n;
}

// The suite's Gloo groups time out after this; a forced legacy algorithm
// (ring, ring_chunked, halving_doubling: 1 to 3) waits with it and refuses
// an op timeout of another length.
constexpr int64_t group_timeout_ms = 5000;

bool legacy_keeps_timeout(const call& c, int n) {
  bool legacy = c.algo >= 1 && c.algo <= 3;
  return !legacy || n == 1 || c.timeout_ms == 0 ||
         c.timeout_ms == group_timeout_ms;
}

/// Sum of `counts` of `type` elements, if it fits in size_t elements and
/// bytes.
std::optional<size_t> fitting_sum(const std::vector<size_t>& counts,
                                  uint8_t type) {
  u128 sum = 0;
  for (auto x : counts)
    sum += x;
  if (sum > size_max || sum * widths[type] > size_max) return std::nullopt;
  return static_cast<size_t>(sum);
}

/// Whether rank `r`'s own arguments pass the documented checks.
bool timeout_ok(const call& c) {
  return c.timeout_ms >= 0 && c.timeout_ms <= max_timeout_ms;
}

bool locally_valid(const call& c, int r) {
  if (!timeout_ok(c)) return false;
  int n = c.world;
  auto w = static_cast<u128>(n);
  const auto& in = c.in[r];
  const auto& out = out_of(c, r);
  auto mi = model_of(in);
  auto mo = model_of(out);
  bool same_type = in.type == out.type;
  switch (c.kind) {
    case op::p2p: {
      // Both of the rank's calls; the caller requires them to agree.
      bool free_send = c.how != form::method;
      if (free_send && c.option_root != -1 && c.option_root != c.dst[r])
        return false;
      return rank_ok(c.dst[r], n) && c.dst[r] != r && good_buffer(in);
    }
    case op::broadcast:
      if (c.in_place && !on_group_form(c.how) && c.option_root != 0 &&
          c.option_root != c.root)
        return false;
      if (!rank_ok(c.root, n) || !good_buffer(out) || !mi.well_formed)
        return false;
      if (r != c.root && mi.numel == 0) return true;
      return good_buffer(in) && same_type && mo.numel == mi.numel;
    case op::reduce:
      if (c.in_place && !on_group_form(c.how) && c.option_root != 0 &&
          c.option_root != c.root)
        return false;
      if (!rank_ok(c.root, n) || !good_buffer(in) || !mo.well_formed ||
          !defined_op(c.rop, in.type))
        return false;
      if (r != c.root && mo.numel == 0) return true;
      return good_buffer(out) && same_type && mo.numel == mi.numel;
    case op::allreduce:
      return c.algo <= 5 && good_buffer(in) && good_buffer(out) && same_type &&
             defined_op(c.rop, in.type) && mo.numel == mi.numel &&
             legacy_keeps_timeout(c, n);
    case op::allgather:
      return good_buffer(in) && good_buffer(out) && same_type &&
             u128{mo.numel} == u128{mi.numel} * w;
    case op::allgatherv: {
      const auto& counts = c.counts[r];
      if (counts.size() != static_cast<size_t>(n) || !good_buffer(in) ||
          !good_buffer(out) || !same_type)
        return false;
      auto sum = fitting_sum(counts, in.type);
      return sum && mi.numel == counts[r] && mo.numel == *sum;
    }
    case op::gather:
      if (!rank_ok(c.root, n) || !good_buffer(in) || !mo.well_formed)
        return false;
      if (r != c.root && mo.numel == 0) return true;
      return good_buffer(out) && same_type &&
             u128{mo.numel} == u128{mi.numel} * w;
    case op::scatter:
      if (!rank_ok(c.root, n) || !good_buffer(out) || !mi.well_formed)
        return false;
      if (r != c.root && mi.numel == 0) return true;
      return good_buffer(in) && same_type &&
             u128{mi.numel} == u128{mo.numel} * w;
    case op::reduce_scatter:
      return good_buffer(in) && good_buffer(out) && same_type &&
             defined_op(c.rop, in.type) && mi.numel % n == 0 &&
             mo.numel == mi.numel / n;
    case op::alltoall:
      return good_buffer(in) && good_buffer(out) && same_type &&
             mo.numel == mi.numel && mi.numel % n == 0;
    case op::alltoallv: {
      const auto& sc = c.send_counts[r];
      const auto& rc = c.recv_counts[r];
      if (sc.size() != static_cast<size_t>(n) ||
          rc.size() != static_cast<size_t>(n) || !good_buffer(in) ||
          !good_buffer(out) || !same_type)
        return false;
      // What a rank sends itself it must receive from itself.
      if (sc[r] != rc[r]) return false;
      auto sent = fitting_sum(sc, in.type);
      auto received = fitting_sum(rc, in.type);
      return sent && received && mi.numel == *sent && mo.numel == *received;
    }
    case op::barrier: return true;
  }
  return false;
}

/// The p2p receive of rank `r` (its form may differ from the send's).
bool recv_locally_valid(const call& c, int r) {
  if (!timeout_ok(c)) return false;
  bool free_recv = c.recv_how != form::method;
  if (free_recv && c.option_root != -1 && c.option_root != c.src[r])
    return false;
  return rank_ok(c.src[r], c.world) && c.src[r] != r && good_buffer(c.out[r]);
}

/// What every rank must get, or nothing when the ranks would not all
/// refuse alike or would disagree beyond what the library detects: such
/// calls are redrawn.
std::optional<outcome> predict(const call& c) {
  int n = c.world;
  std::vector<bool> ok(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    ok[r] = locally_valid(c, r);
    if (c.kind == op::p2p && recv_locally_valid(c, r) != ok[r])
      return std::nullopt;
    if (ok[r] != ok[0]) return std::nullopt;
  }
  if (!ok[0]) return outcome::invalid;
  // Every rank goes ahead. Never touch memory the test does not own.
  for (int r = 0; r < n && c.kind != op::barrier; ++r)
    if (!backed(c.in[r]) || !backed(out_of(c, r))) return std::nullopt;
  if (c.cuda) return outcome::unsupported;
  switch (c.kind) {
    case op::p2p:
      // A send and its receive must move the same bytes.
      for (int r = 0; r < n; ++r)
        if (model_of(c.in[r]).bytes != model_of(c.out[c.dst[r]]).bytes)
          return std::nullopt;
      return outcome::success;
    case op::allgatherv:
      for (int r = 1; r < n; ++r)
        if (c.counts[r] != c.counts[0]) return outcome::mismatch;
      return outcome::success;
    case op::alltoallv:
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          if (c.send_counts[i][j] != c.recv_counts[j][i])
            return outcome::mismatch;
      return outcome::success;
    default: return outcome::success;
  }
}

// -- buffers
// -----------------------------------------------------------------------------

struct buffer {
  std::vector<uint64_t> mem;
  size_t bytes = 0; // what the test owns behind the view
  col::tensor_view view;

  void* base() { return mem.data(); }
};

buffer make_buffer(const vspec& v, bool cuda) {
  buffer b;
  b.bytes = backed(v) ? model_of(v).bytes : 64;
  b.mem.assign(b.bytes / 8 + 2, 0xa5a5a5a5a5a5a5a5ull);
  void* data = v.null_data ? nullptr : b.mem.data();
  auto dev = cuda ? col::device::cuda(0) : col::device::cpu();
  auto type = static_cast<col::dtype>(v.type);
  b.view = v.by_count ? col::tensor_view{data, type, v.count, dev}
                      : col::tensor_view{data, type, v.shape, dev};
  return b;
}

/// Whether the test may write the view's elements (inputs it fills).
bool fillable(const vspec& v) {
  return backed(v) && !v.null_data && model_of(v).numel > 0;
}

col::tensor_view host_view(const vspec& v, buffer& b) {
  auto m = model_of(v);
  return col::tensor_view{b.base(), static_cast<col::dtype>(v.type), m.numel};
}

// -- running one call
// ------------------------------------------------------------------------

struct stats {
  size_t cases = 0;
  size_t redrawn = 0;
  size_t by_outcome[4] = {0, 0, 0, 0};
  size_t by_op[12] = {};
  /// Refused and run calls of each form, collectives only.
  size_t refused_by_form[4] = {};
  size_t run_by_form[4] = {};
};

struct runner {
  const std::string& name;
  col::group_ptr g;
  int rank;
  rank_log& log;
  std::string what; // "seed S case K: <call>"

  col::milliseconds timeout_of(const call& c) const {
    return col::milliseconds{c.timeout_ms};
  }

  // The error of a call in form `how`; checks that a refused call's work
  // completed at once.
  template<class Blocking, class Async>
  caf::error perform(form how, bool refused, Blocking&& blocking,
                     Async&& async) {
    if (how == form::blocking) {
      try {
        blocking();
        return {};
      } catch (const col::collective_error& e) {
        return e.error();
      } catch (const std::exception& e) {
        return col::make_error(col::errc::backend_error,
                               std::string{"non-collective exception: "} +
                                 e.what());
      }
    }
    col::work w = async();
    if (refused && !w.ready())
      log.fail(what + ": a refused call's work did not complete at once");
    return w.wait();
  }

  void expect_code(const caf::error& err, outcome expected,
                   const char* which = "") {
    auto shown = std::string{which} + (err ? col::render(err) : "success");
    switch (expected) {
      case outcome::success:
        if (err) log.fail(what + ": expected success, got " + shown);
        break;
      default: {
        auto code = expected == outcome::invalid ? col::errc::invalid_argument
                    : expected == outcome::unsupported ? col::errc::unsupported
                                                       : col::errc::mismatch;
        if (!err)
          log.fail(what + ": expected " +
                   outcome_names[static_cast<int>(expected)] + ", got success" +
                   which);
        else if (col::code_of(err) != code)
          log.fail(what + ": expected " +
                   outcome_names[static_cast<int>(expected)] + ", got " +
                   shown);
      }
    }
  }

  // A group method (form method), or the same call prepared as a
  // persistent op and run once (form persistent): a call refused at
  // preparation must come back refused, with nothing run.
  template<class Method, class Prepare>
  col::work on_group(form how, Method&& method, Prepare&& prepare) {
    if (how != form::persistent) return method();
    auto op = prepare();
    if (!op) return col::work::completed(0, op.error());
    return col::work::completed(0, op->run());
  }

  caf::error run(const call& c, outcome expected, buffer& in, buffer& out) {
    bool refused = expected == outcome::invalid;
    const auto& iv = in.view;
    const auto& ov = c.in_place ? in.view : out.view;
    auto t = timeout_of(c);
    auto rop = static_cast<col::reduce_op>(c.rop);
    switch (c.kind) {
      case op::p2p: return run_p2p(c, expected, in, out);
      case op::broadcast: {
        col::broadcast_options o;
        o.timeout = t;
        if (c.in_place) {
          o.root = c.option_root;
          return perform(
            c.how, refused, [&] { col::broadcast(iv, c.root, name, o); },
            [&] {
              if (c.how == form::async)
                return col::broadcast_async(iv, c.root, name, o);
              o.root = c.root;
              return on_group(
                c.how, [&] { return g->broadcast(iv, iv, o); },
                [&] { return g->prepare_broadcast(iv, iv, o); });
            });
        }
        o.root = c.root;
        return perform(
          c.how, refused, [&] { col::broadcast(iv, ov, name, o); },
          [&] {
            return on_group(
              c.how, [&] { return g->broadcast(iv, ov, o); },
              [&] { return g->prepare_broadcast(iv, ov, o); });
          });
      }
      case op::reduce: {
        col::reduce_options o;
        o.timeout = t;
        o.op = rop;
        if (c.in_place) {
          o.root = c.option_root;
          return perform(
            c.how, refused, [&] { col::reduce(iv, c.root, name, o); },
            [&] {
              if (c.how == form::async)
                return col::reduce_async(iv, c.root, name, o);
              o.root = c.root;
              return on_group(
                c.how, [&] { return g->reduce(iv, iv, o); },
                [&] { return g->prepare_reduce(iv, iv, o); });
            });
        }
        o.root = c.root;
        return perform(
          c.how, refused, [&] { col::reduce(iv, ov, name, o); },
          [&] {
            return on_group(
              c.how, [&] { return g->reduce(iv, ov, o); },
              [&] { return g->prepare_reduce(iv, ov, o); });
          });
      }
      case op::allreduce: {
        col::allreduce_options o;
        o.timeout = t;
        o.op = rop;
        o.algorithm = static_cast<col::allreduce_algorithm>(c.algo);
        return perform(
          c.how, refused,
          [&] {
            if (c.in_place)
              col::allreduce(iv, name, o);
            else
              col::allreduce(iv, ov, name, o);
          },
          [&] {
            if (on_group_form(c.how))
              return on_group(
                c.how, [&] { return g->allreduce(iv, ov, o); },
                [&] { return g->prepare_allreduce(iv, ov, o); });
            return c.in_place ? col::allreduce_async(iv, name, o)
                              : col::allreduce_async(iv, ov, name, o);
          });
      }
      case op::allgather: {
        col::allgather_options o;
        o.timeout = t;
        return perform(
          c.how, refused, [&] { col::allgather(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::allgather_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->allgather(iv, ov, o); },
                         [&] { return g->prepare_allgather(iv, ov, o); });
          });
      }
      case op::allgatherv: {
        col::allgatherv_options o;
        o.timeout = t;
        o.counts = c.counts[rank];
        return perform(
          c.how, refused, [&] { col::allgatherv(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::allgatherv_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->allgatherv(iv, ov, o); },
                         [&] { return g->prepare_allgatherv(iv, ov, o); });
          });
      }
      case op::gather: {
        col::gather_options o;
        o.timeout = t;
        o.root = c.root;
        return perform(
          c.how, refused, [&] { col::gather(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::gather_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->gather(iv, ov, o); },
                         [&] { return g->prepare_gather(iv, ov, o); });
          });
      }
      case op::scatter: {
        col::scatter_options o;
        o.timeout = t;
        o.root = c.root;
        return perform(
          c.how, refused, [&] { col::scatter(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::scatter_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->scatter(iv, ov, o); },
                         [&] { return g->prepare_scatter(iv, ov, o); });
          });
      }
      case op::reduce_scatter: {
        col::reduce_scatter_options o;
        o.timeout = t;
        o.op = rop;
        return perform(
          c.how, refused, [&] { col::reduce_scatter(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::reduce_scatter_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->reduce_scatter(iv, ov, o); },
                         [&] { return g->prepare_reduce_scatter(iv, ov, o); });
          });
      }
      case op::alltoall: {
        col::alltoall_options o;
        o.timeout = t;
        return perform(
          c.how, refused, [&] { col::alltoall(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::alltoall_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->alltoall(iv, ov, o); },
                         [&] { return g->prepare_alltoall(iv, ov, o); });
          });
      }
      case op::alltoallv: {
        col::alltoallv_options o;
        o.timeout = t;
        o.send_counts = c.send_counts[rank];
        o.recv_counts = c.recv_counts[rank];
        return perform(
          c.how, refused, [&] { col::alltoallv(iv, ov, name, o); },
          [&] {
            return c.how == form::async
                     ? col::alltoallv_async(iv, ov, name, o)
                     : on_group(
                         c.how, [&] { return g->alltoallv(iv, ov, o); },
                         [&] { return g->prepare_alltoallv(iv, ov, o); });
          });
      }
      case op::barrier: {
        col::barrier_options o;
        o.timeout = t;
        return perform(
          c.how, refused, [&] { col::barrier(name, o); },
          [&] {
            return c.how == form::async
                     ? col::barrier_async(name, o)
                     : on_group(
                         c.how, [&] { return g->barrier(o); },
                         [&] { return g->prepare_barrier(o); });
          });
      }
    }
    return {};
  }

  // Every rank sends to dst and receives from src. A blocking send waits
  // for its receiver, so with blocking sends even ranks send first.
  caf::error run_p2p(const call& c, outcome expected, buffer& in, buffer& out) {
    bool refused = expected == outcome::invalid;
    col::send_options so;
    so.timeout = timeout_of(c);
    so.tag = c.tag;
    so.peer = c.option_root;
    col::recv_options ro;
    ro.timeout = so.timeout;
    ro.tag = c.tag;
    ro.peer = c.option_root;
    int dst = c.dst[rank];
    int src = c.src[rank];
    auto do_recv = [&] {
      return perform(
        c.recv_how, refused, [&] { col::recv(out.view, src, name, ro); },
        [&] {
          if (c.recv_how == form::async)
            return col::recv_async(out.view, src, name, ro);
          auto opts = ro;
          opts.peer = src;
          return g->recv(out.view, opts);
        });
    };
    caf::error sent;
    caf::error received;
    if (c.how == form::blocking) {
      auto do_send = [&] {
        return perform(
          form::blocking, refused, [&] { col::send(in.view, dst, name, so); },
          [] { return col::work{}; });
      };
      if (rank % 2 == 0) {
        sent = do_send();
        received = do_recv();
      } else {
        received = do_recv();
        sent = do_send();
      }
    } else {
      col::work w;
      if (c.how == form::async) {
        w = col::send_async(in.view, dst, name, so);
      } else {
        auto opts = so;
        opts.peer = dst;
        w = g->send(in.view, opts);
      }
      if (refused && !w.ready())
        log.fail(what + ": a refused send's work did not complete at once");
      received = do_recv();
      sent = w.wait();
    }
    expect_code(sent, expected, " (send)");
    return received;
  }
};

// -- checking results
// ------------------------------------------------------------------------

/// The expected bytes of `count` elements of rank `src`'s pattern from
/// global index `offset`.
col::tensor pattern_of(col::dtype t, size_t count, int src, size_t offset,
                       uint64_t seed) {
  auto x = test::make_tensor(t, count);
  test::fill_pattern(x, src, offset, seed);
  return x;
}

col::tensor reference_of(col::dtype t, col::reduce_op op, int world,
                         size_t first, size_t count) {
  auto x = test::make_tensor(t, count);
  for (size_t j = 0; j < count; ++j)
    test::reference_element(t, op, world, first + j, x.data(), j);
  return x;
}

bool reduces(op kind) {
  return kind == op::reduce || kind == op::allreduce ||
         kind == op::reduce_scatter;
}

void fill_inputs(const call& c, int rank, buffer& in, uint64_t seed) {
  const auto& v = c.in[rank];
  if (!fillable(v)) return;
  auto x = host_view(v, in);
  if (reduces(c.kind))
    test::fill_input(x, static_cast<col::reduce_op>(c.rop), rank);
  else
    test::fill_pattern(x, rank, 0, seed);
}

void check_result(const call& c, int rank, buffer& in, buffer& out,
                  uint64_t seed, rank_log& log, const std::string& what) {
  int n = c.world;
  auto w = static_cast<size_t>(n);
  auto type = static_cast<col::dtype>(c.in[rank].type);
  auto rop = static_cast<col::reduce_op>(c.rop);
  auto result =
    c.in_place ? host_view(c.in[rank], in) : host_view(out_of(c, rank), out);
  auto m_in = model_of(c.in[rank]).numel;
  auto m_out = result.numel();
  auto expect = [&](const std::string& part, const col::tensor_view& got,
                    const col::tensor_view& want) {
    log.expect_equal(what + ": " + part, got, want);
    ++log.checks;
  };
  switch (c.kind) {
    case op::p2p: {
      // Sender and receiver agree on bytes; their dtypes may differ.
      const auto& sent = c.in[c.src[rank]];
      auto want = pattern_of(static_cast<col::dtype>(sent.type),
                             model_of(sent).numel, c.src[rank], 0, seed);
      expect(
        "received",
        col::tensor_view{result.data(), col::dtype::uint8, result.nbytes()},
        col::tensor_view{want.data(), col::dtype::uint8, want.nbytes()});
      break;
    }
    case op::broadcast:
      expect("broadcast", result, pattern_of(type, m_out, c.root, 0, seed));
      break;
    case op::reduce:
      if (rank == c.root)
        expect("reduce", result, reference_of(type, rop, n, 0, m_out));
      break;
    case op::allreduce:
      expect("allreduce", result, reference_of(type, rop, n, 0, m_out));
      break;
    case op::reduce_scatter:
      expect(
        "reduce_scatter", result,
        reference_of(type, rop, n, static_cast<size_t>(rank) * m_out, m_out));
      break;
    case op::allgather:
      for (int j = 0; j < n; ++j)
        expect("allgather block " + std::to_string(j),
               result.slice(j * m_in, m_in),
               pattern_of(type, m_in, j, 0, seed));
      break;
    case op::gather:
      if (rank == c.root)
        for (int j = 0; j < n; ++j)
          expect("gather block " + std::to_string(j),
                 result.slice(j * m_in, m_in),
                 pattern_of(type, m_in, j, 0, seed));
      break;
    case op::scatter:
      expect("scatter", result,
             pattern_of(type, m_out, c.root, rank * m_out, seed));
      break;
    case op::alltoall: {
      auto k = m_in / w;
      for (int j = 0; j < n; ++j)
        expect("alltoall block from " + std::to_string(j),
               result.slice(j * k, k), pattern_of(type, k, j, rank * k, seed));
      break;
    }
    case op::allgatherv: {
      size_t offset = 0;
      for (int j = 0; j < n; ++j) {
        auto k = c.counts[rank][j];
        expect("allgatherv block " + std::to_string(j), result.slice(offset, k),
               pattern_of(type, k, j, 0, seed));
        offset += k;
      }
      break;
    }
    case op::alltoallv: {
      size_t offset = 0;
      for (int j = 0; j < n; ++j) {
        auto k = c.recv_counts[rank][j];
        // Rank j's segment for us starts after its segments for ranks < us.
        size_t from = 0;
        for (int q = 0; q < rank; ++q)
          from += c.send_counts[j][q];
        expect("alltoallv block from " + std::to_string(j),
               result.slice(offset, k), pattern_of(type, k, j, from, seed));
        offset += k;
      }
      break;
    }
    case op::barrier: break;
  }
}

/// Byte-wise copy of what the test owns behind both views.
struct snapshot {
  std::vector<uint64_t> in;
  std::vector<uint64_t> out;
};

// -- the driver
// -------------------------------------------------------------------------------

using drawer = std::function<call(rng_t&, int)>;

/// Runs `cases` random calls on `world` thread ranks of one group and
/// returns rank 0's statistics.
stats run_property(const std::string& name, uint64_t stream, int world,
                   size_t cases, const drawer& draw) {
  install_crash_report();
  auto seed = base_seed();
  auto only = only_case();
  INFO("seed " << seed << " (CAF_COLLECTIVE_PROPERTY_SEED), test stream "
               << stream);
  auto store = col::make_in_process_store();
  std::barrier sync{world};
  std::atomic<size_t> first_failure{size_max};
  std::vector<stats> all_stats(static_cast<size_t>(world));
  auto results = test::run_threads(world, [&](int rank, rank_log& log) {
    col::init_collective_group(
      world, rank, "gloo", name,
      test::group_options(store, col::milliseconds{group_timeout_ms}));
    runner run{name, col::get_group(name), rank, log, {}};
    auto& st = all_stats[rank];
    for (size_t k = 0; k < cases; ++k) {
      if (only && *only != k) continue;
      auto prefix =
        "seed " + std::to_string(seed) + " case " + std::to_string(k) + ": ";
      try {
        rng_t r{std::mt19937_64{test::hash(seed, stream, k)}};
        call c;
        std::optional<outcome> expected;
        for (int attempt = 0; attempt < 64 && !expected; ++attempt) {
          c = draw(r, world);
          expected = predict(c);
          if (!expected) ++st.redrawn;
        }
        if (expected) {
          ++st.cases;
          ++st.by_outcome[static_cast<int>(*expected)];
          ++st.by_op[static_cast<int>(c.kind)];
          if (c.kind != op::p2p)
            ++(*expected == outcome::invalid
                 ? st.refused_by_form
                 : st.run_by_form)[static_cast<int>(c.how)];
          run.what = prefix + describe(c, rank) + " (expected " +
                     outcome_names[static_cast<int>(*expected)] + ")";
          auto call_seed = test::hash(seed, k, 99);
          buffer in =
            c.kind == op::barrier ? buffer{} : make_buffer(c.in[rank], c.cuda);
          buffer out = c.kind == op::barrier || c.in_place
                         ? buffer{}
                         : make_buffer(c.out[rank], c.cuda);
          if (c.kind != op::barrier) fill_inputs(c, rank, in, call_seed);
          snapshot before{in.mem, out.mem};
          note_call(rank, run.what);
          auto err = run.run(c, *expected, in, out);
          run.expect_code(err, *expected);
          if (*expected == outcome::success) {
            if (c.kind != op::barrier)
              check_result(c, rank, in, out, call_seed, log, run.what);
            // Inputs of out-of-place calls stay as they were.
            if (!c.in_place && c.kind != op::barrier && in.mem != before.in)
              log.fail(run.what + ": the input was modified");
          } else if (in.mem != before.in || out.mem != before.out) {
            log.fail(run.what + ": a refused call wrote into a buffer");
          }
        }
        note_call(rank, prefix + "the allreduce after the call");
        test::expect_usable(log, name, world, rank);
        crash_notes[rank][0] = '\0';
      } catch (const std::exception& e) {
        log.fail(prefix + "threw " + e.what());
      }
      if (log.failures() > 0) {
        auto current = first_failure.load();
        while (k < current && !first_failure.compare_exchange_weak(current, k))
          ; // keep the smallest failing case
      }
      sync.arrive_and_wait();
      if (first_failure.load() <= k) break; // every rank stops after case k
    }
    col::destroy_collective_group(name);
  });
  if (first_failure.load() != size_max)
    FAIL_CHECK(
      "first failing case: replay it with CAF_COLLECTIVE_PROPERTY_SEED="
      << seed << " CAF_COLLECTIVE_PROPERTY_CASE=" << first_failure.load());
  test::check_ranks(results);
  return all_stats[0];
}

void report(const stats& st) {
  std::string s = std::to_string(st.cases) + " calls (" +
                  std::to_string(st.redrawn) + " redrawn):";
  for (int i = 0; i < 4; ++i)
    s += std::string{" "} + outcome_names[i] + " " +
         std::to_string(st.by_outcome[i]);
  s += "; by op:";
  for (int i = 0; i < 12; ++i)
    s += std::string{" "} + op_names[i] + " " + std::to_string(st.by_op[i]);
  s += "; collectives refused / run by form:";
  for (int i = 0; i < 4; ++i)
    s += std::string{" "} + form_names[i] + " " +
         std::to_string(st.refused_by_form[i]) + " / " +
         std::to_string(st.run_by_form[i]);
  MESSAGE(s);
}

/// Both valid and refused calls were made, of every kind asked for, and
/// in every form.
void check_coverage(const stats& st, std::initializer_list<op> kinds) {
  if (only_case()) return;
  CHECK(st.by_outcome[static_cast<int>(outcome::success)] * 5 >= st.cases);
  CHECK(st.by_outcome[static_cast<int>(outcome::invalid)] * 5 >= st.cases);
  for (auto kind : kinds) {
    INFO(op_names[static_cast<int>(kind)]);
    CHECK(st.by_op[static_cast<int>(kind)] > 0);
  }
  for (int how = 0; how < 4; ++how) {
    INFO(form_names[how]);
    CHECK(st.refused_by_form[how] > 0);
    CHECK(st.run_by_form[how] > 0);
  }
}

op draw_any_op(rng_t& r) {
  // Weights: reductions and data movement alike, barriers now and then.
  const op kinds[] = {
    op::p2p,
    op::p2p,
    op::broadcast,
    op::broadcast,
    op::reduce,
    op::reduce,
    op::allreduce,
    op::allreduce,
    op::allreduce,
    op::allgather,
    op::allgather,
    op::allgatherv,
    op::gather,
    op::gather,
    op::scatter,
    op::scatter,
    op::reduce_scatter,
    op::reduce_scatter,
    op::alltoall,
    op::alltoall,
    op::alltoallv,
    op::barrier,
  };
  return r.pick(kinds);
}

call draw_any(rng_t& r, int n) {
  return draw_call(r, n, draw_any_op(r));
}

call draw_vector_form(rng_t& r, int n) {
  return draw_call(r, n, r.chance(0.5) ? op::allgatherv : op::alltoallv);
}

const std::initializer_list<op> every_op = {
  op::p2p,        op::broadcast, op::reduce,  op::allreduce,      op::allgather,
  op::allgatherv, op::gather,    op::scatter, op::reduce_scatter, op::alltoall,
  op::alltoallv,  op::barrier,
};

} // namespace

TEST_CASE("property: random calls of every op on 2 ranks end in the right "
          "result or invalid_argument on every rank") {
  auto st = run_property("property-2", 1, 2, 900, draw_any);
  report(st);
  check_coverage(st, every_op);
}

TEST_CASE("property: random calls of every op on 3 ranks end in the right "
          "result or invalid_argument on every rank") {
  auto st = run_property("property-3", 2, 3, 900, draw_any);
  report(st);
  check_coverage(st, every_op);
}

TEST_CASE("property: random counts vectors of allgatherv and alltoallv on "
          "3 ranks: right result, invalid_argument or mismatch") {
  auto st = run_property("property-v", 3, 3, 500, draw_vector_form);
  report(st);
  check_coverage(st, {op::allgatherv, op::alltoallv});
  CHECK(st.by_outcome[static_cast<int>(outcome::mismatch)] > 0);
}

TEST_CASE("property: sizes whose product with the world size wraps around "
          "size_t are refused on every rank") {
  // allgather / gather with an input of (2^64 + k) / 3 elements and an
  // output of k; scatter the other way round.
  auto st = run_property("property-wrap", 4, 3, 60, draw_wrapping_call);
  report(st);
  CHECK(st.by_outcome[static_cast<int>(outcome::invalid)] == st.cases);
}

TEST_CASE("property: allreduce (sum) is right for every count of the legacy "
          "algorithms up to 12 KiB: float32 on 2 ranks, int32 on 3 ranks") {
  // Counts in the legacy algorithms' range, each a fresh cached instance.
  struct sweep {
    int world;
    col::dtype type;
    size_t max_count;
  };
  for (auto [world, type, max_count] : {sweep{2, col::dtype::float32, 3072},
                                        sweep{3, col::dtype::int32, 1024}}) {
    INFO("world " << world << ", " << col::to_string(type));
    auto want = reference_of(type, col::reduce_op::sum, world, 0, max_count);
    auto name = "sweep-" + std::to_string(world);
    test::run_group(
      world, name,
      [&](int rank, rank_log& log) {
        for (size_t count = 1; count <= max_count; ++count) {
          auto x = test::make_tensor(type, count);
          test::fill_input(x, col::reduce_op::sum, rank);
          try {
            col::allreduce(x, name);
          } catch (const std::exception& e) {
            log.fail("allreduce of " + std::to_string(count) + ": " + e.what());
            return; // the group is broken
          }
          if (!log.expect_equal("allreduce of " + std::to_string(count), x,
                                want.view().slice(0, count)))
            return;
        }
      },
      10s);
  }
}
