// The simulated Neural Engine (src/ane/sim_device.h) through its C table:
// the documented limits it enforces (one input, [1, C, 1, S] fp16/fp32
// surfaces of the declared sizes, dims up to 16384, the compile budget),
// weights fixed at compile time, per-op fp16 rounding, and the call order
// (write/evaluate/read on loaded programs only). Expected values are
// computed here by hand, never by the simulator.
#include <cstring>
#include <string>
#include <vector>

#include "ane/sim_device.h"
#include "milrt/blob.h"
#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

using ane::SimDevice;
using ane::SimLimits;

struct Compiled {
  int rc = -1;
  std::string error;
  milrt_ane_program* program = nullptr;
};

Compiled compile(milrt_ane_device* d, const std::string& mil, std::vector<size_t> in, std::vector<size_t> out,
                 const std::vector<milrt_ane_weight_file>& weights = {}) {
  Compiled c;
  char err[256] = {0};
  c.rc = d->compile(d->context, mil.data(), mil.size(), weights.data(), weights.size(), in.data(), in.size(),
                    out.data(), out.size(), &c.program, err, sizeof err);
  c.error = err;
  return c;
}

std::string fn(const std::string& params, const std::string& body, const std::string& outs) {
  return "program(1.3)\n{\n  func main<ios18>(" + params + ") {\n" + body + "  } -> (" + outs + ");\n}\n";
}

// y = x + 2^-11 on [1, 2, 1, 32] fp16: 32 x 2 x 2 = 128 bytes each way.
const std::string kAdd = fn("tensor<fp16, [1, 2, 1, 32]> x",
                            "    tensor<fp16, [1, 2, 1, 32]> y = add(x = x, y = fp16(0x1p-11))[name = string(\"y\")];\n",
                            "y");

std::vector<uint16_t> halves(size_t n, float v) { return std::vector<uint16_t>(n, f32_to_f16(v)); }

TEST(AneSimDevice, RunsAProgramRoundingEachOpToFp16) {
  SimDevice sim;
  auto* d = sim.table();
  EXPECT_STREQ(d->name, "ane-sim");
  Compiled c = compile(d, kAdd, {128}, {128});
  ASSERT_EQ(c.rc, 0) << c.error;
  char err[256];
  auto in = halves(64, 1.0f);
  in[1] = f32_to_f16(2.0f);
  ASSERT_EQ(d->write_input(d->context, c.program, 0, in.data(), 128, err, sizeof err), 0) << err;
  ASSERT_EQ(d->evaluate(d->context, c.program, err, sizeof err), 0) << err;
  std::vector<uint16_t> out(64);
  ASSERT_EQ(d->read_output(d->context, c.program, 0, out.data(), 128, err, sizeof err), 0) << err;
  // 1 + 2^-11 lies halfway between fp16 neighbours 1 and 1 + 2^-10: ties to
  // even give 1 (fp32 would keep 1.00048828125). 2 + 2^-11 rounds to 2.
  EXPECT_EQ(f16_to_f32(out[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(out[1]), 2.0f);
  EXPECT_EQ(d->compile_count(d->context), 1u);
  EXPECT_EQ(sim.loaded(), 1u);
  d->unload(d->context, c.program);
  EXPECT_EQ(sim.loaded(), 0u);
}

TEST(AneSimDevice, OneInputOnly) {
  SimDevice sim;
  auto* d = sim.table();
  const std::string two = fn("tensor<fp16, [1, 2, 1, 32]> a, tensor<fp16, [1, 2, 1, 32]> b",
                             "    tensor<fp16, [1, 2, 1, 32]> y = add(x = a, y = b)[name = string(\"y\")];\n", "y");
  Compiled c = compile(d, two, {128, 128}, {128});
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.error.find("0x1d"), std::string::npos) << c.error;
  EXPECT_EQ(c.program, nullptr);
  // One surface declared, but the function still has two parameters.
  c = compile(d, two, {128}, {128});
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.error.find("exactly one input"), std::string::npos) << c.error;
  EXPECT_EQ(d->compile_count(d->context), 2u) << "failed compiles count against the budget";
}

TEST(AneSimDevice, SurfacesAreFp16Or32RankFourOfTheDeclaredSize) {
  SimDevice sim;
  auto* d = sim.table();
  EXPECT_NE(compile(d, kAdd, {64}, {128}).error.find("128 bytes, but the surface is 64"), std::string::npos);
  EXPECT_NE(compile(d, kAdd, {128}, {256}).error.find("surface is 256"), std::string::npos);
  const std::string rank3 = fn("tensor<fp16, [1, 2, 32]> x",
                               "    tensor<fp16, [1, 2, 32]> y = relu(x = x)[name = string(\"y\")];\n", "y");
  EXPECT_NE(compile(d, rank3, {128}, {128}).error.find("[1, C, 1, S]"), std::string::npos);
  const std::string ints = fn("tensor<int32, [1, 2, 1, 32]> x",
                              "    tensor<int32, [1, 2, 1, 32]> y = abs(x = x)[name = string(\"y\")];\n", "y");
  EXPECT_NE(compile(d, ints, {256}, {256}).error.find("fp16"), std::string::npos);
  const std::string f32 = fn("tensor<fp32, [1, 2, 1, 32]> x",
                             "    tensor<fp32, [1, 2, 1, 32]> y = relu(x = x)[name = string(\"y\")];\n", "y");
  Compiled ok = compile(d, f32, {256}, {256});
  EXPECT_EQ(ok.rc, 0) << ok.error;
  const std::string wide = fn("tensor<fp16, [1, 1, 1, 16416]> x",
                              "    tensor<fp16, [1, 1, 1, 16416]> y = relu(x = x)[name = string(\"y\")];\n", "y");
  EXPECT_NE(compile(d, wide, {16416 * 2}, {16416 * 2}).error.find("above 16384"), std::string::npos);
  // An intermediate above the limit fails too (every axis is capped; docs).
  const std::string inner = fn(
      "tensor<fp16, [1, 2, 1, 16384]> x",
      "    tensor<fp16, [1, 32768]> r = reshape(x = x, shape = tensor<int32, [2]>([1, 32768]))[name = string(\"r\")];\n"
      "    tensor<fp16, [1, 2, 1, 16384]> y = reshape(x = r, shape = tensor<int32, [4]>([1, 2, 1, 16384]))[name = string(\"y\")];\n",
      "y");
  Compiled big = compile(d, inner, {65536}, {65536});
  EXPECT_NE(big.error.find("'r' (reshape) has a dim above 16384"), std::string::npos) << big.error;
  Compiled bad = compile(d, "program(1.3) { func main<ios18>( }", {128}, {128});
  EXPECT_NE(bad.rc, 0);
  EXPECT_EQ(bad.error.find('\n'), std::string::npos);
}

TEST(AneSimDevice, CompileBudgetCountsAttemptsAndRefusesWhenSpent) {
  SimDevice sim(SimLimits{3});
  auto* d = sim.table();
  EXPECT_EQ(compile(d, kAdd, {128}, {128}).rc, 0);
  EXPECT_NE(compile(d, kAdd, {64}, {128}).rc, 0);  // a failed attempt
  EXPECT_EQ(compile(d, kAdd, {128}, {128}).rc, 0);
  EXPECT_EQ(d->compile_count(d->context), 3u);
  Compiled c = compile(d, kAdd, {128}, {128});
  EXPECT_NE(c.rc, 0);
  EXPECT_NE(c.error.find("compile budget spent (3 compiles"), std::string::npos) << c.error;
  EXPECT_EQ(d->compile_count(d->context), 4u);
  EXPECT_EQ(SimLimits{}.max_compiles, 119u);
}

TEST(AneSimDevice, IoChecksSizesAndLoadedPrograms) {
  SimDevice sim;
  auto* d = sim.table();
  Compiled c = compile(d, kAdd, {128}, {128});
  ASSERT_EQ(c.rc, 0);
  char err[256];
  std::vector<uint16_t> buf(64);
  EXPECT_NE(d->read_output(d->context, c.program, 0, buf.data(), 128, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("nothing evaluated"), std::string::npos) << err;
  EXPECT_NE(d->write_input(d->context, c.program, 0, buf.data(), 126, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("126 bytes, the input is 128"), std::string::npos) << err;
  EXPECT_NE(d->write_input(d->context, c.program, 1, buf.data(), 128, err, sizeof err), 0);
  ASSERT_EQ(d->write_input(d->context, c.program, 0, buf.data(), 128, err, sizeof err), 0);
  ASSERT_EQ(d->evaluate(d->context, c.program, err, sizeof err), 0);
  EXPECT_NE(d->read_output(d->context, c.program, 0, buf.data(), 64, err, sizeof err), 0);
  EXPECT_NE(d->read_output(d->context, c.program, 1, buf.data(), 128, err, sizeof err), 0);
  EXPECT_NE(d->evaluate(d->context, nullptr, err, sizeof err), 0);
  EXPECT_NE(std::string(err).find("not loaded"), std::string::npos) << err;
  d->unload(d->context, nullptr);  // ignored
}

// A 1x1 conv whose weight lives in a blob-v2 file held in memory: changing
// the caller's bytes after compiling does not change the results.
TEST(AneSimDevice, WeightsAreFixedAtCompileTime) {
  SimDevice sim;
  auto* d = sim.table();
  Tensor w(DType::FP16, {2, 2, 1, 1});  // [[2, 0], [0, 2]]
  w.set(0, 2.0);
  w.set(3, 2.0);
  BlobWriter bw;
  const uint64_t off = bw.add(w);
  std::vector<uint8_t> bytes = bw.bytes();
  const std::string mil = fn(
      "tensor<fp16, [1, 2, 1, 32]> x",
      "    tensor<fp16, [2, 2, 1, 1]> W = const()[name = string(\"W\"), val = tensor<fp16, [2, 2, 1, 1]>(BLOBFILE(path = "
      "string(\"@model_path/weights/weight.bin\"), offset = uint64(" + std::to_string(off) + ")))];\n"
      "    tensor<fp16, [1, 2, 1, 32]> y = conv(weight = W, x = x)[name = string(\"y\")];\n",
      "y");
  milrt_ane_weight_file wf{"@model_path/weights/weight.bin", bytes.data(), bytes.size()};
  Compiled c = compile(d, mil, {128}, {128}, {wf});
  ASSERT_EQ(c.rc, 0) << c.error;
  // Overwrite the weight data in the caller's buffer: 2.0 -> 3.0 everywhere.
  for (size_t i = 0; i + 1 < bytes.size(); i += 2) {
    uint16_t h;
    std::memcpy(&h, &bytes[i], 2);
    if (h == f32_to_f16(2.0f)) {
      h = f32_to_f16(3.0f);
      std::memcpy(&bytes[i], &h, 2);
    }
  }
  char err[256];
  auto in = halves(64, 1.5f);
  ASSERT_EQ(d->write_input(d->context, c.program, 0, in.data(), 128, err, sizeof err), 0);
  ASSERT_EQ(d->evaluate(d->context, c.program, err, sizeof err), 0) << err;
  std::vector<uint16_t> out(64);
  ASSERT_EQ(d->read_output(d->context, c.program, 0, out.data(), 128, err, sizeof err), 0);
  for (uint16_t h : out) EXPECT_EQ(f16_to_f32(h), 3.0f);  // 2 * 1.5, the weights compiled
  // Compiled again from the changed bytes, the new weights apply.
  Compiled c2 = compile(d, mil, {128}, {128}, {wf});
  ASSERT_EQ(c2.rc, 0) << c2.error;
  ASSERT_EQ(d->write_input(d->context, c2.program, 0, in.data(), 128, err, sizeof err), 0);
  ASSERT_EQ(d->evaluate(d->context, c2.program, err, sizeof err), 0);
  ASSERT_EQ(d->read_output(d->context, c2.program, 0, out.data(), 128, err, sizeof err), 0);
  EXPECT_EQ(f16_to_f32(out[0]), 4.5f);
  // A weight path outside @model_path is refused.
  milrt_ane_weight_file evil{"@model_path/../x.bin", bytes.data(), bytes.size()};
  EXPECT_NE(compile(d, mil, {128}, {128}, {evil}).error.find("bad weight path"), std::string::npos);
}

}  // namespace
}  // namespace milrt::test
