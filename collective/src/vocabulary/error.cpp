#include "caf_collective/error.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/exit_reason.hpp>
#include <caf/message.hpp>
#include <caf/sec.hpp>

namespace caf_collective {

std::string_view to_string(errc code) noexcept {
  switch (code) {
    case errc::invalid_argument: return "invalid_argument";
    case errc::unsupported: return "unsupported";
    case errc::timeout: return "timeout";
    case errc::peer_lost: return "peer_lost";
    case errc::unknown_group: return "unknown_group";
    case errc::duplicate_group: return "duplicate_group";
    case errc::mismatch: return "mismatch";
    case errc::backend_error: return "backend_error";
    case errc::out_of_memory: return "out_of_memory";
    case errc::aborted: return "aborted";
    case errc::unknown_object: return "unknown_object";
  }
  return "invalid-errc";
}

caf::atom_value error_category() noexcept {
  return caf::atom("collective");
}

caf::error make_error(errc code, std::string detail) {
  return caf::error{static_cast<uint8_t>(code), error_category(),
                    caf::make_message(std::move(detail))};
}

caf::error make_error(errc code, const error_context& where,
                      std::string detail) {
  std::string text;
  if (!where.group.empty()) {
    text += "group '";
    text += where.group;
    text += "'";
  }
  if (where.op >= 0) {
    if (!text.empty()) text += ' ';
    text += to_string(static_cast<op_kind>(where.op));
  }
  if (where.seq >= 0) {
    text += " seq ";
    text += std::to_string(where.seq);
  }
  if (where.rank >= 0) {
    text += " rank ";
    text += std::to_string(where.rank);
    if (where.world_size >= 0) {
      text += '/';
      text += std::to_string(where.world_size);
    }
  }
  if (!text.empty()) text += ": ";
  text += detail;
  return make_error(code, std::move(text));
}

bool is_collective_error(const caf::error& err) noexcept {
  return err && err.category() == error_category();
}

errc code_of(const caf::error& err) noexcept {
  return static_cast<errc>(is_collective_error(err) ? err.code() : 0);
}

namespace {

std::string context_text(const caf::message& ctx) {
  if (ctx.empty()) return {};
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return to_string(ctx);
}

std::string render_parts(uint8_t code, caf::atom_value category,
                         const caf::message& ctx) {
  std::string result;
  if (category == error_category()) {
    result = "collective.";
    result += to_string(static_cast<errc>(code));
  } else if (category == caf::atom("system")) {
    result = "system.";
    result += to_string(static_cast<caf::sec>(code));
  } else if (category == caf::atom("exit")) {
    result = "exit.";
    result += to_string(static_cast<caf::exit_reason>(code));
  } else {
    result = to_string(category);
    result += '.';
    result += std::to_string(code);
  }
  auto text = context_text(ctx);
  if (!text.empty()) {
    result += ": ";
    result += text;
  }
  return result;
}

} // namespace

std::string render(const caf::error& err) {
  if (!err) return "none";
  return render_parts(err.code(), err.category(), err.context());
}

std::string detail_of(const caf::error& err) {
  const auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return render(err);
}

void add_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(
    error_category(),
    [](uint8_t code, caf::atom_value category, const caf::message& ctx) {
      return render_parts(code, category, ctx);
    });
}

collective_error::collective_error(caf::error err)
  : std::runtime_error(render(err)), err_(std::move(err)) {
  // nop
}

void throw_if(const caf::error& err) {
  if (err) throw collective_error{err};
}

std::string list_ranks(const std::vector<int>& ranks) {
  std::string result = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) result += ", ";
    result += std::to_string(ranks[i]);
  }
  return result + "]";
}

} // namespace caf_collective
