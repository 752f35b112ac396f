// Blob storage v2: reading every dtype code from hand-built files, the raw
// array convention, corrupt files, BlobWriter round trips, and every BLOBFILE
// of the real Silero bundles.
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "milrt/blob.h"
#include "support/test_util.h"

namespace milrt {
namespace {

using Bytes = std::vector<uint8_t>;

void put32(Bytes& b, size_t at, uint32_t v) { for (int i = 0; i < 4; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i)); }
void put64(Bytes& b, size_t at, uint64_t v) { for (int i = 0; i < 8; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i)); }

// One hand-written metadata record and its data bytes.
struct Rec {
  uint32_t code;
  Bytes data;
  uint64_t padding_bits = 0;
};

// A blob storage v2 file laid out as coremltools does: header, then each
// record on a 64-byte boundary with its data right after it. `offsets`
// receives each record's offset.
Bytes v2_file(const std::vector<Rec>& recs, std::vector<uint64_t>* offsets = nullptr) {
  Bytes b(64, 0);
  put32(b, 0, uint32_t(recs.size()));
  put32(b, 4, 2);
  for (const Rec& r : recs) {
    size_t meta = b.size();
    if (offsets) offsets->push_back(meta);
    b.resize(meta + 64, 0);
    put32(b, meta, 0xDEADBEEF);
    put32(b, meta + 4, r.code);
    put64(b, meta + 8, r.data.size());
    put64(b, meta + 16, meta + 64);
    put64(b, meta + 24, r.padding_bits);
    b.insert(b.end(), r.data.begin(), r.data.end());
    b.resize((b.size() + 63) / 64 * 64, 0);
  }
  return b;
}

std::shared_ptr<Buffer> map_bytes(const Bytes& b, const std::string& name = "w.bin") {
  static int n = 0;
  std::string path = test::temp_dir("blob") + "/" + std::to_string(n++) + name;
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  return map_file(path);
}

std::string error_of(const std::shared_ptr<Buffer>& f, uint64_t off, DType t, const Shape& s) {
  try {
    read_blob(f, off, t, s, "W");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Blob, DtypeCodesRoundTrip) {
  const std::pair<int, DType> codes[] = {
      {1, DType::FP16},   {2, DType::FP32},    {3, DType::UInt8},   {4, DType::Int8},   {5, DType::BF16},
      {6, DType::Int16},  {7, DType::UInt16},  {8, DType::Int4},    {9, DType::UInt1},  {10, DType::UInt2},
      {11, DType::UInt4}, {12, DType::UInt3},  {13, DType::UInt6},  {14, DType::Int32}, {15, DType::UInt32},
      {16, DType::FP8E4M3}, {17, DType::FP8E5M2}};
  for (auto [code, dt] : codes) {
    EXPECT_EQ(blob_dtype_code(dt), code) << dtype_name(dt);
    DType back;
    ASSERT_TRUE(blob_dtype_from_code(uint32_t(code), &back));
    EXPECT_EQ(back, dt);
  }
  DType unused;
  EXPECT_FALSE(blob_dtype_from_code(0, &unused));
  EXPECT_FALSE(blob_dtype_from_code(18, &unused));
  for (DType dt : {DType::Bool, DType::Int64, DType::UInt64, DType::FP64, DType::String})
    EXPECT_EQ(blob_dtype_code(dt), -1) << dtype_name(dt);
}

// Every code 1-17 from bytes written by hand, with the values they encode.
TEST(Blob, ReadsEveryDtypeCode) {
  struct Case {
    DType dt;
    Bytes data;
    uint64_t padding;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {DType::FP16, {0x00, 0x3C, 0x00, 0xC0, 0x00, 0x38}, 0, {1.0, -2.0, 0.5}},
      {DType::FP32, {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x80, 0xBE}, 0, {1.5, -0.25}},
      {DType::UInt8, {0, 200, 255}, 0, {0, 200, 255}},
      {DType::Int8, {0x80, 0x7F, 0xFF}, 0, {-128, 127, -1}},
      {DType::BF16, {0x80, 0x3F, 0x40, 0xC0}, 0, {1.0, -3.0}},
      {DType::Int16, {0x00, 0x80, 0x34, 0x12}, 0, {-32768, 0x1234}},
      {DType::UInt16, {0xFF, 0xFF, 0x01, 0x00}, 0, {65535, 1}},
      // int4 LSB-first: 0x8F = [0xF, 0x8] = [-1, -8]; 0x71 = [1, 7].
      {DType::Int4, {0x8F, 0x71}, 0, {-1, -8, 1, 7}},
      // uint1: 0b10110010 then two more bits (0b11) and 6 bits of padding.
      {DType::UInt1, {0xB2, 0x03}, 6, {0, 1, 0, 0, 1, 1, 0, 1, 1, 1}},
      {DType::UInt2, {0xE4, 0x02}, 6, {0, 1, 2, 3, 2}},
      {DType::UInt4, {0xA5, 0x0F}, 4, {5, 10, 15}},
      // uint3 [5, 3, 7, 0, 6]: 7 straddles bytes 0 and 1; 15 bits, 1 bit of padding.
      {DType::UInt3, {0xDD, 0x61}, 1, {5, 3, 7, 0, 6}},
      // uint6 [63, 1, 42, 17]: 24 bits, elements 1 and 2 straddle bytes.
      {DType::UInt6, {0x7F, 0xA0, 0x46}, 0, {63, 1, 42, 17}},
      {DType::Int32, {0xFB, 0xFF, 0xFF, 0xFF, 0xA0, 0x86, 0x01, 0x00}, 0, {-5, 100000}},
      {DType::UInt32, {0x00, 0x28, 0x6B, 0xEE}, 0, {4000000000.0}},
      {DType::FP8E4M3, {0x38, 0xC0}, 0, {1.0, -2.0}},
      {DType::FP8E5M2, {0x3C, 0xC0}, 0, {1.0, -2.0}},
  };
  std::vector<Rec> recs;
  for (const Case& c : cases) recs.push_back({uint32_t(blob_dtype_code(c.dt)), c.data, c.padding});
  std::vector<uint64_t> offs;
  auto f = map_bytes(v2_file(recs, &offs));
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Tensor t = read_blob(f, offs[i], c.dt, {int64_t(c.want.size())}, "W");
    EXPECT_EQ(t.dtype(), c.dt);
    EXPECT_EQ(test::values(t), c.want) << dtype_name(c.dt);
  }
}

TEST(Blob, ByteAlignedDataIsAViewWhenAligned) {
  std::vector<uint64_t> offs;
  auto f = map_bytes(v2_file({{2, {0, 0, 0x80, 0x3F, 0, 0, 0, 0x40}}}, &offs));
  Tensor t = read_blob(f, offs[0], DType::FP32, {2}, "W");
  EXPECT_EQ(t.data(), static_cast<const void*>(f->data() + 128));
  EXPECT_EQ(test::values(t), (std::vector<double>{1.0, 2.0}));

  // fp16 data at an odd absolute offset is copied, with the same values.
  Bytes b = v2_file({{1, {0, 0x55, 0x3C, 0}}});
  put64(b, 64 + 8, 2);
  put64(b, 64 + 16, 129);
  auto g = map_bytes(b);
  Tensor u = read_blob(g, 64, DType::FP16, {1}, "W");
  EXPECT_EQ(u.at(0), 1.0 + 85.0 / 1024);
  EXPECT_NE(u.data(), static_cast<const void*>(g->data() + 129));
}

TEST(Blob, RawArraysWithoutHeader) {
  // fp16 [1, -2] at offset 0, then a raw int4 array at offset 4.
  auto f = map_bytes({0x00, 0x3C, 0x00, 0xC0, 0x8F, 0x71});
  EXPECT_EQ(test::values(read_blob(f, 0, DType::FP16, {2}, "W")), (std::vector<double>{1, -2}));
  EXPECT_EQ(test::values(read_blob(f, 4, DType::Int4, {2, 2}, "W")), (std::vector<double>{-1, -8, 1, 7}));
  // Raw reads work for dtypes that have no blob code, too.
  EXPECT_EQ(test::values(read_blob(f, 4, DType::Bool, {2}, "W")), (std::vector<double>{1, 1}));
  std::string e = error_of(f, 0, DType::FP16, {4});
  EXPECT_NE(e.find("W: blob at offset 0"), std::string::npos) << e;
  EXPECT_NE(e.find("needs 8 bytes but the file has 6"), std::string::npos) << e;
  EXPECT_NE(error_of(f, 7, DType::UInt8, {0}).find("needs 0 bytes"), std::string::npos);
  // A raw int32 array whose second element is 2 is still raw: the header's
  // reserved bytes are not all zero.
  Bytes raw(64, 0);
  put32(raw, 4, 2);
  raw[8] = 9;
  EXPECT_EQ(read_blob(map_bytes(raw), 0, DType::Int32, {16}, "W").at(1), 2);
}

TEST(Blob, EmptyFileAndZeroElementTensors) {
  auto f = map_bytes({});
  EXPECT_EQ(f->size(), 0u);
  EXPECT_EQ(read_blob(f, 0, DType::FP32, {0, 3}, "W").numel(), 0);
  std::vector<uint64_t> offs;
  auto g = map_bytes(v2_file({{2, {}}}, &offs));
  EXPECT_EQ(read_blob(g, offs[0], DType::FP32, {0}, "W").numel(), 0);
}

TEST(Blob, CorruptFilesGiveClearErrors) {
  std::vector<uint64_t> offs;
  Bytes good = v2_file({{1, {0, 0x3C, 0, 0x40}}, {11, {0x21}}}, &offs);
  auto expect_error = [](const Bytes& b, uint64_t off, DType t, const Shape& s, const std::string& part) {
    std::string e = error_of(map_bytes(b), off, t, s);
    EXPECT_NE(e.find(part), std::string::npos) << "got: " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  };
  // An offset that does not point at a record of a v2 file is an error, not a raw read.
  expect_error(good, 0, DType::FP16, {2}, "no metadata record (sentinel 0xDEADBEEF)");
  Bytes bad_sentinel = good;
  bad_sentinel[64] = 0;
  expect_error(bad_sentinel, 64, DType::FP16, {2}, "W: blob at offset 64: no metadata record");
  expect_error(good, good.size() - 32, DType::FP16, {2}, "lies past the end of the file");
  expect_error(good, 1u << 30, DType::FP16, {2}, "lies past the end of the file");
  Bytes size_past_end = good;
  put64(size_past_end, 64 + 8, 1000);
  expect_error(size_past_end, 64, DType::FP16, {500}, "lies past the end of the file");
  Bytes offset_past_end = good;
  put64(offset_past_end, 64 + 16, ~uint64_t(0) - 2);
  expect_error(offset_past_end, 64, DType::FP16, {2}, "lies past the end of the file");
  expect_error(good, 64, DType::FP16, {3}, "the record holds 4 bytes but fp16 [3] needs 6");
  expect_error(good, 64, DType::FP16, {1}, "the record holds 4 bytes but fp16 [1] needs 2");
  expect_error(good, offs[1], DType::UInt4, {3}, "the record holds 2 elements but uint4 [3] needs 3");
  Bytes truncated(good.begin(), good.begin() + 130);
  expect_error(truncated, 64, DType::FP16, {2}, "lies past the end of the file (130 bytes)");
  Bytes unknown_code = good;
  put32(unknown_code, 64 + 4, 99);
  expect_error(unknown_code, 64, DType::FP16, {2}, "unknown blob dtype code 99");
  expect_error(good, 64, DType::FP32, {1}, "the record holds fp16 (code 1) but the value is declared fp32");
  expect_error(good, 64, DType::Int16, {2}, "declared int16");
  expect_error(good, offs[1], DType::Int4, {2}, "the record holds uint4 (code 11) but the value is declared int4");
  Bytes bad_padding = good;
  put64(bad_padding, offs[1] + 24, 8);
  expect_error(bad_padding, offs[1], DType::UInt4, {0}, "invalid padding_bits 8");
  Bytes odd_padding = v2_file({{12, {0xDD, 0x61}, 2}});
  expect_error(odd_padding, 64, DType::UInt3, {5}, "invalid padding_bits 2 for 2 bytes of uint3");
  // Shapes that cannot be real are refused before anything is allocated.
  expect_error(good, 64, DType::FP16, {-1, 2}, "unknown or negative dim");
  expect_error(good, 64, DType::FP16, {int64_t(1) << 20, int64_t(1) << 20}, "is too large");
  expect_error(good, 64, DType::String, {1}, "string");
}

// The only combinations accepted although the record's code differs:
// same-width integers of the other signedness (coremltools' writer picks
// those codes from the numpy value, not the MIL dtype).
TEST(Blob, CompatibleRecordCodes) {
  std::vector<uint64_t> offs;
  auto f = map_bytes(v2_file({{4, {0xFF, 0x01}}, {3, {0x80}}, {11, {0x21, 0x43}, 0}, {6, {0xFF, 0xFF}},
                              {15, {0xFF, 0xFF, 0xFF, 0xFF}}, {5, {0x80, 0x3F}}},
                             &offs));
  EXPECT_EQ(test::values(read_blob(f, offs[0], DType::UInt8, {2}, "W")), (std::vector<double>{255, 1}));
  EXPECT_EQ(read_blob(f, offs[1], DType::Int8, {1}, "W").at(0), -128);
  EXPECT_EQ(test::values(read_blob(f, offs[2], DType::UInt4, {4}, "W")), (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(read_blob(f, offs[3], DType::UInt16, {1}, "W").at(0), 65535);
  EXPECT_EQ(read_blob(f, offs[4], DType::Int32, {1}, "W").at(0), -1);
  // Packed sub-byte data under a byte type, other widths, float vs int: refused.
  EXPECT_NE(error_of(f, offs[2], DType::UInt8, {2}).find("holds uint4 (code 11) but the value is declared uint8"),
            std::string::npos);
  EXPECT_NE(error_of(f, offs[2], DType::Int4, {4}).find("declared int4"), std::string::npos);
  EXPECT_NE(error_of(f, offs[0], DType::FP8E4M3, {2}).find("declared fp8e4m3fn"), std::string::npos);
  EXPECT_NE(error_of(f, offs[3], DType::FP16, {1}).find("declared fp16"), std::string::npos);
  EXPECT_NE(error_of(f, offs[5], DType::FP16, {1}).find("holds bf16 (code 5)"), std::string::npos);
  EXPECT_NE(error_of(f, offs[4], DType::FP32, {1}).find("declared fp32"), std::string::npos);
}

TEST(Blob, MapFileErrorsNameThePath) {
  std::string dir = test::temp_dir("blobmap");
  try {
    map_file(dir + "/missing.bin");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(dir + "/missing.bin: error: cannot open"), std::string::npos) << e.what();
  }
  try {
    map_file(dir);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

TEST(Blob, MappingOutlivesEverythingButItsTensors) {
  std::vector<uint64_t> offs;
  Tensor t;
  {
    auto f = map_bytes(v2_file({{2, {0, 0, 0x80, 0x3F}}}, &offs));
    t = read_blob(f, offs[0], DType::FP32, {1}, "W");
  }
  EXPECT_EQ(t.at(0), 1.0);
  EXPECT_THROW(t.mutable_data(), Error);  // mapped bytes are read-only
}

TEST(Blob, PackBits) {
  EXPECT_EQ(pack_bits(test::make(DType::UInt3, {5}, {5, 3, 7, 0, 6})), (Bytes{0xDD, 0x61}));
  EXPECT_EQ(pack_bits(test::make(DType::UInt6, {4}, {63, 1, 42, 17})), (Bytes{0x7F, 0xA0, 0x46}));
  EXPECT_EQ(pack_bits(test::make(DType::Int4, {4}, {-1, -8, 1, 7})), (Bytes{0x8F, 0x71}));
  EXPECT_EQ(pack_bits(test::make(DType::UInt1, {3}, {1, 0, 1})), (Bytes{0x05}));
  EXPECT_THROW(pack_bits(test::make(DType::UInt8, {1}, {1})), Error);
  Tensor bad(DType::UInt2, {2});
  static_cast<uint8_t*>(bad.mutable_data())[1] = 4;
  EXPECT_THROW(pack_bits(bad), Error);
}

TEST(Blob, WriterLayoutAndRoundTrip) {
  const std::vector<Tensor> ts = {
      test::make(DType::FP16, {2, 2}, {1, -2, 0.5, 65504}),
      test::make(DType::UInt3, {5}, {5, 3, 7, 0, 6}),
      test::make(DType::FP32, {3}, {1e-7, 3.25, -1}),
      test::make(DType::Int4, {3}, {-8, 7, -1}),
      test::make(DType::UInt8, {70}, std::vector<double>(70, 9)),
      test::make(DType::BF16, {1}, {-3}),
      test::make(DType::Int32, {}, {-7}),
      test::make(DType::FP8E5M2, {2}, {1, -2}),
      Tensor(DType::FP32, {0}),
  };
  BlobWriter w;
  std::vector<uint64_t> offs;
  for (const Tensor& t : ts) offs.push_back(w.add(t));
  const Bytes& b = w.bytes();
  EXPECT_EQ(b[0], ts.size());
  EXPECT_EQ(b[4], 2);
  EXPECT_EQ(offs[0], 64u);
  EXPECT_EQ(b[64 + 16], 128);  // data right after the first record
  EXPECT_EQ(offs[1], 192u);    // 8 bytes of data, padded to the next 64-byte boundary
  EXPECT_EQ(b[offs[1] + 4], 12);   // uint3
  EXPECT_EQ(b[offs[1] + 8], 2);    // 2 bytes
  EXPECT_EQ(b[offs[1] + 24], 1);   // 1 padding bit
  EXPECT_EQ(b[offs[1] + 64], 0xDD);
  EXPECT_EQ(b.size() % 64, 0u);
  EXPECT_THROW(w.add(test::make(DType::FP64, {1}, {1})), Error);

  std::string path = test::temp_dir("blobw") + "/weight.bin";
  w.write(path);
  auto f = map_file(path);
  ASSERT_EQ(f->size(), b.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    Tensor t = read_blob(f, offs[i], ts[i].dtype(), ts[i].shape(), "W");
    EXPECT_TRUE(t.same_bytes(ts[i])) << i;
  }
  // No temp file is left beside it.
  int entries = 0;
  for (auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path())) (void)e, ++entries;
  EXPECT_EQ(entries, 1);
}

// Every BLOBFILE literal of the real bundles loads, and a few values match
// the bytes read independently from weight.bin.
TEST(Blob, ReadsEveryBlobOfTheRealSileroModels) {
  MILRT_REQUIRE_SHARED();
  namespace fs = std::filesystem;
  int bundles = 0, blobs = 0;
  for (auto& e : fs::directory_iterator(test::shared_dir() + "/testdata/coreml/silero-vad")) {
    if (e.path().extension() != ".mlmodelc") continue;
    ++bundles;
    Program p = load_model(e.path().string());
    std::ifstream raw(e.path() / "weights" / "weight.bin", std::ios::binary);
    for (const Op& op : p.functions.at(0).ops) {
      for (const Input& in : op.inputs) {
        if (in.arg.kind != Arg::Kind::Const || in.arg.lit->blob_path.empty()) continue;
        const Literal& l = *in.arg.lit;
        ++blobs;
        ASSERT_EQ(l.value.shape(), l.type.shape) << op.type << " " << in.key;
        ASSERT_EQ(l.value.dtype(), l.type.dtype);
        // The first element, straight from the file: data sits 64 bytes after the record.
        uint8_t first[4] = {};
        raw.seekg(std::streamoff(l.blob_offset + 64));
        raw.read(reinterpret_cast<char*>(first), std::streamsize(dtype_size(l.type.dtype)));
        if (l.value.numel()) {
          EXPECT_EQ(l.value.at(0), load_as_double(first, l.type.dtype, 0)) << e.path();
        }
      }
    }
  }
  EXPECT_EQ(bundles, 16);
  EXPECT_EQ(blobs, 332);
}

}  // namespace
}  // namespace milrt
