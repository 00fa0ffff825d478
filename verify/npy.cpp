#include "flashref/verify/npy.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <xtensor/xnpy.hpp>

#include "flashref/error.hpp"

namespace flashref::verify {
namespace {

// The data bytes are copied straight into float buffers.
static_assert(std::endian::native == std::endian::little,
              "flashref's .npy I/O assumes a little-endian host");

// A corrupted length field must not make us allocate gigabytes for a header; NumPy's own
// headers are under 200 bytes.
constexpr std::size_t kMaxHeaderBytes = 1 << 20;

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw InvalidArgument(name, what);
}

std::string numpy_type_name(char kind, int bytes) {
  const std::string bits = std::to_string(8 * bytes);
  switch (kind) {
    case 'f':
      return "float" + bits;
    case 'i':
      return "int" + bits;
    case 'u':
      return "uint" + bits;
    case 'c':
      return "complex" + bits;
    case 'b':
      return "bool";
  }
  return "unknown";
}

// Bytes left in the stream after the current position, or -1 when it cannot tell (a pipe).
std::int64_t remaining_bytes(std::istream& in) {
  const std::streampos here = in.tellg();
  if (here < 0) return -1;
  in.seekg(0, std::ios::end);
  const std::streampos end = in.tellg();
  in.seekg(here);
  if (end < 0 || !in) {
    in.clear();
    in.seekg(here);
    return -1;
  }
  return static_cast<std::int64_t>(end - here);
}

std::uint32_t read_header_length(std::istream& in, int width, const std::string& name) {
  unsigned char bytes[4] = {0, 0, 0, 0};
  in.read(reinterpret_cast<char*>(bytes), width);
  if (in.gcount() != width) fail(name, "truncated .npy header (the file ends inside it)");
  std::uint32_t length = 0;
  for (int i = width - 1; i >= 0; --i) length = (length << 8) | bytes[i];
  return length;
}

struct Header {
  DType dtype = DType::f32;
  std::vector<std::size_t> shape;
};

// What xtensor's parser takes on trust: each key once, and a shape of non-negative integers
// (it would read "2.5" as 2 and "-2" as 18446744073709551614). `stripped` has no spaces.
void check_keys_and_shape(const std::string& stripped, const std::string& name,
                          const std::string& shown) {
  for (const char* key : {"'descr'", "'fortran_order'", "'shape'"}) {
    std::size_t count = 0;
    for (std::size_t at = stripped.find(key); at != std::string::npos;
         at = stripped.find(key, at + 1)) {
      ++count;
    }
    if (count > 1) {
      fail(name, "malformed .npy header: the key " + std::string(key) + " appears " +
                     std::to_string(count) + " times: '" + shown + "'");
    }
  }
  // xtensor's parser finds each key and then computes offsets from what follows it, without
  // checking that the colon (and the shape's parenthesis) are there: with "'shape'*(" its
  // substring arithmetic overflows (found by tests/fuzz/, fuzz_npy). Each key must be
  // followed by its colon, and the shape by a tuple.
  for (const char* entry : {"'descr':", "'fortran_order':", "'shape':("}) {
    if (stripped.find(entry) == std::string::npos) {
      fail(name, "malformed .npy header: no " + std::string(entry) + " entry (each key needs its "
                     "colon, the shape a tuple): '" + shown + "'");
    }
  }
  const std::size_t key = stripped.find("'shape':(");
  const std::size_t open = key + 8, close = stripped.find(')', open);
  if (close == std::string::npos) return;
  const std::string tuple = stripped.substr(open + 1, close - open - 1);
  std::size_t start = 0;
  while (start < tuple.size()) {
    std::size_t comma = tuple.find(',', start);
    if (comma == std::string::npos) comma = tuple.size();
    const std::string dim = tuple.substr(start, comma - start);
    std::uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(dim.data(), dim.data() + dim.size(), value);
    const bool digits = !dim.empty() && std::all_of(dim.begin(), dim.end(), [](char c) {
      return c >= '0' && c <= '9';
    });
    if (!dim.empty() && dim.front() == '-') {
      fail(name, "negative dimension " + dim + " in the .npy header's shape (" + tuple + ")");
    }
    if (!digits) {
      fail(name, "dimension '" + dim + "' in the .npy header's shape (" + tuple +
                     ") is not a non-negative integer");
    }
    if (ec != std::errc() || ptr != dim.data() + dim.size()) {
      fail(name, "dimension " + dim + " in the .npy header's shape (" + tuple + ") is too large");
    }
    start = comma + 1;
  }
}

Header parse_header(std::string text, const std::string& name) {
  const std::string shown = text.substr(0, std::min<std::size_t>(text.size(), 200));
  if (text.empty() || text.back() != '\n') {
    fail(name, "malformed .npy header (it must end with a newline): '" + shown + "'");
  }
  // xtensor's parser assumes the shape tuple closes the dictionary and would read past an
  // empty value; reject anything else before handing it over.
  std::string stripped = text;
  stripped.erase(std::remove_if(stripped.begin(), stripped.end(),
                                [](char c) { return c == ' ' || c == '\n'; }),
                 stripped.end());
  const bool ends_with_shape = (stripped.size() >= 2 && stripped.ends_with(")}")) ||
                               (stripped.size() >= 3 && stripped.ends_with("),}"));
  if (stripped.empty() || stripped.front() != '{' || !ends_with_shape) {
    fail(name,
         "malformed .npy header (expected {'descr': ..., 'fortran_order': ..., 'shape': "
         "(...)}): '" +
             shown + "'");
  }

  check_keys_and_shape(stripped, name, shown);

  std::string descr;
  bool fortran_order = false;
  Header h;
  try {
    xt::detail::parse_header(text, descr, &fortran_order, h.shape);
  } catch (const std::runtime_error& e) {
    fail(name, std::string("malformed .npy header (") + e.what() + "): '" + shown + "'");
  }

  if (descr.size() < 3) fail(name, "unsupported dtype '" + descr + "' in the .npy header");
  const char order = descr[0];
  const char kind = descr[1];
  int bytes = 0;
  try {
    bytes = std::stoi(descr.substr(2));
  } catch (const std::exception&) {
    fail(name, "unsupported dtype '" + descr + "' in the .npy header");
  }
  const bool is_float16 = kind == 'f' && bytes == 2;
  const bool is_float32 = kind == 'f' && bytes == 4;
  if (!is_float16 && !is_float32) {
    fail(name, "dtype is " + numpy_type_name(kind, bytes) + " ('" + descr +
                   "'); flashref reads float32 or float16 only: save with "
                   "numpy.save(path, a.astype(numpy.float32))");
  }
  if (order == '>') {
    fail(name, "data is big-endian ('" + descr +
                   "'); flashref reads little-endian only: save "
                   "with numpy.save(path, a.astype('<f" +
                   std::to_string(bytes) + "'))");
  }
  h.dtype = is_float16 ? DType::f16 : DType::f32;
  if (fortran_order && h.shape.size() > 1) {
    fail(name,
         "array is stored in Fortran (column-major) order; flashref reads C order only: "
         "save with numpy.save(path, numpy.ascontiguousarray(a))");
  }
  return h;
}

void require_numpy_dtype(DType dtype, const std::string& name) {
  if (dtype == DType::bf16) {
    fail(name, "NumPy has no bfloat16; write bfloat16 values as float32 (they are exact in it)");
  }
}

void write_all(std::ostream& out, const char* data, std::size_t bytes, const std::string& name) {
  out.write(data, static_cast<std::streamsize>(bytes));
  if (!out) fail(name, "write failed");
}

}  // namespace

std::string shape_string(const std::vector<std::size_t>& shape) {
  std::ostringstream s;
  s << "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) s << ",";
  s << ")";
  return s.str();
}

NpyArray read_npy(std::istream& in, const std::string& name) {
  char magic[8];
  in.read(magic, sizeof magic);
  const auto got = static_cast<std::size_t>(in.gcount());
  if (got < xt::detail::magic_string_length ||
      std::memcmp(magic, xt::detail::magic_string, xt::detail::magic_string_length) != 0) {
    fail(name, "not a .npy file (bad magic bytes: a .npy file starts with \\x93NUMPY)");
  }
  if (got < sizeof magic) fail(name, "truncated .npy header (the file ends inside it)");
  const int major = static_cast<unsigned char>(magic[6]);
  const int minor = static_cast<unsigned char>(magic[7]);
  // 2.0 only widens the header length to 4 bytes; 3.0 only allows UTF-8 in the header.
  if (minor != 0 || major < 1 || major > 3) {
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." +
                   std::to_string(minor) + " (flashref reads 1.0, 2.0 and 3.0)");
  }
  const std::uint32_t header_length = read_header_length(in, major == 1 ? 2 : 4, name);
  if (header_length > kMaxHeaderBytes) {
    fail(name, "implausible .npy header length " + std::to_string(header_length) + " bytes");
  }
  std::string text(header_length, '\0');
  in.read(text.data(), header_length);
  if (static_cast<std::uint32_t>(in.gcount()) != header_length) {
    fail(name, "truncated .npy header (the file ends inside it)");
  }
  const Header header = parse_header(std::move(text), name);

  const std::size_t element_bytes = dtype_size(header.dtype);
  std::size_t count = 1;
  for (std::size_t extent : header.shape) {
    if (extent != 0 && count > std::numeric_limits<std::size_t>::max() / element_bytes / extent) {
      fail(name, "implausible shape " + shape_string(header.shape) + " in the .npy header");
    }
    count *= extent;
  }
  const std::size_t data_bytes = count * element_bytes;
  const std::string expected = "shape " + shape_string(header.shape) + " of " +
                               (header.dtype == DType::f16 ? "float16" : "float32") + " needs " +
                               std::to_string(data_bytes) + " bytes of data";
  const std::int64_t available = remaining_bytes(in);
  if (available >= 0 && static_cast<std::size_t>(available) < data_bytes) {
    fail(name,
         "truncated data: " + expected + " but the file holds only " + std::to_string(available));
  }
  if (available >= 0 && static_cast<std::size_t>(available) > data_bytes) {
    fail(name, "unexpected data after the array: " + expected + " but the file holds " +
                   std::to_string(available) + " (is the header's shape wrong?)");
  }

  NpyArray result;
  result.dtype = header.dtype;
  result.values = xt::xarray<float>::from_shape(header.shape);
  std::size_t read_bytes = 0;
  if (header.dtype == DType::f32) {
    in.read(reinterpret_cast<char*>(result.values.data()),
            static_cast<std::streamsize>(data_bytes));
    read_bytes = static_cast<std::size_t>(in.gcount());
  } else {
    std::vector<std::uint16_t> bits(count);
    in.read(reinterpret_cast<char*>(bits.data()), static_cast<std::streamsize>(data_bytes));
    read_bytes = static_cast<std::size_t>(in.gcount());
    std::transform(bits.begin(), bits.end(), result.values.begin(), f16_bits_to_float);
  }
  if (read_bytes != data_bytes) {
    fail(name,
         "truncated data: " + expected + " but the file holds only " + std::to_string(read_bytes));
  }
  if (available < 0 && in.peek() != std::char_traits<char>::eof()) {
    fail(name, "unexpected data after the array: " + expected + " (is the header's shape wrong?)");
  }
  return result;
}

NpyArray read_npy(const std::string& path) {
  // The type first: opening a FIFO with no writer blocks forever, and a directory opens but
  // reads as "bad magic bytes".
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) fail(path, "is a directory, not a .npy file");
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    fail(path, "is not a regular file (a FIFO, socket or device); give a .npy file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, std::string("cannot open for reading (") + std::strerror(errno) + ")");
  return read_npy(in, path);
}

void write_npy(std::ostream& out, const xt::xarray<float>& values, DType dtype,
               const std::string& name) {
  require_numpy_dtype(dtype, name);
  const auto& shape = values.shape();
  const std::vector<std::size_t> dims(shape.begin(), shape.end());
  // xtensor writes the NumPy 1.0 header, padded so the data starts 64-byte aligned.
  xt::detail::write_header(out, dtype == DType::f16 ? "<f2" : "<f4", false, dims);
  if (dtype == DType::f32) {
    write_all(out, reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float),
              name);
  } else {
    std::vector<std::uint16_t> bits(values.size());
    std::transform(values.begin(), values.end(), bits.begin(), float_to_f16_bits);
    write_all(out, reinterpret_cast<const char*>(bits.data()), bits.size() * 2, name);
  }
}

void write_npy(const std::string& path, const xt::xarray<float>& values, DType dtype) {
  require_numpy_dtype(dtype, path);  // before the file is created: nothing written on error
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, std::string("cannot open for writing (") + std::strerror(errno) + ")");
  write_npy(out, values, dtype, path);
  out.close();
  if (!out) fail(path, "write failed (disk full?)");
}

void write_npy_f64(const std::string& path, const xt::xarray<double>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, std::string("cannot open for writing (") + std::strerror(errno) + ")");
  const auto& shape = values.shape();
  const std::vector<std::size_t> dims(shape.begin(), shape.end());
  xt::detail::write_header(out, "<f8", false, dims);
  write_all(out, reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double),
            path);
  out.close();
  if (!out) fail(path, "write failed (disk full?)");
}

}  // namespace flashref::verify
