#include "trace_render.hpp"

#include <cmath>
#include <cstdio>

#include "flashref/error.hpp"
#include "flashref/verify/report.hpp"

namespace flashref::cli {
namespace {

using cpu::TileKind;
using Kind = TraceEntry::Kind;

char kind_symbol(TileKind k) {
  switch (k) {
    case TileKind::skipped:
      return '.';
    case TileKind::full:
      return '#';
    case TileKind::diagonal:
      return '\\';
  }
  return '?';
}

std::string padded(double x) {
  std::string s = format_trace_number(x);
  if (s.size() < 9) s.insert(0, 9 - s.size(), ' ');
  return s;
}

std::string vector_text(const TraceValues& v) {
  std::string s = "[";
  for (std::size_t n = 0; n < v.data.size(); ++n)
    s += (n ? ", " : "") + format_trace_number(v.data[n]);
  return s + "]";
}

void matrix_lines(std::ostream& out, const TraceValues& v, const std::string& indent) {
  for (std::int64_t r = 0; r < v.rows; ++r) {
    out << indent;
    for (std::int64_t c = 0; c < v.cols; ++c) out << padded(v(r, c));
    out << "\n";
  }
}

std::string step_label(const TraceEntry& e) {
  std::string s = "Alg. " + std::to_string(e.algorithm);
  if (e.line > 0) s += " line " + std::to_string(e.line);
  return s;
}

void header(std::ostream& out, const Trace& t, bool md) {
  const std::string title = t.backward
                                ? "Algorithm 2 (FlashAttention-2 backward with recomputation)"
                                : "Algorithm 1 (FlashAttention-2 forward)";
  const std::string tiles = "B_q = " + std::to_string(t.B_q) + ", B_k = " + std::to_string(t.B_k) +
                            ": T_q = " + std::to_string(t.T_q) +
                            " query tiles x T_k = " + std::to_string(t.T_k) + " key tiles";
  if (md) {
    out << "**" << title << "**, traced on the tiled cpu backend\n\n";
    out << "- problem: `" << describe(t.problem) << "`\n- tiles: " << tiles << "\n";
    if (t.problem.B * t.problem.H > 1) out << "- steps of the first head (b = 0, h = 0) shown\n";
    out << "\n";
  } else {
    out << title << ", traced on the tiled cpu backend\n";
    out << "problem: " << describe(t.problem) << "\ntiles:   " << tiles << "\n";
    if (t.problem.B * t.problem.H > 1) out << "(steps of the first head, b = 0, h = 0)\n";
    out << "\n";
  }
}

void inputs(std::ostream& out, const Trace& t, bool md) {
  std::vector<std::pair<std::string, const TraceValues*>> list = {
      {"Q", &t.Q}, {"K", &t.K}, {"V", &t.V}};
  if (t.backward) list.emplace_back("dO", &t.dO);
  if (md) {
    out << "Inputs of the first head:\n\n```\n";
  } else {
    out << "inputs of the first head:\n";
  }
  for (const auto& [name, values] : list) {
    out << name << " (" << values->rows << " x " << values->cols << ")\n";
    matrix_lines(out, *values, "  ");
  }
  out << (md ? "```\n\n" : "\n");
}

void results(std::ostream& out, const Trace& t, bool md) {
  if (md) {
    out << "#### Result\n\n```\n";
  } else {
    out << "=== result (first head, as written) ===\n";
  }
  out << "O (" << t.O.rows << " x " << t.O.cols << ")\n";
  matrix_lines(out, t.O, "  ");
  out << "L = " << vector_text(t.L) << "\n";
  if (t.backward) {
    for (const auto& [name, values] :
         {std::pair<std::string, const TraceValues*>{"dQ", &t.dQ}, {"dK", &t.dK}, {"dV", &t.dV}}) {
      out << name << " (" << values->rows << " x " << values->cols << ")\n";
      matrix_lines(out, *values, "  ");
    }
  }
  if (md) out << "```\n\n";
  out << "Compared with the gold (naive attention in double, every head):";
  const char* sep = " ";
  for (const auto& [name, error] : t.gold_error) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%smax |%s - gold| = %.1e", sep, name.c_str(), error);
    out << buf;
    sep = ", ";
  }
  out << "\n";
}

}  // namespace

std::string format_trace_number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  char buf[32];
  // Fixed point reads best; past 1e4 (an unscaled exp, a large l) switch to exponents.
  std::snprintf(buf, sizeof buf, std::fabs(x) < 1e4 ? "%.4f" : "%.3e", x);
  std::string s = buf;
  if (s == "-0.0000") s = "0.0000";
  return s;
}

TraceFormat parse_trace_format(std::string_view s) {
  if (s == "text") return TraceFormat::text;
  if (s == "markdown" || s == "md") return TraceFormat::markdown;
  throw InvalidArgument("--format",
                        "unknown format '" + std::string(s) + "' (expected text or markdown)");
}

void render_grid(std::ostream& out, const Trace& t, TraceFormat format) {
  const bool md = format == TraceFormat::markdown;
  if (md) out << "```\n";
  out << "tile grid of " << describe(t.problem) << ", B_q = " << t.B_q << ", B_k = " << t.B_k
      << "\n(rows: query tiles i, columns: key tiles j, numbered mod 10)\n\n      ";
  for (std::int64_t j = 0; j < t.T_k; ++j) out << static_cast<char>('0' + j % 10);
  out << "\n";
  std::int64_t counts[3] = {0, 0, 0};
  for (std::int64_t i = 0; i < t.T_q; ++i) {
    char label[32];
    std::snprintf(label, sizeof label, "%4lld  ", static_cast<long long>(i));
    out << label;
    for (std::int64_t j = 0; j < t.T_k; ++j) {
      const TileKind k = t.grid[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
      ++counts[static_cast<int>(k)];
      out << kind_symbol(k);
    }
    out << "\n";
  }
  out << "\n# full: every row sees every key, no index comparison (" << counts[1] << ")\n"
      << "\\ diagonal: crosses the mask's edge, compares indices (" << counts[2] << ")\n"
      << ". skipped: above the diagonal, never loaded (" << counts[0] << ")\n";
  if (md) out << "```\n";
}

void render_trace(std::ostream& out, const Trace& t, TraceFormat format) {
  const bool md = format == TraceFormat::markdown;
  header(out, t, md);
  inputs(out, t, md);
  render_grid(out, t, format);
  out << "\n";
  bool in_code = false;  // markdown: values go in fenced blocks, opened once per run of steps
  const auto open_code = [&] {
    if (md && !in_code) out << "```\n";
    in_code = true;
  };
  const auto close_code = [&] {
    if (md && in_code) out << "```\n\n";
    in_code = false;
  };
  for (const TraceEntry& e : t.entries) {
    switch (e.kind) {
      case Kind::section:
        close_code();
        out << (md ? "#### " : "=== ") << e.text << (md ? "\n\n" : " ===\n");
        break;
      case Kind::tile:
        close_code();
        out << (md ? "*" : "--- ") << e.text << (md ? "*\n\n" : "\n");
        break;
      case Kind::note:
        open_code();
        out << step_label(e) << ": " << e.text << "\n";
        break;
      case Kind::value:
        open_code();
        out << step_label(e) << ": " << e.text;
        if (e.values.is_vector) {
          out << " = " << vector_text(e.values) << "\n";
        } else {
          out << "\n";
          matrix_lines(out, e.values, "  ");
        }
        break;
    }
  }
  close_code();
  if (!md) out << "\n";
  results(out, t, md);
}

nlohmann::json trace_json(const Trace& t) {
  auto values = [](const TraceValues& v) {
    nlohmann::json rows = nlohmann::json::array();
    for (std::int64_t r = 0; r < v.rows; ++r) {
      nlohmann::json row = nlohmann::json::array();
      for (std::int64_t c = 0; c < v.cols; ++c) {
        const double x = v(r, c);
        row.push_back(std::isfinite(x) ? nlohmann::json(x)
                                       : nlohmann::json(format_trace_number(x)));
      }
      rows.push_back(v.is_vector ? row[0] : row);
    }
    return rows;
  };
  nlohmann::json grid = nlohmann::json::array();
  for (const auto& row : t.grid) {
    nlohmann::json r = nlohmann::json::array();
    for (TileKind k : row) r.push_back(std::string(cpu::tile_kind_name(k)));
    grid.push_back(r);
  }
  nlohmann::json steps = nlohmann::json::array();
  for (const TraceEntry& e : t.entries) {
    nlohmann::json s = {{"text", e.text}};
    switch (e.kind) {
      case Kind::section:
        s["kind"] = "section";
        break;
      case Kind::tile:
        s["kind"] = "tile";
        s["tile_kind"] = std::string(cpu::tile_kind_name(e.tile_kind));
        break;
      case Kind::note:
        s["kind"] = "note";
        break;
      case Kind::value:
        s["kind"] = "value";
        s["symbol"] = e.symbol;
        s["values"] = values(e.values);
        break;
    }
    if (e.algorithm > 0) s["algorithm"] = e.algorithm;
    if (e.line > 0) s["line"] = e.line;
    if (e.i >= 0) s["i"] = e.i;
    if (e.j >= 0) s["j"] = e.j;
    steps.push_back(s);
  }
  nlohmann::json result = {{"O", values(t.O)}, {"L", values(t.L)}};
  if (t.backward) {
    result["dQ"] = values(t.dQ);
    result["dK"] = values(t.dK);
    result["dV"] = values(t.dV);
  }
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [name, error] : t.gold_error) errors[name] = error;
  return {{"command", "trace"},
          {"algorithm", t.backward ? 2 : 1},
          {"problem", verify::to_json(t.problem)},
          {"B_q", t.B_q},
          {"B_k", t.B_k},
          {"T_q", t.T_q},
          {"T_k", t.T_k},
          {"warnings", t.warnings},
          {"grid", grid},
          {"inputs", {{"Q", values(t.Q)}, {"K", values(t.K)}, {"V", values(t.V)}}},
          {"steps", steps},
          {"result", result},
          {"max_abs_error_vs_gold", errors}};
}

}  // namespace flashref::cli
