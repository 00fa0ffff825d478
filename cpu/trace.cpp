#include "flashref/cpu/trace.hpp"

namespace flashref::cpu {

std::string_view tile_kind_name(TileKind k) {
  switch (k) {
    case TileKind::skipped:
      return "skipped";
    case TileKind::full:
      return "full";
    case TileKind::diagonal:
      return "diagonal";
  }
  return "?";
}

std::string_view trace_pass_name(TracePass p) {
  switch (p) {
    case TracePass::forward:
      return "forward";
    case TracePass::dq:
      return "dq";
    case TracePass::dkdv:
      return "dkdv";
  }
  return "?";
}

}  // namespace flashref::cpu
