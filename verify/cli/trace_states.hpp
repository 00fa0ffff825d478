// `flashref trace --q --k --v [--do] --tile B_q,B_k --out DIR [--select b,h[,i]]`: the states
// of Algorithm 1 (and with --do, of Algorithm 2) on the user's own inputs, in the layout of states.hpp (cmd_trace_states.cpp).
#pragma once

#include <string>

namespace flashref::cli {

struct StatesTraceOptions {
  std::string q, k, v, out, select;
  std::string dO;  // with it, the backward's states too (Algorithm 2)
  std::string tile, mask = "none", dtype;  // dtype empty: the dtype of Q's file
  bool scale_given = false;
  double scale = 0.0;
  bool json = false;
};

int run_trace_states(const StatesTraceOptions& o);

}  // namespace flashref::cli
