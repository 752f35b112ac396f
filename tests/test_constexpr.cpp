// const and the constexpr_* decompression ops, run through MIL text in both
// forms (iOS16 attributes in program 1.0, iOS18 arguments in program 1.3),
// with BLOBFILE literals in files written here. Expected values are worked
// out by hand or by the plain loops in each test.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "milrt/blob.h"
#include "reference/ref_ops.h"
#include "support/test_util.h"

namespace milrt {
namespace {

using test::make;
using test::values;
using V = std::vector<double>;

double f16(double v) { return f16_to_f32(f32_to_f16(float(v))); }

// Runs iOS16-form statements in a program(1.0) function with no inputs.
TensorMap run16(const std::string& body, const std::string& outs) {
  return test::run_program("program(1.0)\n{\n    func main<ios16>() {\n" + body + "\n    } -> (" + outs + ");\n}\n",
                           {});
}

TensorMap run18(const std::string& body, const std::string& outs) { return test::run_body("", body, outs, {}); }

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR(stmt, part)                                                   \
  do {                                                                             \
    std::string e_ = error_of([&] { stmt; });                                      \
    EXPECT_NE(e_.find(part), std::string::npos) << "want '" << part << "', got: " << e_; \
  } while (0)

// A blob storage file holding `ts`; `offsets` receives their record offsets.
std::string blob_file(const std::vector<Tensor>& ts, std::vector<uint64_t>& offsets) {
  BlobWriter w;
  for (const Tensor& t : ts) offsets.push_back(w.add(t));
  static int n = 0;
  std::string path = test::temp_dir("constexpr") + "/w" + std::to_string(n++) + ".bin";
  w.write(path);
  return path;
}

std::string blobref16(const std::string& type, const std::string& path, uint64_t off) {
  return type + "(BLOBFILE(path = tensor<string, []>(\"" + path + "\"), offset = tensor<uint64, []>(" +
         std::to_string(off) + ")))";
}
std::string blobref18(const std::string& type, const std::string& path, uint64_t off) {
  return type + "(BLOBFILE(path = string(\"" + path + "\"), offset = uint64(" + std::to_string(off) + ")))";
}

TEST(Const, LiteralsInlineAndFromBlobs) {
  std::vector<uint64_t> off;
  std::string path = blob_file({make(DType::FP16, {2, 2}, {1, -2, 0.5, 3})}, off);
  auto r = run18("        tensor<fp32, [3]> a = const()[name = string(\"a\"), val = tensor<fp32, [3]>([1.5, -2, 0x1p-3])];\n"
                 "        tensor<fp16, [2, 2]> b = const()[name = string(\"b\"), val = " +
                     blobref18("tensor<fp16, [2, 2]>", path, off[0]) + "];\n"
                 "        int32 c = const()[name = string(\"c\"), val = int32(-7)];",
                 "a, b, c");
  EXPECT_EQ(values(r.at("a")), (V{1.5, -2, 0.125}));
  EXPECT_EQ(r.at("b").dtype(), DType::FP16);
  EXPECT_EQ(values(r.at("b")), (V{1, -2, 0.5, 3}));
  EXPECT_EQ(values(r.at("c")), (V{-7}));
  EXPECT_ERROR(run18("        tensor<fp32, [2]> a = const()[name = string(\"a\"), val = tensor<fp32, [3]>([1, 2, 3])];", "a"),
               "const");
}

TEST(ConstexprAffineDequantize, PerChannelAndScalarParameters) {
  // scale * (q - zero_point) along axis 1 (given as -1): q int8 [2, 3],
  // zero_point int8 [3], scale fp16 [3].
  auto r = run16(
      "        tensor<fp16, [2, 3]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(-1), "
      "name = tensor<string, []>(\"w\"), quantized_data = tensor<int8, [2, 3]>([[-128, 0, 127], [5, -5, 10]]), "
      "scale = tensor<fp16, [3]>([0.5, 0.25, 2]), zero_point = tensor<int8, [3]>([1, -2, 3])];",
      "w");
  EXPECT_EQ(r.at("w").dtype(), DType::FP16);
  EXPECT_EQ(values(r.at("w")), (V{0.5 * -129, 0.25 * 2, 2 * 124, 0.5 * 4, 0.25 * -3, 2 * 7}));

  // uint8 data, scalar uint8 zero point, per-row fp32 scale along axis 0.
  r = run16(
      "        tensor<fp32, [2, 2]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(0), "
      "name = tensor<string, []>(\"w\"), quantized_data = tensor<uint8, [2, 2]>([[0, 255], [128, 129]]), "
      "scale = tensor<fp32, [2]>([0.1, 3]), zero_point = tensor<uint8, []>(128)];",
      "w");
  EXPECT_EQ(values(r.at("w")), (V{float(0.1f * -128.0f), float(0.1f * 127.0f), 0, 3}));

  // An fp32 zero point: coremltools subtracts in fp32, multiplies in fp32, then rounds to fp16.
  r = run16(
      "        tensor<fp16, [1]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(0), "
      "name = tensor<string, []>(\"w\"), quantized_data = tensor<int8, [1]>([3]), "
      "scale = tensor<fp16, []>(0.1), zero_point = tensor<fp32, []>(0.1)];",
      "w");
  const float diff = 3.0f - 0.1f;
  EXPECT_EQ(values(r.at("w")), (V{f16(diff * float(f16(0.1)))}));
}

TEST(ConstexprAffineDequantize, FromBlobsAndErrors) {
  std::vector<uint64_t> off;
  std::string path = blob_file({make(DType::Int8, {2, 2}, {-1, 2, 3, -4}), make(DType::FP16, {2}, {0.5, 2}),
                                make(DType::Int8, {2}, {0, 1})},
                               off);
  auto r = run16("        tensor<fp16, [2, 2]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(1), "
                 "name = tensor<string, []>(\"w\"), quantized_data = " +
                     blobref16("tensor<int8, [2, 2]>", path, off[0]) +
                     ", scale = " + blobref16("tensor<fp16, [2]>", path, off[1]) +
                     ", zero_point = " + blobref16("tensor<int8, [2]>", path, off[2]) + "];",
                 "w");
  EXPECT_EQ(values(r.at("w")), (V{-0.5, 2, 1.5, -10}));

  auto bad = [](const std::string& attrs) {
    run16("        tensor<fp16, [2, 2]> w = constexpr_affine_dequantize()[name = tensor<string, []>(\"w\"), "
          "quantized_data = tensor<int8, [2, 2]>([[1, 2], [3, 4]]), " + attrs + "];",
          "w");
  };
  EXPECT_ERROR(bad("axis = tensor<int32, []>(2), scale = tensor<fp16, []>(1), zero_point = tensor<int8, []>(0)"),
               "constexpr_affine_dequantize");
  EXPECT_ERROR(bad("axis = tensor<int32, []>(0), scale = tensor<fp16, [3]>([1, 2, 3]), zero_point = tensor<int8, []>(0)"),
               "input 'scale' has 3 elements");
  EXPECT_ERROR(bad("axis = tensor<int32, []>(0), scale = tensor<fp16, [1, 2]>([[1, 2]]), zero_point = tensor<int8, []>(0)"),
               "must be a scalar or a vector");
  EXPECT_ERROR(bad("axis = tensor<int32, []>(0), scale = tensor<int32, []>(1), zero_point = tensor<int8, []>(0)"),
               "input 'scale' must be one of {fp16, fp32}");
}

// The first seed's case: int8 [128, 64] data and fp16 [128, 2] scales in raw
// (headerless) files, so each scale covers a 1 x 32 block.
TEST(ConstexprBlockwiseShiftScale, FirstSeedRawFiles) {
  const std::string dir = test::temp_dir("seed");
  std::vector<int8_t> q(128 * 64);
  std::vector<uint16_t> s(128 * 2);
  for (size_t i = 0; i < 128; ++i) {
    for (size_t j = 0; j < 64; ++j) q[i * 64 + j] = int8_t(int((i * 7 + j * 13) % 256) - 128);
    for (size_t b = 0; b < 2; ++b) s[i * 2 + b] = f32_to_f16(0.001f * float(i + 1) * float(b + 1));
  }
  std::ofstream(dir + "/wu_q8.bin", std::ios::binary).write(reinterpret_cast<const char*>(q.data()), 128 * 64);
  std::ofstream(dir + "/wu_sc.bin", std::ios::binary).write(reinterpret_cast<const char*>(s.data()), 128 * 2 * 2);
  auto r = run18(
      "        tensor<int8, [128, 64]> Wu_q = const()[val = tensor<int8, [128, 64]>(BLOBFILE(path = string(\"" + dir +
          "/wu_q8.bin\"), offset = uint64(0)))];\n"
          "        tensor<fp16, [128, 2]> Wu_s = const()[val = tensor<fp16, [128, 2]>(BLOBFILE(path = string(\"" + dir +
          "/wu_sc.bin\"), offset = uint64(0)))];\n"
          "        tensor<fp16, [128, 64]> Wu = constexpr_blockwise_shift_scale(data = Wu_q, scale = Wu_s)[name = string(\"Wu\")];",
      "Wu");
  const Tensor& w = r.at("Wu");
  ASSERT_EQ(w.shape(), (Shape{128, 64}));
  ASSERT_EQ(w.dtype(), DType::FP16);
  for (size_t i = 0; i < 128; ++i)
    for (size_t j = 0; j < 64; ++j) {
      double want = f16(double(f16_to_f32(s[i * 2 + j / 32])) * q[i * 64 + j]);
      ASSERT_EQ(w.at(i * 64 + j), want) << i << "," << j;
    }
}

TEST(ConstexprBlockwiseShiftScale, OffsetsAndSubByteData) {
  // int4 data [2, 4] from a blob, blocks of [1, 2] (scale [2, 2]), int4 offsets.
  std::vector<uint64_t> off;
  std::string path = blob_file({make(DType::Int4, {2, 4}, {-8, 7, 1, -1, 0, 3, -2, 5})}, off);
  auto r = run18("        tensor<fp16, [2, 4]> w = constexpr_blockwise_shift_scale(data = " +
                     blobref18("tensor<int4, [2, 4]>", path, off[0]) +
                     ", scale = tensor<fp16, [2, 2]>([[0.5, 2], [1, 0.25]]), offset = tensor<int4, [2, 2]>([[1, -1], [2, 0]]))"
                     "[name = string(\"w\")];",
                 "w");
  EXPECT_EQ(values(r.at("w")), (V{0.5 * -9, 0.5 * 6, 2 * 2, 2 * 0, 1 * -2, 1 * 1, 0.25 * -2, 0.25 * 5}));

  // fp32 scale over a whole dim (scale [1, 3] for data [2, 3]), fp32 offsets, uint8 data.
  r = run18("        tensor<fp32, [2, 3]> w = constexpr_blockwise_shift_scale(data = tensor<uint8, [2, 3]>([[0, 10, 255], "
            "[1, 2, 3]]), scale = tensor<fp32, [1, 3]>([[1, 0.5, -1]]), offset = tensor<fp32, [1, 3]>([[0.5, 0, 255]]))"
            "[name = string(\"w\")];",
            "w");
  EXPECT_EQ(values(r.at("w")), (V{-0.5, 5, 0, 0.5, 1, 252}));

  // fp16 scale with an fp32 offset: numpy's difference is fp32 (unrounded to fp16).
  r = run18("        tensor<fp16, [1, 1]> w = constexpr_blockwise_shift_scale(data = tensor<int8, [1, 1]>([[100]]), "
            "scale = tensor<fp16, [1, 1]>([[1]]), offset = tensor<fp32, [1, 1]>([[0.0001]]))[name = string(\"w\")];",
            "w");
  EXPECT_EQ(values(r.at("w")), (V{f16(double(100.0f - 0.0001f))}));

  auto bad = [](const std::string& args) {
    run18("        tensor<fp16, [2, 4]> w = constexpr_blockwise_shift_scale(data = tensor<int8, [2, 4]>([[1, 2, 3, 4], "
          "[5, 6, 7, 8]]), " + args + ")[name = string(\"w\")];",
          "w");
  };
  EXPECT_ERROR(bad("scale = tensor<fp16, [2, 3]>([[1, 1, 1], [1, 1, 1]])"), "constexpr_blockwise_shift_scale 'w'");
  EXPECT_ERROR(bad("scale = tensor<fp16, [2, 3]>([[1, 1, 1], [1, 1, 1]])"), "must divide the data dim");
  EXPECT_ERROR(bad("scale = tensor<fp16, [2]>([1, 1])"), "same rank");
  EXPECT_ERROR(bad("scale = tensor<fp16, [2, 1]>([[1], [1]]), offset = tensor<uint8, [2, 1]>([[1], [1]])"),
               "must have the data's dtype int8");
  EXPECT_ERROR(bad("scale = tensor<fp16, [2, 1]>([[1], [1]]), offset = tensor<int8, [1, 1]>([[1]])"),
               "must have the shape of 'scale'");
}

TEST(ConstexprLutToDense, IOS16PackedIndices) {
  // 2-bit: indices [3, 0, 1, 2, 2, 1] packed LSB-first = 0b10010011, 0b0110.
  auto r = run16(
      "        tensor<fp16, [2, 3]> w = constexpr_lut_to_dense()[indices = tensor<uint8, [2]>([147, 6]), "
      "lut = tensor<fp16, [4]>([-1, 0.5, 2, 10]), name = tensor<string, []>(\"w\"), shape = tensor<uint32, [2]>([2, 3])];",
      "w");
  EXPECT_EQ(values(r.at("w")), (V{10, -1, 0.5, 2, 2, 0.5}));

  // 6-bit from a blob: [63, 1, 42, 17, 5] packed = 7F A0 46 05; the 2nd and 3rd straddle bytes.
  std::vector<float> lut(64);
  for (size_t i = 0; i < 64; ++i) lut[i] = 1.5f * float(i) - 7;
  Tensor lut_t(DType::FP32, {64});
  for (size_t i = 0; i < 64; ++i) lut_t.set(i, lut[i]);
  std::vector<uint64_t> off;
  std::string path = blob_file({make(DType::UInt8, {4}, {0x7F, 0xA0, 0x46, 0x05}), lut_t}, off);
  r = run16("        tensor<fp32, [5]> w = constexpr_lut_to_dense()[indices = " +
                blobref16("tensor<uint8, [4]>", path, off[0]) + ", lut = " + blobref16("tensor<fp32, [64]>", path, off[1]) +
                ", name = tensor<string, []>(\"w\"), shape = tensor<uint32, [1]>([5])];",
            "w");
  EXPECT_EQ(values(r.at("w")), (V{lut[63], lut[1], lut[42], lut[17], lut[5]}));

  EXPECT_ERROR(run16("        tensor<fp16, [2, 3]> w = constexpr_lut_to_dense()[indices = tensor<uint8, [3]>([1, 2, 3]), "
                     "lut = tensor<fp16, [4]>([1, 2, 3, 4]), name = tensor<string, []>(\"w\"), "
                     "shape = tensor<uint32, [2]>([2, 3])];",
                     "w"),
               "constexpr_lut_to_dense 'w'");
  EXPECT_ERROR(run16("        tensor<fp16, [4]> w = constexpr_lut_to_dense()[indices = tensor<uint8, [3]>([1, 2, 3]), "
                     "lut = tensor<fp16, [8]>([1, 2, 3, 4, 5, 6, 7, 8]), name = tensor<string, []>(\"w\"), "
                     "shape = tensor<uint32, [1]>([4])];",
                     "w"),
               "2, 4, 16, 64 or 256 entries");
}

TEST(ConstexprLutToDense, IOS18PerBlockAndVectorLuts) {
  // coremltools' docstring case 1: two 2-bit luts, one per half of axis 0.
  auto r = run18("        tensor<fp16, [6, 2]> w = constexpr_lut_to_dense(indices = tensor<uint2, [6, 2]>([[2, 3], [3, 0], "
                 "[1, 0], [3, 0], [2, 1], [0, 3]]), lut = tensor<fp16, [2, 1, 4, 1]>([[[[1], [5], [9], [13]]], "
                 "[[[2], [10], [18], [26]]]]))[name = string(\"w\")];",
                 "w");
  EXPECT_EQ(values(r.at("w")), (V{9, 13, 13, 1, 5, 1, 26, 2, 18, 10, 2, 26}));

  // Case 2: 1-bit vector palettization, vectors a = [1, 2, 3], b = [-1, -2, -3].
  const std::string idx = "indices = tensor<uint1, [2, 2, 2]>([[[0, 0], [1, 0]], [[1, 1], [0, 0]]])";
  const std::string lut = "lut = tensor<int8, [1, 1, 1, 2, 3]>([[[[[1, 2, 3], [-1, -2, -3]]]]])";
  r = run18("        tensor<int8, [2, 6, 2]> w = constexpr_lut_to_dense(" + idx + ", " + lut +
                ", vector_axis = int32(1))[name = string(\"w\")];",
            "w");
  EXPECT_EQ(values(r.at("w")), (V{1, 1, 2, 2, 3, 3, -1, 1, -2, 2, -3, 3, -1, -1, -2, -2, -3, -3, 1, 1, 2, 2, 3, 3}));
  r = run18("        tensor<int8, [2, 2, 6]> w = constexpr_lut_to_dense(" + idx + ", " + lut +
                ", vector_axis = int32(-1))[name = string(\"w\")];",
            "w");
  EXPECT_EQ(values(r.at("w")), (V{1, 2, 3, 1, 2, 3, -1, -2, -3, 1, 2, 3, -1, -2, -3, -1, -2, -3, 1, 2, 3, 1, 2, 3}));

  // uint3 indices straight from a packed blob.
  std::vector<uint64_t> off;
  std::string path = blob_file({make(DType::UInt3, {5}, {5, 3, 7, 0, 6})}, off);
  r = run18("        tensor<fp32, [5]> w = constexpr_lut_to_dense(indices = " + blobref18("tensor<uint3, [5]>", path, off[0]) +
                ", lut = tensor<fp32, [1, 8, 1]>([[[0], [10], [20], [30], [40], [50], [60], [70]]]))[name = string(\"w\")];",
            "w");
  EXPECT_EQ(values(r.at("w")), (V{50, 30, 70, 0, 60}));

  EXPECT_ERROR(run18("        tensor<int8, [2, 2, 2]> w = constexpr_lut_to_dense(" + idx + ", " + lut +
                         ")[name = string(\"w\")];",
                     "w"),
               "'vector_axis' is required");
  EXPECT_ERROR(run18("        tensor<fp16, [2]> w = constexpr_lut_to_dense(indices = tensor<uint2, [2]>([1, 2]), "
                     "lut = tensor<fp16, [1, 2, 1]>([[[1], [2]]]))[name = string(\"w\")];",
                     "w"),
               "must have 2^2 = 4 palettes");
  EXPECT_ERROR(run18("        tensor<fp16, [3]> w = constexpr_lut_to_dense(indices = tensor<uint1, [3]>([1, 0, 1]), "
                     "lut = tensor<fp16, [2, 2, 1]>([[[1], [2]], [[3], [4]]]))[name = string(\"w\")];",
                     "w"),
               "divisible");
}

TEST(ConstexprSparseToDense, IOS16PackedMask) {
  // Set bits 1, 4 and 9 of 10: 0b00010010, 0b00000010.
  auto r = run16("        tensor<fp16, [2, 5]> w = constexpr_sparse_to_dense()[mask = tensor<uint8, [2]>([18, 2]), "
                 "name = tensor<string, []>(\"w\"), nonzero_data = tensor<fp16, [3]>([1, 2, 3]), "
                 "shape = tensor<uint32, [2]>([2, 5])];",
                 "w");
  EXPECT_EQ(values(r.at("w")), (V{0, 1, 0, 0, 2, 0, 0, 0, 0, 3}));

  auto bad = [](const std::string& mask, const std::string& data) {
    run16("        tensor<fp16, [2, 5]> w = constexpr_sparse_to_dense()[mask = " + mask +
              ", name = tensor<string, []>(\"w\"), nonzero_data = " + data + ", shape = tensor<uint32, [2]>([2, 5])];",
          "w");
  };
  EXPECT_ERROR(bad("tensor<uint8, [2]>([18, 2])", "tensor<fp16, [2]>([1, 2])"),
               "the mask has 3 set bits but 'nonzero_data' has 2 elements");
  EXPECT_ERROR(bad("tensor<uint8, [2]>([18, 6])", "tensor<fp16, [4]>([1, 2, 3, 4])"), "padding bits");
  EXPECT_ERROR(bad("tensor<uint8, [1]>([18])", "tensor<fp16, [2]>([1, 2])"), "constexpr_sparse_to_dense 'w'");
}

TEST(ConstexprSparseToDense, IOS18Uint1Mask) {
  auto r = run18("        tensor<int8, [2, 3]> w = constexpr_sparse_to_dense(nonzero_data = tensor<int8, [3]>([-5, 7, 9]), "
                 "mask = tensor<uint1, [2, 3]>([[1, 0, 0], [1, 1, 0]]))[name = string(\"w\")];",
                 "w");
  EXPECT_EQ(values(r.at("w")), (V{-5, 0, 0, 7, 9, 0}));
  EXPECT_ERROR(run18("        tensor<int8, [2, 3]> w = constexpr_sparse_to_dense(nonzero_data = tensor<int8, [2]>([-5, 7]), "
                     "mask = tensor<uint1, [2, 3]>([[1, 0, 0], [1, 1, 0]]))[name = string(\"w\")];",
                     "w"),
               "constexpr_sparse_to_dense");
}

TEST(ConstexprCast, Fp16ToFp32) {
  auto r = run16("        tensor<fp32, [3]> w = constexpr_cast()[name = tensor<string, []>(\"w\"), "
                 "output_dtype = tensor<string, []>(\"fp32\"), source_val = tensor<fp16, [3]>([0.1, -65504, 1])];",
                 "w");
  EXPECT_EQ(r.at("w").dtype(), DType::FP32);
  EXPECT_EQ(values(r.at("w")), (V{f16(0.1), -65504, 1}));
  EXPECT_ERROR(run16("        tensor<int32, [1]> w = constexpr_cast()[name = tensor<string, []>(\"w\"), "
                     "output_dtype = tensor<string, []>(\"int32\"), source_val = tensor<fp16, [1]>([1])];",
                     "w"),
               "only output_dtype = \"fp32\"");
}

// coremltools' docstring examples of the two sparse-to-sparse ops.
TEST(ConstexprSparseToSparse, LutToSparseAndSparseBlockwiseShiftScale) {
  const std::string mask =
      "tensor<uint1, [4, 6]>([[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 1], [0, 1, 1, 0, 1, 0], [0, 0, 0, 1, 0, 0]])";
  const std::string nz = "tensor<uint1, [9]>([0, 1, 1, 0, 1, 1, 0, 0, 1])";
  auto r = run18("        tensor<uint1, [4, 6]> m, tensor<fp16, [9]> v = constexpr_lut_to_sparse(indices_mask = " + mask +
                     ", indices_nonzero_data = " + nz + ", lut = tensor<fp16, [1, 1, 2, 1]>([[[[2], [3]]]]))"
                     "[name = string(\"v\")];",
                 "m, v");
  EXPECT_EQ(values(r.at("v")), (V{2, 3, 3, 2, 3, 3, 2, 2, 3}));
  EXPECT_EQ(values(r.at("m")), (V{1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}));

  r = run18("        tensor<uint1, [8, 6]> m, tensor<fp16, [18]> v = constexpr_lut_to_sparse(indices_mask = " + mask +
                ", indices_nonzero_data = " + nz + ", lut = tensor<fp16, [1, 1, 2, 2]>([[[[2, 2], [3, 3]]]]), "
                "vector_axis = int32(0))[name = string(\"v\")];",
            "m, v");
  EXPECT_EQ(values(r.at("v")), (V{2, 3, 2, 3, 3, 2, 3, 3, 2, 3, 3, 2, 2, 3, 2, 2, 3, 3}));
  EXPECT_EQ(values(r.at("m")), (V{1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1,
                                  0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0}));

  r = run18("        tensor<uint1, [4, 4]> m, tensor<fp16, [9]> v = constexpr_sparse_blockwise_shift_scale("
            "data_mask = tensor<uint1, [4, 4]>([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0]]), "
            "nonzero_data = tensor<uint8, [9]>([10, 11, 3, 4, 5, 6, 7, 8, 9]), "
            "scale = tensor<fp16, [1, 4]>([[0.1, 0.2, 0.3, 0.4]]), offset = tensor<uint8, [1, 4]>([[1, 2, 3, 4]]))"
            "[name = string(\"v\")];",
            "m, v");
  const double s1 = f16(0.1), s2 = f16(0.2), s3 = f16(0.3), s4 = f16(0.4);
  EXPECT_EQ(values(r.at("v")), (V{f16(s1 * 9), f16(s2 * 9), f16(s1 * 2), f16(s2 * 2), f16(s3 * 2), f16(s3 * 3),
                                  f16(s4 * 3), f16(s1 * 7), f16(s2 * 7)}));
  EXPECT_EQ(values(r.at("m")), (V{1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0}));
}

// The verifier stops malformed constexpr ops before they run, so these call
// the reference directly: on its own it must refuse inconsistent inputs
// cleanly rather than read out of bounds.
TEST(ConstexprReference, RefusesInconsistentInputsOnItsOwn) {
  auto run = [](const std::string& type, Type out, std::vector<std::pair<std::string, std::vector<Tensor>>> ins) {
    Op op;
    op.type = type;
    op.outputs = {{"w", std::move(out)}};
    ref::RefCtx c(op, std::move(ins));
    ref::find_ref(type)(c);
  };
  EXPECT_ERROR(run("constexpr_lut_to_dense", Type::tensor(DType::FP16, {6}),
                   {{"indices", {make(DType::UInt8, {1}, {1})}}, {"lut", {make(DType::FP16, {4}, {1, 2, 3, 4})}},
                    {"shape", {make(DType::UInt32, {1}, {6})}}}),
               "constexpr_lut_to_dense 'w': packed input of 1 bytes does not hold 6 2-bit values (needs 2)");
  EXPECT_ERROR(run("constexpr_lut_to_dense", Type::tensor(DType::FP16, {2}),
                   {{"indices", {make(DType::UInt2, {2}, {3, 1})}}, {"lut", {make(DType::FP16, {1, 2, 1}, {1, 2})}}}),
               "'lut' has 2 palettes but the indices have 2 bits");
  EXPECT_ERROR(run("constexpr_sparse_to_dense", Type::tensor(DType::FP16, {3}),
                   {{"nonzero_data", {make(DType::FP16, {1}, {1})}}, {"mask", {make(DType::UInt1, {3}, {1, 1, 0})}}}),
               "the mask has 2 set bits but the nonzero data has 1 elements");
  EXPECT_ERROR(run("constexpr_blockwise_shift_scale", Type::tensor(DType::FP16, {3}),
                   {{"data", {make(DType::Int8, {3}, {1, 2, 3})}}, {"scale", {make(DType::FP16, {2}, {1, 1})}}}),
               "'scale' [2] does not tile [3] into whole blocks");
  EXPECT_ERROR(run("constexpr_affine_dequantize", Type::tensor(DType::FP16, {3}),
                   {{"quantized_data", {make(DType::Int8, {3}, {1, 2, 3})}}, {"zero_point", {make(DType::Int8, {}, {0})}},
                    {"scale", {make(DType::FP16, {2}, {1, 1})}}, {"axis", {make(DType::Int32, {}, {0})}}}),
               "must be scalars or vectors of 3 elements");
}

// Plain decoders of the three iOS16 forms, for the real models' check below.
double bits_at(const Tensor& packed, int64_t first_bit, int nbits) {
  int64_t v = 0;
  for (int b = 0; b < nbits; ++b) {
    int64_t bit = first_bit + b;
    v |= ((int64_t(packed.at(size_t(bit / 8))) >> (bit % 8)) & 1) << b;
  }
  return double(v);
}

std::vector<double> decode16(const Op& op) {
  auto in = [&](const char* k) -> const Tensor& { return op.arg(k)->lit->value; };
  const Shape out = op.outputs[0].type.shape;
  std::vector<double> r(size_t(shape_numel(out)));
  if (op.type == "constexpr_lut_to_dense") {
    const int nbits = int(std::log2(double(in("lut").numel())));
    for (size_t i = 0; i < r.size(); ++i) r[i] = in("lut").at(size_t(bits_at(in("indices"), int64_t(i) * nbits, nbits)));
  } else if (op.type == "constexpr_sparse_to_dense") {
    size_t k = 0;
    for (size_t i = 0; i < r.size(); ++i) r[i] = bits_at(in("mask"), int64_t(i), 1) ? in("nonzero_data").at(k++) : 0;
    EXPECT_EQ(int64_t(k), in("nonzero_data").numel());
  } else {
    const Tensor &q = in("quantized_data"), &zp = in("zero_point"), &sc = in("scale");
    const int64_t axis = int64_t(in("axis").at(0)), inner = shape_numel(Shape(out.begin() + axis + 1, out.end()));
    for (size_t i = 0; i < r.size(); ++i) {
      size_t a = size_t((int64_t(i) / inner) % out[size_t(axis)]);
      float z = float(zp.at(zp.numel() == 1 ? 0 : a)), s = float(sc.at(sc.numel() == 1 ? 0 : a));
      r[i] = (float(q.at(i)) - z) * s;
    }
  }
  Tensor t(op.outputs[0].type.dtype, out);  // rounded to the declared dtype
  for (size_t i = 0; i < r.size(); ++i) t.set(i, r[i]);
  return values(t);
}

// Every constexpr op of the real Silero bundles, run alone in a program of
// its own (schema, verifier and reference), against the plain decoders.
TEST(Constexpr, EveryOpOfTheRealSileroModels) {
  MILRT_REQUIRE_SHARED();
  namespace fs = std::filesystem;
  int ops = 0;
  for (auto& e : fs::directory_iterator(test::shared_dir() + "/testdata/coreml/silero-vad")) {
    if (e.path().extension() != ".mlmodelc") continue;
    const Program full = load_model(e.path().string());
    std::ifstream in(e.path() / "model.mil");
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("= constexpr_") == std::string::npos) continue;
      const size_t eq = line.find(" = ");
      const std::string name = line.substr(line.rfind(' ', eq - 1) + 1, eq - line.rfind(' ', eq - 1) - 1);
      const Op* op = nullptr;
      for (const Op& o : full.functions.at(0).ops) if (o.outputs[0].name == name) op = &o;
      ASSERT_NE(op, nullptr) << name;
      TensorMap r = test::run_program(
          "program(1.0)\n{\n    func main<ios16>() {\n" + line + "\n    } -> (" + name + ");\n}\n", {}, e.path().string());
      ASSERT_EQ(r.at(name).shape(), op->outputs[0].type.shape) << name;
      ASSERT_EQ(values(r.at(name)), decode16(*op)) << e.path() << " " << name;
      ++ops;
    }
  }
  EXPECT_EQ(ops, 98);
}

}  // namespace
}  // namespace milrt
