// Differential tests of the compiled slice_by_index, pad, conv and lstm
// against the reference executor, on random inputs of awkward sizes.
//
// Tolerances, as |compiled - reference| / (1 + |reference|): a plan computes
// in fp32, the reference in fp64 rounded to the declared dtype. Data movement
// (slices, pads) must agree exactly. fp32 conv sums at most 27 products of
// values below 1 and the lstm runs 5 steps of 4 + 6 products per gate, so fp32
// rounding stays near 1e-6: we allow 1e-5. An fp16 program's reference rounds
// to fp16 (2^-11 relative) after each op: 1e-2 covers it.
#include <map>
#include <random>

#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/test_util.h"
#include "test_pass_rewrite_util.h"

namespace milrt {
namespace {

struct Param {
  std::string name;
  DType dtype;
  Shape shape;
  bool constant = false;   // a const op in the body (weights a plan can pack) rather than a function input
};

std::string shape_text(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}
std::string ttype(DType d, const Shape& s) {
  return "tensor<" + std::string(d == DType::FP16 ? "fp16" : d == DType::Int32 ? "int32" : "fp32") + ", " +
         shape_text(s) + ">";
}
std::string ints(const std::vector<int64_t>& v) {
  return "tensor<int32, [" + std::to_string(v.size()) + "]>(" + shape_text(v) + ")";
}
std::string bools(const std::vector<int64_t>& v) {
  std::string r = "tensor<bool, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += std::string(i ? ", " : "") + (v[i] ? "true" : "false");
  return r + "])";
}
std::string str(const std::string& s) { return "string(\"" + s + "\")"; }

// Parses and verifies the program, runs it compiled and on the reference
// with the same random inputs, and returns the worst relative difference.
double compiled_vs_reference(const std::vector<Param>& params, const std::string& body, const std::string& outs,
                             uint32_t seed) {
  std::string ptext;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  TensorMap in;
  std::string consts;
  for (auto& p : params) {
    Tensor t(p.dtype, p.shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), p.dtype == DType::Int32 ? double(rng() % 200) - 100 : u(rng));
    if (p.constant) {
      consts += test::rewrite::const_stmt(p.name, t);
      continue;
    }
    ptext += (ptext.empty() ? "" : ", ") + ttype(p.dtype, p.shape) + " " + p.name;
    in[p.name] = t;
  }
  Program prog = parse_mil(test::program_text(ptext, consts + body, outs), "<test>", ".");
  verify(prog);
  TensorMap want = run_reference(prog, "main", in);
  TensorMap got = compile(prog).run(in);
  double worst = 0;
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.shape(), w.shape()) << name;
    EXPECT_EQ(g.dtype(), w.dtype()) << name;
    for (int64_t i = 0; i < w.numel(); ++i) {
      double a = g.at(size_t(i)), b = w.at(size_t(i));
      worst = std::max(worst, std::fabs(a - b) / (1 + std::fabs(b)));
    }
  }
  return worst;
}

// ---------------------------------------------------------------- slice_by_index

// The length of Python's x[begin:end:stride] over n elements, by enumeration.
int64_t slice_len(int64_t n, bool has_b, int64_t b, bool has_e, int64_t e, int64_t st) {
  auto norm = [n](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
  int64_t i = st > 0 ? (has_b ? norm(b, 0, n) : 0) : (has_b ? norm(b, -1, n - 1) : n - 1);
  int64_t end = st > 0 ? (has_e ? norm(e, 0, n) : n) : (has_e ? norm(e, -1, n - 1) : -1);
  int64_t count = 0;
  for (; st > 0 ? i < end : i > end; i += st) ++count;
  return count;
}

struct SliceCase {
  std::vector<int64_t> begin, end, stride, bm, em, sm;
};

TEST(CompiledNn, SliceByIndexAgrees) {
  const Shape xs = {5, 7, 6};
  std::vector<SliceCase> cases = {
      {{1, -2, 0}, {4, 7, 6}, {1, 1, 2}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},         // negative begin, stride
      {{4, -1, 5}, {0, 0, 0}, {-1, -2, -3}, {0, 0, 0}, {0, 1, 0}, {0, 0, 0}},      // negative strides
      {{9, -3, 9}, {0, 0, 1}, {1, 1, -1}, {1, 0, 1}, {1, 1, 0}, {0, 0, 0}},        // begin and end masks
      {{2, -2, 0}, {3, 0, 6}, {1, 1, 4}, {0, 0, 0}, {0, 0, 0}, {0, 1, 0}},         // squeeze a middle dim
      {{-1, 3, 1}, {0, 5, 0}, {1, 2, 1}, {0, 0, 0}, {0, 0, 0}, {1, 0, 1}},         // squeeze two dims
      {{-100, 100, -100}, {100, -100, 100}, {2, -3, 5}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}},  // clamping
      {{0, 0, 0}, {1, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 1, 0}, {0, 0, 1}},          // mask on a squeezed dim
  };
  for (DType dt : {DType::FP32, DType::Int32}) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const SliceCase& c = cases[k];
      Shape out;
      for (size_t d = 0; d < xs.size(); ++d)
        if (!c.sm[d]) out.push_back(slice_len(xs[d], !c.bm[d], c.begin[d], !c.em[d], c.end[d], c.stride[d]));
      std::string body = test::stmt(ttype(dt, out), "y",
                                    "slice_by_index(x = x, begin = " + ints(c.begin) + ", end = " + ints(c.end) +
                                        ", stride = " + ints(c.stride) + ", begin_mask = " + bools(c.bm) +
                                        ", end_mask = " + bools(c.em) + ", squeeze_mask = " + bools(c.sm) + ")");
      EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}}, body, "y", uint32_t(k)), 0.0) << "case " << k;
    }
  }
}

TEST(CompiledNn, SliceByIndexDefaultsStrideAndMasks) {
  std::string body = test::stmt(ttype(DType::FP32, {2, 3}), "y",
                                "slice_by_index(x = x, begin = " + ints({1, -4}) + ", end = " + ints({3, -1}) + ")");
  EXPECT_EQ(compiled_vs_reference({{"x", DType::FP32, {3, 5}}}, body, "y", 1), 0.0);
}

// ---------------------------------------------------------------- pad

struct PadCase {
  std::string mode;
  std::vector<int64_t> pad;
};

TEST(CompiledNn, PadAgreesInEveryMode) {
  const Shape xs = {3, 4, 5};
  std::vector<PadCase> cases = {
      {"constant", {1, 2}},          {"constant", {1, 0, 0, 2, 3, 1}}, {"constant", {0, 0, 1, 1}},
      {"reflect", {2, 3}},           {"reflect", {3, 1, 4, 0}},        {"reflect", {1, 1, 0, 3, 4, 4}},
      {"replicate", {4, 5}},         {"replicate", {2, 4, 5, 1}},      {"replicate", {3, 0, 0, 0, 1, 2}},
  };
  for (DType dt : {DType::FP32, DType::FP16}) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const PadCase& c = cases[k];
      Shape out = xs;
      for (size_t i = 0; i < c.pad.size() / 2; ++i) out[xs.size() - c.pad.size() / 2 + i] += c.pad[2 * i] + c.pad[2 * i + 1];
      std::string cval = dt == DType::FP32 ? "fp32(1.5)" : "fp16(1.5)";
      std::string body = test::stmt(ttype(dt, out), "y",
                                    "pad(x = x, pad = " + ints(c.pad) + ", mode = " + str(c.mode) +
                                        ", constant_val = " + cval + ")");
      EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}}, body, "y", uint32_t(k)), 0.0) << c.mode << " case " << k;
    }
  }
}

TEST(CompiledNn, PadDefaultsToZeroConstant) {
  std::string body = test::stmt(ttype(DType::FP32, {2, 7}), "y", "pad(x = x, pad = " + ints({2, 2}) + ")");
  EXPECT_EQ(compiled_vs_reference({{"x", DType::FP32, {2, 3}}}, body, "y", 2), 0.0);
}

// ---------------------------------------------------------------- conv

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> strides, dilations;
  int64_t groups;
  std::string pad_type;
  std::vector<int64_t> pad;   // custom only
  bool bias;
};

// The output shape by the coremltools rules (independent of the code under test).
Shape conv_out(const ConvCase& c) {
  Shape out = {c.x[0], c.w[0]};
  for (size_t i = 0; i + 2 < c.x.size(); ++i) {
    int64_t in = c.x[i + 2], s = c.strides[i], ek = (c.w[i + 2] - 1) * c.dilations[i] + 1;
    if (c.pad_type == "valid") out.push_back((in - ek) / s + 1);
    else if (c.pad_type == "custom") out.push_back((in + c.pad[2 * i] + c.pad[2 * i + 1] - ek) / s + 1);
    else out.push_back((in + s - 1) / s);
  }
  return out;
}

void check_conv(const ConvCase& c, DType dt, double tol, uint32_t seed, bool const_weights = false) {
  std::vector<Param> params = {{"x", dt, c.x}, {"w", dt, c.w, const_weights}};
  std::string expr = "conv(x = x, weight = w, strides = " + ints(c.strides) + ", dilations = " + ints(c.dilations) +
                     ", groups = int32(" + std::to_string(c.groups) + "), pad_type = " + str(c.pad_type);
  if (c.pad_type == "custom") expr += ", pad = " + ints(c.pad);
  if (c.bias) {
    params.push_back({"b", dt, {c.w[0]}, const_weights});
    expr += ", bias = b";
  }
  std::string body = test::stmt(ttype(dt, conv_out(c)), "y", expr + ")");
  EXPECT_LE(compiled_vs_reference(params, body, "y", seed), tol)
      << c.pad_type << " x " << shape_text(c.x) << " w " << shape_text(c.w) << (const_weights ? " (packed)" : "");
}

TEST(CompiledNn, Conv1dAgreesForEveryPadType) {
  uint32_t seed = 10;
  for (const char* pt : {"valid", "same", "same_lower", "custom"}) {
    check_conv({{2, 6, 11}, {4, 3, 3}, {2}, {2}, 2, pt, {2, 1}, true}, DType::FP32, 1e-5, seed++);
    check_conv({{1, 3, 13}, {5, 3, 4}, {3}, {1}, 1, pt, {0, 3}, false}, DType::FP32, 1e-5, seed++);
    check_conv({{1, 4, 9}, {4, 1, 5}, {1}, {2}, 4, pt, {4, 4}, true}, DType::FP32, 1e-5, seed++);  // depthwise
  }
}

TEST(CompiledNn, Conv2dAgreesForEveryPadType) {
  uint32_t seed = 40;
  for (const char* pt : {"valid", "same", "same_lower", "custom"}) {
    check_conv({{1, 4, 7, 9}, {6, 2, 3, 2}, {2, 3}, {1, 2}, 2, pt, {1, 0, 2, 1}, true}, DType::FP32, 1e-5, seed++);
    check_conv({{2, 3, 6, 5}, {2, 3, 3, 3}, {1, 1}, {1, 1}, 1, pt, {1, 1, 1, 1}, false}, DType::FP32, 1e-5, seed++);
    check_conv({{1, 3, 8, 8}, {3, 1, 3, 3}, {2, 2}, {2, 1}, 3, pt, {0, 2, 3, 0}, true}, DType::FP32, 1e-5, seed++);
  }
}

// Constant weights take the packed-GEMM path (im2col + kernels::gemm) where a
// group has at least 8 output channels, the plain loop below that: both are
// covered, with odd sizes that leave partial GEMM tiles, batch > 1, 3-D convs,
// and padding wider than the kernel. Sums reach 3 * 5 * 4 = 60 products (fp32:
// well inside 1e-5 of 1 + |y|).
TEST(CompiledNn, ConvWithConstantWeightsAgrees) {
  uint32_t seed = 300;
  for (const char* pt : {"valid", "same", "same_lower", "custom"}) {
    check_conv({{2, 6, 11}, {18, 3, 3}, {2}, {2}, 2, pt, {2, 1}, true}, DType::FP32, 1e-5, seed++, true);
    check_conv({{1, 3, 13}, {33, 3, 4}, {3}, {1}, 1, pt, {0, 3}, false}, DType::FP32, 1e-5, seed++, true);
    check_conv({{1, 4, 9}, {4, 1, 5}, {1}, {2}, 4, pt, {4, 4}, true}, DType::FP32, 1e-5, seed++, true);  // depthwise
    check_conv({{3, 5, 7, 6}, {17, 5, 3, 2}, {2, 1}, {1, 2}, 1, pt, {3, 0, 1, 2}, true}, DType::FP32, 1e-5, seed++,
               true);
    check_conv({{1, 4, 8, 8}, {16, 2, 3, 3}, {1, 2}, {2, 1}, 2, pt, {1, 2, 0, 1}, false}, DType::FP32, 1e-5, seed++,
               true);
    check_conv({{1, 3, 4, 5, 6}, {9, 3, 2, 3, 2}, {1, 2, 2}, {2, 1, 1}, 1, pt, {1, 0, 0, 1, 2, 0}, true},
               DType::FP32, 1e-5, seed++, true);
  }
  // The shapes of Silero VAD's STFT and encoder: one output position, few rows.
  check_conv({{1, 1, 640}, {258, 1, 256}, {128}, {1}, 1, "valid", {}, false}, DType::FP32, 1e-5, seed++, true);
  check_conv({{1, 129, 4}, {128, 129, 3}, {1}, {1}, 1, "custom", {1, 1}, true}, DType::FP32, 1e-5, seed++, true);
  check_conv({{1, 64, 1}, {128, 64, 3}, {1}, {1}, 1, "custom", {1, 1}, true}, DType::FP32, 1e-5, seed++, true);
  check_conv({{1, 4, 10}, {12, 4, 3}, {1}, {1}, 1, "same", {}, true}, DType::FP16, 1e-2, seed++, true);
}

TEST(CompiledNn, ConvInFp16AgreesWithinFp16Rounding) {
  check_conv({{1, 4, 10}, {4, 2, 3}, {1}, {1}, 2, "same", {}, true}, DType::FP16, 1e-2, 70);
  check_conv({{1, 2, 5, 6}, {3, 2, 2, 3}, {2, 1}, {1, 1}, 1, "valid", {}, true}, DType::FP16, 1e-2, 71);
}

// ---------------------------------------------------------------- lstm

std::string lstm_body(const std::string& direction, bool out_seq, int64_t seq, int64_t batch, int64_t h,
                      const std::string& extra) {
  int64_t hd = (direction == "bidirectional" ? 2 : 1) * h;
  Shape ys = {out_seq ? seq : 1, batch, hd}, hs = {batch, hd};
  return "    " + ttype(DType::FP32, ys) + " y, " + ttype(DType::FP32, hs) + " hn, " + ttype(DType::FP32, hs) +
         " cn = lstm(x = x, initial_h = h0, initial_c = c0, weight_ih = wih, weight_hh = whh, direction = " +
         str(direction) + ", output_sequence = " + (out_seq ? "bool(true)" : "bool(false)") + extra +
         ")[name = string(\"l\")];\n";
}

void check_lstm(const std::string& direction, bool out_seq, const std::string& extra, std::vector<Param> more,
                uint32_t seed, bool const_weights = false) {
  const int64_t seq = 5, batch = 3, in = 4, h = 6, hd = (direction == "bidirectional" ? 2 : 1) * h;
  std::vector<Param> params = {{"x", DType::FP32, {seq, batch, in}},   {"h0", DType::FP32, {batch, hd}},
                               {"c0", DType::FP32, {batch, hd}},       {"wih", DType::FP32, {4 * h, in}, const_weights},
                               {"whh", DType::FP32, {4 * h, h}, const_weights}};
  for (Param& p : more) p.constant = const_weights && p.name.rfind("w", 0) == 0;
  params.insert(params.end(), more.begin(), more.end());
  double err = compiled_vs_reference(params, lstm_body(direction, out_seq, seq, batch, h, extra), "y, hn, cn", seed);
  EXPECT_LE(err, 1e-5) << direction << (out_seq ? " with" : " without") << " sequence" << extra
                       << (const_weights ? " (packed)" : "");
}

TEST(CompiledNn, LstmAgreesInEveryDirection) {
  const int64_t in = 4, h = 6;
  std::vector<Param> bias = {{"b", DType::FP32, {4 * h}}};
  std::vector<Param> back = {{"b", DType::FP32, {4 * h}}, {"wihb", DType::FP32, {4 * h, in}},
                             {"whhb", DType::FP32, {4 * h, h}}, {"bb", DType::FP32, {4 * h}}};
  uint32_t seed = 100;
  // Constant weights take the packed-GEMM kernel, run-time ones the plain loop.
  for (bool packed : {false, true})
    for (bool out_seq : {false, true}) {
      check_lstm("forward", out_seq, ", bias = b", bias, seed++, packed);
      check_lstm("forward", out_seq, "", {}, seed++, packed);
      check_lstm("reverse", out_seq, ", bias = b", bias, seed++, packed);
      check_lstm("bidirectional", out_seq, ", bias = b, weight_ih_back = wihb, weight_hh_back = whhb, bias_back = bb",
                 back, seed++, packed);
    }
}

// Silero VAD's LSTM: one step, batch 1, 128 inputs and hidden units, packed weights.
TEST(CompiledNn, LstmWithPackedWeightsAtSileroSize) {
  const int64_t h = 128, in = 128;
  std::vector<Param> params = {{"x", DType::FP32, {1, 1, in}},          {"h0", DType::FP32, {1, h}},
                               {"c0", DType::FP32, {1, h}},             {"wih", DType::FP32, {4 * h, in}, true},
                               {"whh", DType::FP32, {4 * h, h}, true},  {"b", DType::FP32, {4 * h}, true}};
  const std::string body = "    " + ttype(DType::FP32, {1, 1, h}) + " y, " + ttype(DType::FP32, {1, h}) + " hn, " +
                           ttype(DType::FP32, {1, h}) +
                           " cn = lstm(x = x, initial_h = h0, initial_c = c0, weight_ih = wih, weight_hh = whh, "
                           "bias = b, direction = string(\"forward\"), output_sequence = bool(true))"
                           "[name = string(\"l\")];\n";
  // 256 products of values in [-1, 1] per gate: fp32 sums stay near 1e-5 of their magnitude.
  EXPECT_LE(compiled_vs_reference(params, body, "y, hn, cn", 400), 1e-5);
}

TEST(CompiledNn, LstmPeepholeClipAndActivations) {
  const int64_t h = 6;
  std::vector<Param> more = {{"b", DType::FP32, {4 * h}}, {"p", DType::FP32, {3 * h}}};
  check_lstm("forward", true, ", bias = b, peephole = p, clip = fp32(0.3)", more, 200);
  check_lstm("reverse", true,
             ", bias = b, peephole = p, recurrent_activation = string(\"hard_sigmoid\"), cell_activation = "
             "string(\"relu\"), activation = string(\"linear\")",
             more, 201);
  check_lstm("forward", false, ", bias = b, activation = string(\"scaled_tanh\"), cell_activation = string(\"sigmoid\")",
             more, 202);
  check_lstm("forward", true, ", bias = b, peephole = p, clip = fp32(0.3)", more, 203, true);
  check_lstm("reverse", true,
             ", bias = b, peephole = p, recurrent_activation = string(\"hard_sigmoid\"), cell_activation = "
             "string(\"relu\"), activation = string(\"linear\")",
             more, 204, true);
}

// ---------------------------------------------------------------- what does not compile

TEST(CompiledNn, ParametersThatAreNotConstantsAreCompileErrors) {
  Program prog = parse_mil(
      test::program_text("tensor<fp32, [1, 2, 8]> x, tensor<fp32, [2, 2, 3]> w, tensor<int32, [1]> s",
                         test::stmt("tensor<fp32, [1, 2, 6]>", "y", "conv(x = x, weight = w, strides = s)"), "y"),
      "<test>", ".");
  try {
    compile(prog);
    ADD_FAILURE() << "a conv with run-time strides compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("conv"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace milrt

// ---------------------------------------------------------------- gather

namespace milrt {
namespace {

TEST(CompiledNn, GatherAgreesOnEveryAxisWithNegativeIndices) {
  const Shape xs = {3, 5, 4};
  const std::vector<int64_t> idx = {2, -1, 0, 4, -5, 2};
  for (DType dt : {DType::FP32, DType::FP16, DType::Int32})
    for (int64_t axis = -3; axis < 3; ++axis) {
      int64_t a = axis < 0 ? axis + 3 : axis;
      std::vector<int64_t> ix;
      for (int64_t v : idx)
        if (v >= -xs[size_t(a)] && v < xs[size_t(a)]) ix.push_back(v);
      Shape out = xs;
      out[size_t(a)] = int64_t(ix.size());
      std::string body = test::stmt(ttype(dt, out), "y",
                                    "gather(x = x, indices = " + ints(ix) + ", axis = int32(" + std::to_string(axis) + "))");
      EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}}, body, "y", uint32_t(a)), 0.0) << "dtype " << int(dt) << " axis " << axis;
    }
}

TEST(CompiledNn, GatherOfAnEmbeddingTableByTokenIds) {
  // Token ids as a run-time input: rows of a [10, 8] table.
  Program prog = parse_mil(test::program_text("tensor<fp32, [10, 8]> table, tensor<int32, [2, 3]> ids",
                                              test::stmt(ttype(DType::FP32, {2, 3, 8}), "y",
                                                         "gather(x = table, indices = ids, axis = int32(0))"),
                                              "y"),
                           "<test>", ".");
  verify(prog);
  Tensor table(DType::FP32, {10, 8}), ids(DType::Int32, {2, 3});
  for (int64_t i = 0; i < table.numel(); ++i) table.set(size_t(i), double(i) * 0.5 - 7);
  const std::vector<int> tok = {3, 9, 0, -2, 3, 7};
  for (size_t i = 0; i < tok.size(); ++i) ids.set(i, tok[i]);
  Plan plan = compile(prog);
  Tensor y = plan.run({{"table", table}, {"ids", ids}}).at("y");
  for (size_t t = 0; t < tok.size(); ++t)
    for (int64_t c = 0; c < 8; ++c) {
      int row = tok[t] < 0 ? tok[t] + 10 : tok[t];
      EXPECT_EQ(y.at(t * 8 + size_t(c)), double(row * 8 + c) * 0.5 - 7) << "token " << t << " col " << c;
    }
  ids.set(4, 10);
  try {
    plan.run({{"table", table}, {"ids", ids}});
    ADD_FAILURE() << "an out-of-range token id ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("index 10 is out of range for a dim of size 10"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace milrt

// ---------------------------------------------------------------- slice_update

namespace milrt {
namespace {

TEST(CompiledNn, SliceUpdateWithConstantSlicesAgrees) {
  const Shape xs = {4, 6, 5};
  struct Case { std::vector<int64_t> b, e, st, bm, em, sm; Shape upd; };
  std::vector<Case> cases = {
      {{1, 0, 2}, {3, 6, 4}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {2, 6, 2}},
      {{0, 5, 0}, {4, 0, 5}, {2, -2, 1}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {2, 3, 5}},
      {{-1, 1, 0}, {0, 4, 0}, {1, 1, 1}, {0, 0, 1}, {1, 0, 1}, {1, 0, 0}, {3, 5}},
  };
  for (DType dt : {DType::FP32, DType::FP16, DType::Int32})
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      std::string body = test::stmt(ttype(dt, xs), "y",
                                    "slice_update(x = x, update = u, begin = " + ints(c.b) + ", end = " + ints(c.e) +
                                        ", stride = " + ints(c.st) + ", begin_mask = " + bools(c.bm) +
                                        ", end_mask = " + bools(c.em) + ", squeeze_mask = " + bools(c.sm) + ")");
      EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}, {"u", dt, c.upd}}, body, "y", uint32_t(k)), 0.0)
          << "case " << k << " dtype " << int(dt);
    }
}

TEST(CompiledNn, SliceUpdateAtARunTimePosition) {
  // A KV-cache write: begin and end are inputs that change from run to run.
  Program prog = parse_mil(
      test::program_text("tensor<fp32, [1, 8, 4]> cache, tensor<fp32, [1, 2, 4]> kv, tensor<int32, [3]> b, "
                         "tensor<int32, [3]> e",
                         test::stmt(ttype(DType::FP32, {1, 8, 4}), "y",
                                    "slice_update(x = cache, update = kv, begin = b, end = e)"),
                         "y"),
      "<test>", ".");
  verify(prog);
  Plan plan = compile(prog);
  Tensor cache(DType::FP32, {1, 8, 4}), kv(DType::FP32, {1, 2, 4}), b(DType::Int32, {3}), e(DType::Int32, {3});
  for (int64_t i = 0; i < cache.numel(); ++i) cache.set(size_t(i), double(i));
  for (int64_t i = 0; i < kv.numel(); ++i) kv.set(size_t(i), -1.0 - double(i));
  for (int64_t pos : {0, 3, 6, -2}) {
    for (size_t d = 0; d < 3; ++d) { b.set(d, 0); e.set(d, d == 1 ? double(pos + 2) : (d == 0 ? 1 : 4)); }
    b.set(1, double(pos));
    if (pos == -2) e.set(1, 8);
    TensorMap in{{"cache", cache}, {"kv", kv}, {"b", b}, {"e", e}};
    Tensor want = run_reference(prog, "main", in).at("y");
    Tensor got = plan.run(in).at("y");
    EXPECT_TRUE(got.same_bytes(want)) << "position " << pos;
  }
  b.set(1, 7);
  e.set(1, 9);  // clamps to 8: one row, but update has two
  try {
    plan.run({{"cache", cache}, {"kv", kv}, {"b", b}, {"e", e}});
    ADD_FAILURE() << "a slice of the wrong size ran";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("the slice has 1 elements along dim 1 but update has 2"), std::string::npos)
        << err.what();
  }
}

}  // namespace
}  // namespace milrt
