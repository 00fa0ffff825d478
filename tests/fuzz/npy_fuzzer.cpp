// libFuzzer target: the .npy reader on arbitrary bytes. Every input must either read or be
// refused with InvalidArgument naming the file; anything else (a crash, a sanitizer report,
// another exception, a hang) is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const flashref::verify::NpyArray a = flashref::verify::read_npy(in, "fuzz.npy");
    // A read array's values agree with its shape.
    std::size_t n = 1;
    for (std::size_t s : a.values.shape()) n *= s;
    if (n != a.values.size()) __builtin_trap();
  } catch (const flashref::InvalidArgument& e) {
    if (e.field() != "fuzz.npy") __builtin_trap();  // the message must name the file
  }
  return 0;
}
