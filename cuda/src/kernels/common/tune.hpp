// FLASHREF_CUDA_TUNE's value, parsed (the knobs are described in kernels/common/launch.cuh).
// Plain C++: launch.cuh reads the environment through it once, and a host test checks it.
#pragma once

#include <map>
#include <sstream>
#include <string>
#include <utility>

#include "flashref/error.hpp"

namespace flashref::cuda::kernels {

struct Tune {
  int fwd = 0, dq = 0, dkdv = 0, fwd90 = 0, f32 = 0, f32bwd = 0;
  int bwd90 = 0;     // the sm90 backward's deterministic dQ: 0 the default, 1 the other one
  int order90 = 0;   // the sm90 tile order: 0 default; budget 1 none, 2 before run 40a, 3 /2;
                     // 4 test; 5, 6 wave
  int fused90 = 0;   // the sm90 fused backward: 0 default, 1 a block per key tile, 2 dQ in step,
                     // 3, 4 dK and dV stored by the TMA, staged, at every S
  int grid90 = 0;    // the sm90 persistent backward's blocks at most (0: one per multiprocessor)
  int poison90 = 0;  // 1: the ordered fused backward's dQ accumulator filled with NaN first
};

// `text` is comma-separated key=N entries (empty entries are skipped; null or "" is the
// default). An unknown key, a value that is not a decimal number, or one past the key's largest
// is an InvalidArgument naming the entry: a typo or a deleted variant must never run the
// default kernels under a name that says otherwise.
inline Tune parse_tune(const char* text) {
  Tune r;
  if (text == nullptr) return r;
  const std::map<std::string, std::pair<int*, int>> keys = {{"fwd", {&r.fwd, 3}},
                                                            {"fwd90", {&r.fwd90, 35}},
                                                            {"dq", {&r.dq, 1}},
                                                            {"dkdv", {&r.dkdv, 2}},
                                                            {"f32", {&r.f32, 2}},
                                                            {"f32bwd", {&r.f32bwd, 9}},
                                                            {"bwd90", {&r.bwd90, 1}},
                                                            {"order90", {&r.order90, 6}},
                                                            {"fused90", {&r.fused90, 4}},
                                                            {"grid90", {&r.grid90, 1 << 20}},
                                                            {"poison90", {&r.poison90, 1}}};
  std::string names;
  for (const auto& key : keys) names += (names.empty() ? "" : ", ") + key.first;
  std::istringstream entries(text);
  for (std::string entry; std::getline(entries, entry, ',');) {
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    const auto key = eq == std::string::npos ? keys.end() : keys.find(entry.substr(0, eq));
    if (key == keys.end())
      throw InvalidArgument("FLASHREF_CUDA_TUNE",
                            "\"" + entry + "\" is not key=N with a known key (" + names + ")");
    const auto [field, most] = key->second;
    const std::string digits = entry.substr(eq + 1);
    // At most 8 digits, so that std::stoi cannot overflow before the range check.
    const int value = !digits.empty() && digits.size() <= 8 &&
                              digits.find_first_not_of("0123456789") == std::string::npos
                          ? std::stoi(digits)
                          : -1;
    if (value < 0 || value > most)
      throw InvalidArgument("FLASHREF_CUDA_TUNE", "\"" + entry + "\": " + key->first +
                                                      " takes a whole number from 0 to " +
                                                      std::to_string(most));
    *field = value;
  }
  return r;
}

}  // namespace flashref::cuda::kernels
