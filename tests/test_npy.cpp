// .npy reading and writing: every supported dtype, header variants written
// by hand, and malformed files.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "milrt/npy.h"
#include "support/test_util.h"

namespace milrt {
namespace {

// A .npy file with `header` (the dict text) padded as numpy pads it, for
// format `major`.0, followed by `data`.
std::string npy_bytes(const std::string& header, const std::string& data, int major = 1) {
  const size_t prefix = major == 1 ? 10 : 12;
  std::string h = header;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < prefix - 8; ++i) out += char((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

std::string le_bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }

std::string error_of(const std::string& bytes) {
  try {
    parse_npy(bytes, "x.npy");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Npy, RoundTripsEveryDtype) {
  const std::vector<std::pair<DType, std::vector<double>>> cases = {
      {DType::FP16, {1, -2.5, 65504, 0.000061035}},
      {DType::FP32, {1e-30, -3.25, 7}},
      {DType::FP64, {1e-300, 3.141592653589793, -0.0}},
      {DType::Int8, {-128, 127, 0}},
      {DType::UInt8, {0, 255, 7}},
      {DType::Int16, {-32768, 32767}},
      {DType::UInt16, {65535, 0}},
      {DType::Int32, {-2147483648.0, 2147483647.0}},
      {DType::UInt32, {4294967295.0, 1}},
      {DType::Int64, {-9007199254740992.0, 42}},
      {DType::UInt64, {18014398509481984.0, 3}},
      {DType::Bool, {1, 0, 1}},
  };
  const std::string dir = test::temp_dir("npy");
  for (const auto& [dt, vals] : cases) {
    Tensor t = test::make(dt, {int64_t(vals.size())}, vals);
    const std::string path = dir + "/" + std::string(dtype_name(dt)) + ".npy";
    write_npy(path, t);
    Tensor back = read_npy(path);
    EXPECT_TRUE(back.same_bytes(t)) << dtype_name(dt);
  }
  // Shapes: scalar, 0-sized, rank 3.
  for (const Shape& s : {Shape{}, Shape{0}, Shape{2, 0, 3}, Shape{2, 3, 4}}) {
    std::vector<double> v(size_t(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(i) - 3;
    Tensor t = test::make(DType::FP32, s, v);
    EXPECT_TRUE(parse_npy(serialize_npy(t), "x.npy").same_bytes(t)) << shape_str(s);
  }
}

TEST(Npy, WrittenHeaderIsWhatNumpyWrites) {
  std::string b = serialize_npy(test::make(DType::FP32, {2, 3}, {0, 1, 2, 3, 4, 5}));
  // 10 + 59 dict bytes + '\n' round up to a 128-byte header.
  ASSERT_EQ(b.size(), 128u + 24u);
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(uint8_t(b[8]) | uint8_t(b[9]) << 8, 118);
  EXPECT_EQ(b.substr(10, 59), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  EXPECT_EQ(b.substr(69, 58), std::string(58, ' '));
  EXPECT_EQ(b[127], '\n');
  std::string one = serialize_npy(test::make(DType::UInt8, {3}, {1, 2, 3}));
  EXPECT_NE(one.find("'descr': '|u1'"), std::string::npos);
  EXPECT_NE(one.find("'shape': (3,)"), std::string::npos);
  EXPECT_NE(serialize_npy(Tensor::scalar(DType::Bool, 1)).find("'descr': '|b1', 'fortran_order': False, 'shape': ()"),
            std::string::npos);
}

TEST(Npy, TypesWithoutANpyEquivalentWidenExactly) {
  Tensor u4 = test::make(DType::UInt4, {2}, {15, 3});
  Tensor back = parse_npy(serialize_npy(u4), "x.npy");
  EXPECT_EQ(back.dtype(), DType::UInt8);
  EXPECT_EQ(test::values(back), test::values(u4));
  Tensor i4 = test::make(DType::Int4, {2}, {-8, 7});
  EXPECT_EQ(parse_npy(serialize_npy(i4), "x.npy").dtype(), DType::Int8);
  Tensor bf = test::make(DType::BF16, {1}, {-3.5});
  back = parse_npy(serialize_npy(bf), "x.npy");
  EXPECT_EQ(back.dtype(), DType::FP32);
  EXPECT_EQ(back.at(0), -3.5);
  EXPECT_THROW(serialize_npy(Tensor::from_strings({1}, {"a"})), Error);
}

TEST(Npy, ReadsHeaderVariants) {
  const float f[2] = {1.5f, -2};
  const std::string data = le_bytes(f, 8);
  // Double quotes, no trailing comma, other key order, extra spaces.
  Tensor t = parse_npy(npy_bytes(R"({"shape": (2,) ,"fortran_order":False,  "descr":"<f4"})", data), "x.npy");
  EXPECT_EQ(test::values(t), (std::vector<double>{1.5, -2}));
  // Versions 2.0 and 3.0 (u32 header length).
  for (int major : {2, 3})
    EXPECT_EQ(parse_npy(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, major), "x.npy")
                  .numel(),
              2);
  // '|' or '<' or '=' or none on one-byte types, and Python 2 longs.
  for (const char* d : {"|u1", "<u1", "=u1", "u1", ">u1"})
    EXPECT_EQ(parse_npy(npy_bytes(std::string("{'descr': '") + d + "', 'fortran_order': False, 'shape': (2L,), }",
                                  std::string("\x07\x09", 2)),
                        "x.npy")
                  .at(1),
              9)
        << d;
  // Bool bytes other than 0/1 read as true.
  Tensor b = parse_npy(npy_bytes("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", std::string("\x00\x05", 2)),
                       "x.npy");
  EXPECT_EQ(static_cast<const uint8_t*>(b.data())[1], 1);
}

TEST(Npy, MalformedFilesGiveOneLineErrorsWithThePath) {
  const std::string hdr = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::string data(8, '\0');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not a .npy file"},
      {"\x93NUMPZ\x01\x00", "bad magic"},
      {std::string("\x93NUMPY\x04\x00", 8), "unsupported .npy format version 4.0"},
      {std::string("\x93NUMPY\x01\x01", 8), "version 1.1"},
      {std::string("\x93NUMPY\x01\x00", 8), "no header length"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "header of 255 bytes"},
      {npy_bytes(hdr, data.substr(0, 7)), "needs 8 bytes but the file has 7 (truncated)"},
      {npy_bytes(hdr, data + "x"), "(trailing bytes)"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data), "Fortran-order"},
      {npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data), "big-endian"},
      {npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data), "unsupported .npy dtype '<c8'"},
      {npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data), "structured"},
      {npy_bytes("{'descr': '<f4', 'shape': (2,), }", data), "needs the keys"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data), "unexpected key 'x'"},
      {npy_bytes("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", data), "duplicate key"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", data), "expected True or False"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data), "non-negative integer"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,) ", data), "expected '}'"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", data), "trailing characters"},
      {npy_bytes("{'descr': '<f4, 'fortran_order': False}", data), "malformed .npy header"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", data), "too large"},
      {npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536, 65536), }", data), "too large"},
      {npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296,), }", data),
       "needs 34359738368 bytes but the file has 8 (truncated)"},
  };
  for (const auto& [bytes, part] : cases) {
    std::string e = error_of(bytes);
    EXPECT_EQ(e.rfind("x.npy: ", 0), 0u) << e;
    EXPECT_NE(e.find(part), std::string::npos) << "want '" << part << "', got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

TEST(Npy, ReadNpyNamesThePathOfMissingAndBadFiles) {
  const std::string dir = test::temp_dir("npyerr");
  try {
    read_npy(dir + "/nope.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/nope.npy"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/bad.npy") << "hello";
  try {
    read_npy(dir + "/bad.npy");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/bad.npy: error: not a .npy file"), std::string::npos) << e.what();
  }
}

TEST(Npy, WriteFileAtomicReplacesAndLeavesNoTempFiles) {
  namespace fs = std::filesystem;
  const std::string dir = test::temp_dir("atomic");
  const std::string path = dir + "/out.bin";
  write_file_atomic(path, "first");
  write_file_atomic(path, std::string("sec\0nd", 6));
  std::ifstream in(path, std::ios::binary);
  std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(got, std::string("sec\0nd", 6));
  int entries = 0;
  for (auto& e : fs::directory_iterator(dir)) (void)e, ++entries;
  EXPECT_EQ(entries, 1);
  EXPECT_THROW(write_file_atomic(dir + "/no/such/dir/x", "x"), Error);
}

}  // namespace
}  // namespace milrt
