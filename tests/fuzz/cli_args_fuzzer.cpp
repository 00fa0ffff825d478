// libFuzzer target: the options every subcommand shares (--shape, --tile, --seed, --dtype,
// option_parsers.hpp) parsed by CLI11 from an arbitrary argument list (the input split at NUL
// bytes). Every list must parse or be refused with CLI11's ParseError or InvalidArgument
// naming the option; anything else (a crash, a sanitizer report, another exception) is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "flashref/error.hpp"
#include "option_parsers.hpp"

namespace {

std::vector<std::string> split_at_nul(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args{"flashref"};
  std::string current;
  for (std::size_t n = 0; n < size; ++n) {
    if (data[n] == 0) {
      args.push_back(current);
      current.clear();
    } else {
      current.push_back(static_cast<char>(data[n]));
    }
  }
  if (!current.empty()) args.push_back(current);
  return args;
}

void trap_unless_named(const flashref::InvalidArgument& e, const char* option) {
  if (e.field() != option) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace flashref::cli;
  const std::vector<std::string> args = split_at_nul(data, size);
  if (args.size() > 64) return 0;  // the parsers, not CLI11's handling of long lists
  CLI::App app{"fuzz"};
  std::string shape = "1,1,8,8,16", tile = "0", dtype = "f32", list;
  std::uint64_t seed = 0;
  app.add_option("--shape", shape);
  app.add_option("--tile", tile);
  app.add_option("--dtype", dtype);
  app.add_option("--backends", list);
  add_seed_option(app, seed, "seed");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;
  }
  try {
    const auto s = parse_shape(shape, "--shape");
    for (std::int64_t x : s) {
      if (x < 1) __builtin_trap();
    }
  } catch (const flashref::InvalidArgument& e) {
    trap_unless_named(e, "--shape");
  }
  try {
    const auto [q, k] = parse_tiles(tile, "--tile");
    if (q < 0 || k < 0 || q > kMaxTile || k > kMaxTile) __builtin_trap();
  } catch (const flashref::InvalidArgument& e) {
    trap_unless_named(e, "--tile");
  }
  try {
    (void)parse_dtype_option(dtype, "--dtype");
  } catch (const flashref::InvalidArgument& e) {
    trap_unless_named(e, "--dtype");
  }
  const std::vector<std::string> parts = split_commas(list);
  std::size_t commas = 0;
  for (char c : list) commas += c == ',';
  if (parts.size() != commas + 1) __builtin_trap();
  return 0;
}
