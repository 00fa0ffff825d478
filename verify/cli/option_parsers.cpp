#include "option_parsers.hpp"

#include <charconv>
#include <limits>
#include <vector>

#include "flashref/error.hpp"

namespace flashref::cli {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = s.find(',', start);
    parts.push_back(s.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

namespace {

// Decimal digits only: no sign, no spaces, no "0x", no exponent.
template <class Int>
bool parse_decimal(const std::string& s, Int& out) {
  if (s.empty() || s.front() < '0' || s.front() > '9') return false;
  const char* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

std::array<std::int64_t, 5> parse_shape(const std::string& text, const std::string& option) {
  const std::vector<std::string> parts = split_commas(text);
  std::vector<std::int64_t> v;
  for (const std::string& part : parts) {
    std::int64_t x = 0;
    if (!parse_decimal(part, x) || x < 1) {
      throw InvalidArgument(option, "expected B,H,S_q,S_k,d or B,H,S,d as positive integers, got '" +
                                        text + "' ('" + part + "' is not a positive integer)");
    }
    v.push_back(x);
  }
  if (v.size() == 4) v.insert(v.begin() + 3, v[2]);  // B,H,S,d: S_k = S_q
  if (v.size() != 5) {
    throw InvalidArgument(option, "expected 5 values B,H,S_q,S_k,d (or 4: B,H,S,d), got " +
                                      std::to_string(parts.size()) + " in '" + text + "'");
  }
  return {v[0], v[1], v[2], v[3], v[4]};
}

std::pair<int, int> parse_tiles(const std::string& text, const std::string& option) {
  const std::vector<std::string> parts = split_commas(text);
  const std::string expected = "expected B_q,B_k (or one size for both), each an integer from 1 to " +
                               std::to_string(kMaxTile) + " (0: the backend's default)";
  std::vector<int> t;
  for (const std::string& part : parts) {
    std::int64_t x = 0;
    if (!parse_decimal(part, x) || x > kMaxTile) {
      throw InvalidArgument(option, expected + ", got '" + text + "'");
    }
    t.push_back(static_cast<int>(x));
  }
  if (t.size() == 1) return {t[0], t[0]};
  if (t.size() != 2) {
    throw InvalidArgument(option, expected + ", got " + std::to_string(t.size()) + " values in '" +
                                      text + "'");
  }
  return {t[0], t[1]};
}

std::uint64_t parse_seed(const std::string& text, const std::string& option) {
  std::uint64_t seed = 0;
  if (!parse_decimal(text, seed)) {
    throw InvalidArgument(option, "expected an integer from 0 to " +
                                      std::to_string(std::numeric_limits<std::uint64_t>::max()) +
                                      ", got '" + text + "'");
  }
  return seed;
}

DType parse_dtype_option(const std::string& text, const std::string& option) {
  try {
    return parse_dtype(text);
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(option, std::string(e.what()).substr(e.field().size() + 2));
  }
}

CLI::Option* add_nondeterministic_flag(CLI::App& app, bool& nondeterministic) {
  return app.add_flag("--nondeterministic", nondeterministic,
                      "let the cuda backward sum dQ atomically (sm90 family: faster, its bits may "
                      "change from run to run; judged by the same rule)");
}

CLI::Option* add_seed_option(CLI::App& app, std::uint64_t& seed, const std::string& help) {
  CLI::Option* option = app.add_option_function<std::string>(
      "--seed",
      [&seed](const std::string& text) {
        // Inside CLI11's parse: its own error type, so main() reports it as a usage error.
        try {
          seed = parse_seed(text, "--seed");
        } catch (const InvalidArgument& e) {
          throw CLI::ValidationError(e.what());
        }
      },
      help);
  option->default_str(std::to_string(seed));
  return option;
}

}  // namespace flashref::cli
