// Printing a recorded walkthrough (trace_recorder.hpp) for people (text, markdown) and for
// programs (JSON).
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "trace_recorder.hpp"

namespace flashref::cli {

enum class TraceFormat { text, markdown };

// "text" or "markdown"; throws InvalidArgument("--format", ...).
TraceFormat parse_trace_format(std::string_view s);

// The whole walkthrough: problem, inputs, tile grid, every step, the result and its error
// against the gold.
void render_trace(std::ostream& out, const Trace& trace, TraceFormat format);
// Only the tile grid: which tiles are skipped, full, or diagonal.
void render_grid(std::ostream& out, const Trace& trace, TraceFormat format);

nlohmann::json trace_json(const Trace& trace);

// A value as the walkthrough prints it: fixed 4 decimals, "-inf", "nan", or %.3e when large.
std::string format_trace_number(double x);

}  // namespace flashref::cli
