// One parser for the values several subcommands share, so that every subcommand accepts the
// same spellings and refuses the same mistakes with the same message: shapes (--shape), tile
// sizes (--tile), seeds (--seed) and dtypes. Errors are InvalidArgument naming the option.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "flashref/dtype.hpp"

namespace flashref::cli {

// The largest tile size any backend takes (B_q, B_k): the cpu backend's plan limit.
inline constexpr int kMaxTile = 1 << 20;

// "B,H,S_q,S_k,d" or "B,H,S,d" (S_k = S_q), each a positive integer: {B, H, S_q, S_k, d}.
std::array<std::int64_t, 5> parse_shape(const std::string& text, const std::string& option);

// "B_q,B_k" or one size for both, each from 1 to kMaxTile, or 0 for the backend's default.
std::pair<int, int> parse_tiles(const std::string& text, const std::string& option);

// A decimal integer from 0 to 2^64 - 1 ("-1" is refused, not wrapped).
std::uint64_t parse_seed(const std::string& text, const std::string& option);

// f32, f16 or bf16, with the error naming `option` (not always --dtype).
DType parse_dtype_option(const std::string& text, const std::string& option);

// Splits "a,b,c" into its parts (empty parts kept, so "a,,b" can be reported).
std::vector<std::string> split_commas(const std::string& s);

// Adds --nondeterministic to `app`: ExecutionOptions::deterministic = false.
CLI::Option* add_nondeterministic_flag(CLI::App& app, bool& nondeterministic);

// Adds --seed to `app`, parsed by parse_seed into `seed` (its default shown in --help).
CLI::Option* add_seed_option(CLI::App& app, std::uint64_t& seed, const std::string& help);

}  // namespace flashref::cli
