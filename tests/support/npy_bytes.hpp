// .npy files assembled byte by byte, the way NumPy's format.py writes them, so tests can build
// well-formed files independently of our writer and malformed ones that no writer would make.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

namespace flashref::testing {

// Magic, version, header length (little-endian: 2 bytes for 1.0, 4 for 2.0 and 3.0), the
// header dict padded with spaces so the data starts at a multiple of 64, a newline, the data.
inline std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1,
                             int minor = 0) {
  const std::size_t prefix = 6 + 2 + (major == 1 ? 2 : 4);
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += static_cast<char>(minor);
  const std::size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  return out + header + data;
}

// The raw little-endian bytes of float32 values.
inline std::string float_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s.append(reinterpret_cast<const char*>(&v), sizeof v);
  return s;
}

}  // namespace flashref::testing
