// .npy reading and writing: round trips, files laid out byte by byte as NumPy writes them, and
// every malformed file the reader must refuse with an error naming the file.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <xtensor/xarray.hpp>

#include "flashref/error.hpp"
#include "flashref/verify/npy.hpp"
#include "npy_bytes.hpp"

namespace {

using flashref::DType;
using flashref::InvalidArgument;
using flashref::testing::float_bytes;
using flashref::testing::npy_bytes;
using flashref::verify::read_npy;
using flashref::verify::write_npy;

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Reads `bytes` as a file named "x.npy" and returns the InvalidArgument message (fails the test
// when nothing is thrown or the field is not the file name).
std::string error_of(const std::string& bytes) {
  std::istringstream in(bytes);
  try {
    read_npy(in, "x.npy");
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), "x.npy");
    return e.what();
  }
  ADD_FAILURE() << "no error for a malformed file";
  return {};
}

const std::string kDict23 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";

TEST(Npy, ReadsAFileLaidOutAsNumpyWritesIt) {
  std::istringstream in(npy_bytes(kDict23, float_bytes({1, 2, 3, 4, 5, 6.5f})));
  const auto a = read_npy(in, "x.npy");
  EXPECT_EQ(a.dtype, DType::f32);
  ASSERT_EQ(a.values.dimension(), 2u);
  EXPECT_EQ(a.values.shape()[0], 2u);
  EXPECT_EQ(a.values.shape()[1], 3u);
  // C order: row 1 holds the last three values written.
  EXPECT_EQ(a.values(0, 2), 3.0f);
  EXPECT_EQ(a.values(1, 0), 4.0f);
  EXPECT_EQ(a.values(1, 2), 6.5f);
}

TEST(Npy, ReadsFormatVersions2And3) {
  for (int major : {2, 3}) {
    std::istringstream in(npy_bytes(kDict23, float_bytes({1, 2, 3, 4, 5, 6}), major));
    EXPECT_EQ(read_npy(in, "x.npy").values(1, 1), 5.0f) << "version " << major;
  }
}

TEST(Npy, ReadsFloat16BitPatternsExactly) {
  // 1.0, -2.0, the smallest subnormal 2^-24, the largest finite 65504, +inf.
  const std::uint16_t bits[] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0x7c00};
  std::string data(reinterpret_cast<const char*>(bits), sizeof bits);
  std::istringstream in(
      npy_bytes("{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }", data));
  const auto a = read_npy(in, "h.npy");
  EXPECT_EQ(a.dtype, DType::f16);
  EXPECT_EQ(a.values(0), 1.0f);
  EXPECT_EQ(a.values(1), -2.0f);
  EXPECT_EQ(a.values(2), std::ldexp(1.0f, -24));
  EXPECT_EQ(a.values(3), 65504.0f);
  EXPECT_EQ(a.values(4), std::numeric_limits<float>::infinity());
}

TEST(Npy, Float32RoundTripIsBitExactForSpecialValues) {
  xt::xarray<float> v = xt::xarray<float>::from_shape({2, 1, 3, 2});
  const float specials[] = {0.0f,
                            -0.0f,
                            1e-45f,
                            -3.25f,
                            std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            1.17549435e-38f,
                            7.0f,
                            123456.789f,
                            -1e-20f};
  std::copy(std::begin(specials), std::end(specials), v.begin());
  std::stringstream file;
  write_npy(file, v, DType::f32, "rt.npy");
  const auto back = read_npy(file, "rt.npy");
  EXPECT_EQ(back.dtype, DType::f32);
  ASSERT_EQ(back.values.shape(), v.shape());
  for (std::size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(bits_of(back.values.flat(i)), bits_of(v.flat(i))) << "element " << i;
  }
}

TEST(Npy, WrittenHeaderIsNumpyVersion1AlignedTo64Bytes) {
  xt::xarray<float> v = xt::xarray<float>::from_shape({4, 5, 6});
  std::stringstream file;
  write_npy(file, v, DType::f32, "a.npy");
  const std::string bytes = file.str();
  ASSERT_GT(bytes.size(), 10u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(bytes[6], 1);
  EXPECT_EQ(bytes[7], 0);
  const std::size_t header_length =
      static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_length) % 64, 0u);
  const std::string header = bytes.substr(10, header_length);
  EXPECT_NE(header.find("'descr': '<f4'"), std::string::npos) << header;
  EXPECT_NE(header.find("'fortran_order': False"), std::string::npos) << header;
  EXPECT_NE(header.find("'shape': (4, 5, 6)"), std::string::npos) << header;
  EXPECT_EQ(header.back(), '\n');
  EXPECT_EQ(bytes.size(), 10 + header_length + 4 * 5 * 6 * sizeof(float));
}

TEST(Npy, Float16RoundTripRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and the next float16 (1 + 2^-10): ties go to even (1.0).
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: ties go to even (1 + 2^-9).
  xt::xarray<float> v = {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 0.5f,
                         -65504.0f, 1e6f};
  std::stringstream file;
  write_npy(file, v, DType::f16, "h.npy");
  const auto back = read_npy(file, "h.npy");
  EXPECT_EQ(back.dtype, DType::f16);
  EXPECT_EQ(back.values(0), 1.0f);
  EXPECT_EQ(back.values(1), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(back.values(2), 0.5f);
  EXPECT_EQ(back.values(3), -65504.0f);
  EXPECT_EQ(back.values(4), std::numeric_limits<float>::infinity());  // beyond float16's range
}

TEST(Npy, FileRoundTripAndMissingFile) {
  const auto dir = std::filesystem::temp_directory_path() / "flashref_test_npy";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "o.npy").string();
  xt::xarray<float> v = {{1.5f, -2.0f}, {3.0f, 4.25f}};
  write_npy(path, v);
  EXPECT_EQ(read_npy(path).values, v);
  const std::string missing = (dir / "missing.npy").string();
  try {
    read_npy(missing);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(e.field(), missing);
    EXPECT_NE(std::string(e.what()).find("cannot open"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(Npy, Bfloat16CannotBeWrittenAndNothingIsCreated) {
  const auto path = std::filesystem::temp_directory_path() / "flashref_test_bf16.npy";
  std::filesystem::remove(path);
  xt::xarray<float> v = {1.0f};
  EXPECT_THROW(write_npy(path.string(), v, DType::bf16), InvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Npy, RefusesBadMagic) {
  EXPECT_NE(error_of("PK\x03\x04 this is a zip file").find("bad magic"), std::string::npos);
  EXPECT_NE(error_of("").find("bad magic"), std::string::npos);
}

TEST(Npy, RefusesUnsupportedVersions) {
  const std::string data = float_bytes({1, 2, 3, 4, 5, 6});
  EXPECT_NE(error_of(npy_bytes(kDict23, data, 4, 0)).find("version 4.0"), std::string::npos);
  EXPECT_NE(error_of(npy_bytes(kDict23, data, 1, 1)).find("version 1.1"), std::string::npos);
}

TEST(Npy, RefusesOtherDtypesNamingThem) {
  const std::string data(48, '\0');
  auto dict = [](const std::string& descr) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (2, 3), }";
  };
  EXPECT_NE(error_of(npy_bytes(dict("<f8"), data)).find("float64"), std::string::npos);
  EXPECT_NE(error_of(npy_bytes(dict("<i4"), data)).find("int32"), std::string::npos);
  EXPECT_NE(error_of(npy_bytes(dict("|u1"), data)).find("uint8"), std::string::npos);
  EXPECT_NE(error_of(npy_bytes(dict("<c8"), data)).find("complex64"), std::string::npos);
  // Not a plain scalar type at all (a structured dtype).
  EXPECT_NE(error_of(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }",
                               data))
                .find("malformed"),
            std::string::npos);
}

TEST(Npy, RefusesBigEndian) {
  const std::string msg = error_of(
      npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", std::string(24, 0)));
  EXPECT_NE(msg.find("big-endian"), std::string::npos) << msg;
}

TEST(Npy, RefusesFortranOrderButAcceptsIt1D) {
  const std::string msg = error_of(
      npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", std::string(24, 0)));
  EXPECT_NE(msg.find("Fortran"), std::string::npos) << msg;
  // A 1-D array is the same bytes in either order.
  std::istringstream in(
      npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", float_bytes({7, 8})));
  EXPECT_EQ(read_npy(in, "x.npy").values(1), 8.0f);
}

TEST(Npy, RefusesTruncatedData) {
  const std::string msg = error_of(npy_bytes(kDict23, float_bytes({1, 2, 3, 4, 5})));
  EXPECT_NE(msg.find("truncated data"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(2, 3)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("24 bytes"), std::string::npos) << msg;
}

TEST(Npy, RefusesTrailingData) {
  const std::string msg = error_of(npy_bytes(kDict23, float_bytes({1, 2, 3, 4, 5, 6, 7})));
  EXPECT_NE(msg.find("after the array"), std::string::npos) << msg;
}

TEST(Npy, RefusesTruncatedAndMalformedHeaders) {
  const std::string full = npy_bytes(kDict23, float_bytes({1, 2, 3, 4, 5, 6}));
  EXPECT_NE(error_of(full.substr(0, 9)).find("truncated .npy header"), std::string::npos);
  EXPECT_NE(error_of(full.substr(0, 40)).find("truncated .npy header"), std::string::npos);
  for (const std::string dict :
       {"{'descr': '<f4', 'fortran_order': False}", "{'descr': '<f4', 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2, 3), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': , }", "not a dict", ""}) {
    EXPECT_NE(error_of(npy_bytes(dict, std::string(24, 0))).find("malformed"), std::string::npos)
        << dict;
  }
}

TEST(Npy, RefusesAnImplausibleShapeWithoutAllocatingIt) {
  const std::string msg = error_of(npy_bytes(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (4000000000, 4000000000, 4000000000), }",
      float_bytes({1})));
  EXPECT_NE(msg.find("implausible shape"), std::string::npos) << msg;
  const std::string big = error_of(npy_bytes(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000), }", float_bytes({1})));
  EXPECT_NE(big.find("truncated data"), std::string::npos) << big;
}

}  // namespace

// Found by the libFuzzer target fuzz_npy (tests/fuzz/): a key without its colon reached
// xtensor's header parser, whose substring arithmetic then overflowed (UBSan). Now refused,
// naming the entry, before that parser runs.
TEST(NpyFuzzFound, AKeyWithoutItsColonIsRefusedNamingTheEntry) {
  const std::string doubles(32, '\0');
  const std::pair<const char*, const char*> cases[] = {
      {"{'descr': '<f8', 'fortran_order': False, 'shape'* (0, 2, 2, ), }", "'shape':("},
      {"{'descr' '<f4', 'fortran_order': False, 'shape': (2, 3), }", "'descr':"},
      {"{'descr': '<f4', 'fortran_order' False, 'shape': (2, 3), }", "'fortran_order':"}};
  for (const auto& [dict, entry] : cases) {
    SCOPED_TRACE(dict);
    const std::string message = error_of(npy_bytes(dict, doubles));
    EXPECT_NE(message.find(std::string("no ") + entry + " entry"), std::string::npos) << message;
  }
}
