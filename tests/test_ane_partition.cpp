// The Neural Engine backend end to end on the simulated device: the
// validator's rejections, the one-input packing and its round trip, the
// lowered programs' form, LRU eviction and recompilation, the compile
// budget, and every real bundle in ../shared/testdata plus the seeds'
// programs run partitioned through ane-sim against run_reference on the
// original program.
//
// Tolerance of the end-to-end comparisons: every value entering or leaving
// an engine program is rounded to fp16 (relative 2^-11), so fp32 models
// lose about three decimal digits at each boundary, and decompose-all
// rounds after every primitive where a composite op rounded once (a few
// fp16 ulps per op in fp16 programs). The bound is |got - want| <=
// kAbs + kRel * |want| with kRel = 1e-2 (about 20 fp16 ulps) and kAbs = 1e-2
// relative to the output's largest magnitude; the largest measured errors
// are printed ("[ane-sim]" lines) and are well inside it.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ane/executor.h"
#include "ane/partition.h"
#include "ane/sim_device.h"
#include "ane/validate.h"
#include "llm/seed_kernels.h"
#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test {
namespace {

namespace fs = std::filesystem;
using namespace milrt::ane;

constexpr double kRel = 1e-2, kAbs = 1e-2;

Tensor random_tensor(DType dt, const Shape& shape, std::mt19937& rng, double lo = -1, double hi = 1) {
  Tensor t(dt, shape);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(size_t(i), u(rng));
  return t;
}

TensorMap random_inputs(const Function& f, std::mt19937& rng, const std::map<std::string, Shape>& shapes = {}) {
  TensorMap in;
  for (auto& p : f.params) {
    if (p.type.kind == Type::Kind::State) continue;
    Shape s = shapes.count(p.name) ? shapes.at(p.name) : p.type.shape;
    in[p.name] = random_tensor(p.type.dtype, s, rng, -0.5, 0.5);
  }
  return in;
}

// Runs `p` partitioned on a simulated device and compares with the reference
// executor on the unpartitioned program. Returns the partition for further checks.
struct Outcome {
  size_t programs = 0, host_steps = 0, compiles = 0;
  double worst = 0;  // largest |got - want| / (kAbs * scale + kRel * |want|)
};

Outcome check_equal(const std::string& tag, const Program& p, const TensorMap& inputs,
                    const std::map<std::string, Shape>& shapes = {}) {
  Outcome r;
  PartitionOptions po;
  po.input_shapes = shapes;
  Partition part = partition(p, po);
  SimDevice sim;
  Executor ex(part, sim.table());
  TensorMap got = ex.run(inputs);
  TensorMap want = run_reference(p, "main", inputs);
  r.programs = part.engine_programs();
  r.host_steps = part.host_steps();
  r.compiles = sim.table()->compile_count(sim.table()->context);
  double max_abs = 0;
  for (auto& [name, w] : want) {
    EXPECT_TRUE(got.count(name)) << tag << ": output " << name << " missing";
    if (!got.count(name)) continue;
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.shape(), w.shape()) << tag << " " << name;
    EXPECT_EQ(g.dtype(), w.dtype()) << tag << " " << name;
    if (g.shape() != w.shape()) continue;
    double scale = 0;
    for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, std::fabs(w.at(size_t(i))));
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double a = g.at(size_t(i)), b = w.at(size_t(i));
      const double d = std::fabs(a - b);
      max_abs = std::max(max_abs, d);
      const double bound = kAbs * std::max(scale, 1e-3) + kRel * std::fabs(b);
      r.worst = std::max(r.worst, d / bound);
      if (!(d <= bound)) {
        ADD_FAILURE() << tag << ": " << name << "[" << i << "] = " << a << ", reference " << b;
        break;
      }
    }
  }
  std::printf("[ane-sim] %-48s %2zu programs %2zu host steps %2zu compiles, max |diff| %.3g (%.2f of bound)\n",
              tag.c_str(), r.programs, r.host_steps, r.compiles, max_abs, r.worst);
  return r;
}

Program parse(const std::string& text) {
  Program p = parse_mil(text, "test.mil", ".");
  verify(p);
  return p;
}

std::string fn(const std::string& params, const std::string& body, const std::string& outs) {
  return "program(1.3)\n{\n  func main<ios18>(" + params + ") {\n" + body + "  } -> (" + outs + ");\n}\n";
}

// ---- packing ----------------------------------------------------------------

TEST(AnePacking, BlocksOfChannelsAtASharedS) {
  const std::vector<std::pair<std::string, Type>> values = {
      {"a", Type::tensor(DType::FP16, {1, 3, 1, 40})},  // 3 rows of 40
      {"b", Type::tensor(DType::FP32, {5, 7})},         // 5 rows of 7
      {"c", Type::tensor(DType::FP16, {1, 2, 1, 64})},  // 2 rows of 64
  };
  Packing k = make_packing(values);
  // S: the largest last dim (64) rounded up to 32; one channel per row.
  EXPECT_EQ(k.S, 64);
  ASSERT_EQ(k.slots.size(), 3u);
  EXPECT_EQ(k.slots[0].channel, 0);
  EXPECT_EQ(k.slots[0].channels, 3);
  EXPECT_EQ(k.slots[0].row, 40);
  EXPECT_EQ(k.slots[1].channel, 3);
  EXPECT_EQ(k.slots[1].channels, 5);
  EXPECT_EQ(k.slots[1].row, 7);
  EXPECT_EQ(k.slots[2].channel, 8);
  EXPECT_EQ(k.slots[2].channels, 2);
  EXPECT_EQ(k.C, 10);
  EXPECT_EQ(k.shape(), (Shape{1, 10, 1, 64}));
  EXPECT_EQ(k.bytes(), 10u * 64 * 2);
  // Small last dims still give S = 32; 33 rounds up to 64.
  EXPECT_EQ(make_packing({{"x", Type::tensor(DType::FP16, {1, 8, 1, 1})}}).S, 32);
  EXPECT_EQ(make_packing({{"x", Type::tensor(DType::FP16, {1, 8, 1, 33})}}).S, 64);
  // 20000 rows do not fit 16384 channels: flat, S doubled to 64 (10000 channels).
  Packing flat = make_packing({{"x", Type::tensor(DType::FP16, {20000, 32})}});
  EXPECT_EQ(flat.S, 64);
  EXPECT_EQ(flat.C, 10000);
  EXPECT_EQ(flat.slots[0].row, 64);
  expect_error_containing([] { make_packing({{"x", Type::tensor(DType::FP16, {16385, 16384})}}); }, "do not fit");
}

TEST(AnePacking, RoundTrip) {
  std::mt19937 rng(1);
  for (bool flat : {false, true}) {
    std::vector<std::pair<std::string, Type>> values = {
        {"a", Type::tensor(DType::FP16, {1, 3, 1, 40})},
        {"b", Type::tensor(DType::FP32, {5, 7})},
        {"c", Type::tensor(DType::FP16, {1, 2, 1, 64})},
    };
    if (flat) values.push_back({"d", Type::tensor(DType::FP16, {16384, 2})});  // too many rows: flat layout
    Packing k = make_packing(values);
    std::vector<Tensor> v;
    for (auto& [n, t] : values) v.push_back(random_tensor(t.dtype, t.shape, rng));
    Tensor packed = pack(k, v);
    EXPECT_EQ(packed.dtype(), DType::FP16);
    auto b16 = [&](size_t i) { return double(f16_to_f32(f32_to_f16(float(v[1].at(i))))); };
    if (!flat) {
      EXPECT_EQ(packed.shape(), (Shape{1, 10, 1, 64}));
      // Placement, by hand: a[0, 1, 0, 5] is channel 1, column 5; b[4, 6]
      // channel 3 + 4, column 6; c[0, 1, 0, 3] channel 9, column 3.
      EXPECT_EQ(packed.at(1 * 64 + 5), v[0].at(45));
      EXPECT_EQ(packed.at(7 * 64 + 6), b16(34));
      EXPECT_EQ(packed.at(9 * 64 + 3), v[2].at(64 + 3));
      // Rows are zero-padded to S.
      for (int c = 0; c < 3; ++c)
        for (int j = 40; j < 64; ++j) EXPECT_EQ(packed.at(size_t(c * 64 + j)), 0.0);
      for (int j = 7; j < 64; ++j) EXPECT_EQ(packed.at(size_t(7 * 64 + j)), 0.0);
    } else {
      // Flat: S = 64; a's 120 elements in 2 channels, b's 35 in 1, c's 128 in 2.
      EXPECT_EQ(k.S, 64);
      EXPECT_EQ(packed.at(45), v[0].at(45));
      EXPECT_EQ(packed.at(2 * 64 + 34), b16(34));
      for (int i = 120; i < 128; ++i) EXPECT_EQ(packed.at(size_t(i)), 0.0);
    }
    std::vector<Tensor> back = unpack(k, packed);
    ASSERT_EQ(back.size(), values.size());
    EXPECT_TRUE(back[0].same_bytes(v[0]));
    EXPECT_TRUE(back[2].same_bytes(v[2]));
    EXPECT_EQ(back[1].dtype(), DType::FP32);
    EXPECT_EQ(back[1].shape(), (Shape{5, 7}));
    for (int i = 0; i < 35; ++i) EXPECT_EQ(back[1].at(size_t(i)), b16(size_t(i)));  // fp32 crosses as fp16
    if (flat) {
      EXPECT_TRUE(back[3].same_bytes(v[3]));
    }
    expect_error_containing([&] { pack(k, {v[0], v[1]}); }, "values for");
  }
}

// The packing inside a lowered program agrees with pack()/unpack(): an
// identity-like program over operands of several shapes, in both layouts.
TEST(AnePacking, LoweredProgramsUnpackAndPackAsTheHostDoes) {
  for (int64_t rows : {4, 16384}) {  // 3 + 5 + 16384 rows: flat {
    Program p = parse(fn("tensor<fp16, [1, 3, 1, 40]> a, tensor<fp32, [5, 7]> b, tensor<fp16, [" +
                             std::to_string(rows) + ", 2]> d",
                         "    tensor<fp16, [1, 3, 1, 40]> a2 = relu(x = a)[name = string(\"a2\")];\n"
                         "    tensor<fp32, [5, 7]> b2 = relu(x = b)[name = string(\"b2\")];\n"
                         "    tensor<fp16, [" + std::to_string(rows) + ", 2]> d2 = relu(x = d)[name = string(\"d2\")];\n",
                         "a2, b2, d2"));
    Partition part = partition(p);
    ASSERT_EQ(part.steps.size(), 1u);
    EXPECT_EQ(part.steps[0].engine.input.slots[2].row, rows == 4 ? 2 : 64);
    std::mt19937 rng(2);
    check_equal("packing program, " + std::to_string(rows) + " rows", p, random_inputs(*p.function("main"), rng));
  }
}

// ---- the validator ------------------------------------------------------------

// Attention with a mask, which the engine's fused op would ignore, runs on
// the engine written out (expand-masked-attention): with a constant causal
// mask in one engine program and no host step; a runtime bool mask becomes
// an additive one on the host (select), the rest on the engine.
TEST(AneMaskedAttention, RunsOnTheEngineWrittenOut) {
  std::string causal = "tensor<bool, [32, 32]>([";
  for (int i = 0; i < 32; ++i) {
    causal += i ? ", [" : "[";
    for (int j = 0; j < 32; ++j) causal += std::string(j ? ", " : "") + (j <= i ? "true" : "false");
    causal += "]";
  }
  causal += "])";
  const std::string qkv = "tensor<fp16, [1, 2, 32, 16]> q, tensor<fp16, [1, 2, 32, 16]> k, tensor<fp16, [1, 2, 32, 16]> v";
  auto sdpa = [](const std::string& mask) {
    return "    tensor<fp16, [1, 2, 32, 16]> o = scaled_dot_product_attention(query = q, key = k, value = v, attn_mask = " +
           mask + ")[name = string(\"o\")];\n";
  };
  std::mt19937 rng(11);
  Program constant = parse(fn(qkv, sdpa(causal), "o"));
  Outcome c = check_equal("sdpa, constant causal mask", constant, random_inputs(*constant.function("main"), rng));
  EXPECT_EQ(c.programs, 1u);
  EXPECT_EQ(c.host_steps, 0u);
  Program runtime = parse(fn(qkv + ", tensor<bool, [1, 1, 32, 32]> m", sdpa("m"), "o"));
  TensorMap in = random_inputs(*runtime.function("main"), rng);
  Tensor m(DType::Bool, {1, 1, 32, 32});
  for (int64_t i = 0; i < m.numel(); ++i) m.set(size_t(i), (i / 32 >= i % 32) ? 1 : (rng() % 2));  // the diagonal always on
  in["m"] = m;
  Outcome r = check_equal("sdpa, runtime bool mask", runtime, in);
  EXPECT_GE(r.programs, 1u);
  EXPECT_EQ(r.host_steps, 1u);
}

TEST(AneValidate, RejectionsSayWhy) {
  Program p = parse(fn(
      "tensor<fp16, [1, 4, 1, 32]> x, tensor<fp16, [4, 4, 1, 1]> w, tensor<fp16, [1, 1, 1, 20000]> big, "
      "tensor<fp16, [1, 2, 8, 4]> q, tensor<fp16, [1, 1, 8, 8]> m, tensor<int32, [1, 4, 1, 32]> ix",
      "    tensor<fp16, [1, 4, 1, 32]> a = relu(x = x)[name = string(\"a\")];\n"
      "    tensor<fp16, [1, 4, 1, 32]> c = conv(weight = w, x = a)[name = string(\"c\")];\n"
      "    tensor<int32, [1, 1, 1, 32]> am = reduce_argmax(x = c, axis = int32(1), keep_dims = bool(true))[name = string(\"am\")];\n"
      "    tensor<fp16, [1, 1, 1, 20000]> b2 = relu(x = big)[name = string(\"b2\")];\n"
      "    tensor<fp16, [1, 2, 8, 4]> att = scaled_dot_product_attention(query = q, key = q, value = q, attn_mask = m)"
      "[name = string(\"att\")];\n"
      "    tensor<fp16, [1, 2, 8, 4]> att2 = scaled_dot_product_attention(query = q, key = q, value = q)"
      "[name = string(\"att2\")];\n"
      "    tensor<int32, [1, 4, 1, 32]> ia = abs(x = ix)[name = string(\"ia\")];\n"
      "    tensor<int32, [1]> gi = const()[name = string(\"gi\"), val = tensor<int32, [1]>([0])];\n"
      "    tensor<fp16, [1, 4, 1, 32]> g = gather(x = x, indices = gi, axis = int32(0))[name = string(\"g\")];\n",
      "c, am, b2, att, att2, ia, g"));
  const Function& f = *p.function("main");
  TypeTable types = value_types(f);
  std::set<std::string> consts = constant_values(f);
  std::map<std::string, std::string> why;
  for (auto& op : f.ops)
    if (op.type != "const") why[op.outputs[0].name] = host_reason(op, types, consts);
  EXPECT_EQ(why["a"], "");
  EXPECT_EQ(why["att2"], "");
  EXPECT_NE(why["c"].find("weight is not a constant"), std::string::npos) << why["c"];
  EXPECT_NE(why["am"].find("reduce_argmax: no engine route"), std::string::npos) << why["am"];
  EXPECT_NE(why["b2"].find("above 16384"), std::string::npos) << why["b2"];
  EXPECT_NE(why["att"].find("attn_mask"), std::string::npos) << why["att"];
  EXPECT_NE(why["ia"].find("int32"), std::string::npos) << why["ia"];
  EXPECT_NE(why["g"].find("gather: no engine route"), std::string::npos) << why["g"];
  for (const char* op : {"lstm", "non_zero", "gather", "read_state", "rms_norm", "milrt_gemm"})
    EXPECT_FALSE(engine_has_op(op)) << op;
  for (const char* op : {"conv", "linear", "matmul", "softmax", "layer_norm", "add", "reduce_mean", "reshape",
                         "transpose", "concat", "slice_by_size", "split"})
    EXPECT_TRUE(engine_has_op(op)) << op;
  // Partitioned, the masked attention runs on the host and the result
  // still matches the whole program on the reference executor.
  std::mt19937 rng(3);
  TensorMap in = random_inputs(f, rng);
  in["ix"] = make(DType::Int32, {1, 4, 1, 32}, std::vector<double>(128, -3));
  Outcome o = check_equal("validator program", p, in);
  EXPECT_EQ(o.host_steps, 2u);  // [c, am, b2, att] and [ia, g]
  EXPECT_EQ(o.programs, 2u);    // [a] and [att2]
}

// ---- lowering -------------------------------------------------------------------

// relu -> 1x1 conv (constant weight) -> argmax (host) ; c also returned.
const std::string kChain = fn(
    "tensor<fp32, [1, 8, 1, 48]> x",
    "    tensor<fp32, [1, 8, 1, 48]> a = relu(x = x)[name = string(\"a\")];\n"
    "    tensor<fp32, [8, 8, 1, 1]> w = const()[name = string(\"w\"), val = tensor<fp32, [8, 8, 1, 1]>([" +
        [] {
          std::string s;
          for (int o = 0; o < 8; ++o) {
            s += o ? ", [" : "[";
            for (int i = 0; i < 8; ++i) s += std::string(i ? ", " : "") + (o == i ? "[[0.5]]" : "[[0.125]]");
            s += "]";
          }
          return s;
        }() +
        "])];\n"
        "    tensor<fp32, [1, 8, 1, 48]> c = conv(weight = w, x = a)[name = string(\"c\")];\n"
        "    tensor<int32, [1, 1, 1, 48]> am = reduce_argmax(x = c, axis = int32(1), keep_dims = bool(true))[name = string(\"am\")];\n",
    "c, am");

TEST(AneLower, EngineProgramsAreOneInputFp16WithConstantWeights) {
  Partition part = partition(parse(kChain));
  ASSERT_EQ(part.steps.size(), 2u);
  const Step& e = part.steps[0];
  ASSERT_EQ(e.kind, Step::Kind::Engine);
  EXPECT_EQ(e.inputs, (std::vector<std::string>{"x"}));
  EXPECT_EQ(e.outputs, (std::vector<std::string>{"c"}));
  EXPECT_EQ(e.engine.input.shape(), (Shape{1, 8, 1, 64}));  // a row per channel, S: 48 rounded up to 32s
  EXPECT_EQ(e.engine.output.shape(), (Shape{1, 8, 1, 64}));
  const std::string& mil = e.engine.mil;
  EXPECT_EQ(mil.rfind("program(1.3)", 0), 0u) << mil;
  EXPECT_NE(mil.find("func main<ios18>(tensor<fp16, [1, 8, 1, 64]> ane_in)"), std::string::npos) << mil;
  EXPECT_NE(mil.find("BLOBFILE(path = string(\"@model_path/weights/weight.bin\")"), std::string::npos) << mil;
  EXPECT_NE(mil.find("buildInfo"), std::string::npos);
  EXPECT_FALSE(e.engine.weights.empty());
  // The written program parses back to one fp16 input, one fp16 output.
  Program back = parse_mil(mil, "lowered.mil", ".");
  ASSERT_EQ(back.functions.size(), 1u);
  EXPECT_EQ(back.functions[0].params.size(), 1u);
  EXPECT_EQ(back.functions[0].outputs.size(), 1u);
  const Step& h = part.steps[1];
  ASSERT_EQ(h.kind, Step::Kind::Host);
  ASSERT_EQ(h.reasons.size(), 1u);
  EXPECT_NE(h.reasons[0].find("'am' reduce_argmax: no engine route"), std::string::npos) << h.reasons[0];
  std::mt19937 rng(5);
  Outcome o = check_equal("relu-conv-argmax (fp32)", parse(kChain), random_inputs(*parse(kChain).function("main"), rng));
  EXPECT_EQ(o.programs, 1u);
  EXPECT_EQ(o.host_steps, 1u);
  EXPECT_EQ(o.compiles, 1u);
}

// ---- residency and budget --------------------------------------------------------

// Three engine programs (one op each) over a chain of fp16 ops.
Partition three_programs() {
  PartitionOptions po;
  po.max_ops_per_program = 1;
  return partition(parse(fn("tensor<fp16, [1, 4, 1, 32]> x",
                            "    tensor<fp16, [1, 4, 1, 32]> a = relu(x = x)[name = string(\"a\")];\n"
                            "    tensor<fp16, [1, 4, 1, 32]> b = mul(x = a, y = fp16(2))[name = string(\"b\")];\n"
                            "    tensor<fp16, [1, 4, 1, 32]> c = add(x = b, y = fp16(1))[name = string(\"c\")];\n",
                            "c")),
                   po);
}

TEST(AneExecutor, LruEvictionRecompiles) {
  Partition part = three_programs();
  ASSERT_EQ(part.engine_programs(), 3u);
  std::mt19937 rng(7);
  TensorMap in = {{"x", random_tensor(DType::FP16, {1, 4, 1, 32}, rng)}};
  auto count = [](SimDevice& s) { return s.table()->compile_count(s.table()->context); };
  {
    SimDevice sim;
    ExecutorOptions eo;
    eo.max_resident = 1;
    Executor ex(part, sim.table(), eo);
    Tensor y = ex.run(in).at("c");
    EXPECT_EQ(count(sim), 3u);
    EXPECT_EQ(ex.stats().evictions, 2u);
    EXPECT_EQ(sim.loaded(), 1u);
    EXPECT_EQ(ex.resident(), 1u);
    ex.run(in);  // every program was evicted before its next use
    EXPECT_EQ(count(sim), 6u);
    EXPECT_EQ(ex.stats().evictions, 5u);
    // By hand: c = 2 relu(x) + 1, exact in fp16 for |x| < 1 up to one rounding.
    for (int i = 0; i < 128; ++i) {
      const double x = in["x"].at(size_t(i));
      const double want = f16_to_f32(f32_to_f16(float(2 * std::max(x, 0.0) + 1)));
      EXPECT_EQ(y.at(size_t(i)), want) << i;
    }
  }
  {
    SimDevice sim;
    ExecutorOptions eo;
    eo.max_resident = 2;  // the LRU one is always the one needed next: still recompiles
    Executor ex(part, sim.table(), eo);
    ex.run(in);
    ex.run(in);
    EXPECT_EQ(count(sim), 6u);
  }
  {
    SimDevice sim;
    Executor ex(part, sim.table());  // all resident: compiled once
    ex.run(in);
    ex.run(in);
    EXPECT_EQ(count(sim), 3u);
    EXPECT_EQ(ex.stats().evictions, 0u);
  }
}

TEST(AneExecutor, CompileBudgetExhaustion) {
  Partition part = three_programs();
  std::mt19937 rng(8);
  TensorMap in = {{"x", random_tensor(DType::FP16, {1, 4, 1, 32}, rng)}};
  SimDevice sim;
  ExecutorOptions eo;
  eo.max_resident = 1;
  eo.max_compiles = 4;
  Executor ex(part, sim.table(), eo);
  ex.run(in);  // 3 compiles
  std::string msg = error_of([&] { ex.run(in); });  // the 4th is allowed, the 5th not
  EXPECT_NE(msg.find("compile budget exhausted (4 of 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("restart the process from a checkpoint"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  // The device refuses on its own when its budget is smaller than the executor's.
  SimDevice small(SimLimits{2});
  Executor ex2(part, small.table());
  msg = error_of([&] { ex2.run(in); });
  EXPECT_NE(msg.find("compile budget spent (2 compiles"), std::string::npos) << msg;
}

TEST(AneExecutor, InputsAreChecked) {
  Partition part = three_programs();
  SimDevice sim;
  Executor ex(part, sim.table());
  EXPECT_NE(error_of([&] { ex.run({}); }).find("missing input 'x'"), std::string::npos);
  EXPECT_NE(error_of([&] { ex.run({{"x", Tensor(DType::FP32, {1, 4, 1, 32})}}); }).find("the function takes"),
            std::string::npos);
}

// ---- real bundles and the seeds -----------------------------------------------------

TEST(AneBundles, SileroVadEveryVariant) {
  MILRT_REQUIRE_SHARED();
  const std::string dir = shared_dir() + "/testdata/coreml/silero-vad";
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".mlmodelc") continue;
    Program p = load_model(e.path().string());
    legalize_layout_idioms(p);
    verify(p);
    std::mt19937 rng(11);
    Outcome o = check_equal(e.path().filename().string(), p, random_inputs(*p.function("main"), rng));
    EXPECT_GE(o.programs, 1u);
    EXPECT_GE(o.host_steps, 1u);  // the lstm
    ++n;
  }
  EXPECT_EQ(n, 16u);
}

TEST(AneBundles, SileroVadPackages) {
  MILRT_REQUIRE_SHARED();
  const std::string dir = shared_dir() + "/testdata/coreml/silero-vad-mlpackage";
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".mlpackage") continue;
    Program p = load_model(e.path().string());
    legalize_layout_idioms(p);
    verify(p);
    std::mt19937 rng(12);
    check_equal(e.path().filename().string(), p, random_inputs(*p.function("main"), rng));
    ++n;
  }
  EXPECT_EQ(n, 5u);
}

TEST(AneBundles, FluidAudioSmall) {
  MILRT_REQUIRE_SHARED();
  const std::string dir = shared_dir() + "/testdata/coreml/fluidaudio-small/";
  for (const char* name : {"Argmax", "TokenDurationPrediction"}) {
    Program p = load_model(dir + name + ".mlmodelc");
    verify(p);
    std::mt19937 rng(13);
    check_equal(name, p, random_inputs(*p.function("main"), rng));
  }
  // Flexible input shapes: one partition per shape.
  Program p = load_model(dir + "TransposeEncoder.mlmodelc");
  verify(p);
  std::mt19937 rng(14);
  std::map<std::string, Shape> shapes = {{"x", {1, 6, 40}}};
  check_equal("TransposeEncoder [1, 6, 40]", p, random_inputs(*p.function("main"), rng, shapes), shapes);
  expect_error_containing([&] { partition(p); }, "give its shape");
}

// The first seed's graph programs, with random weights written where their
// BLOBFILE literals point (raw arrays, as the seed writes them).
TEST(AneSeeds, FirstSeedGraphs) {
  const std::string src = std::string(MILRT_SOURCE_DIR) + "/tests/data/seed1/";
  for (const char* name : {"conv_chain_silu", "rms_q8_swiglu", "backprop_train"}) {
    std::ifstream f(src + name + ".mil");
    ASSERT_TRUE(f) << src << name;
    std::string text((std::istreambuf_iterator<char>(f)), {});
    const std::string dir = temp_dir(std::string("ane_seed1_") + name);
    fs::copy_file(src + name + ".mil", dir + "/model.mil");
    Program p = parse_mil(text, dir + "/model.mil", dir);
    std::map<std::string, std::vector<uint8_t>> files;
    std::mt19937 rng(21);
    for (auto& fn : p.functions)
      for (auto& op : fn.ops)
        for (auto& in : op.inputs)
          if (in.arg.kind == Arg::Kind::Const && !in.arg.lit->blob_path.empty()) {
            const Literal& l = *in.arg.lit;
            Tensor t = dtype_is_float(l.type.dtype) ? random_tensor(l.type.dtype, l.type.shape, rng, -0.1, 0.1)
                                                    : random_tensor(l.type.dtype, l.type.shape, rng, -100, 100);
            auto& bytes = files[l.blob_path];
            bytes.resize(std::max(bytes.size(), size_t(l.blob_offset + t.nbytes())));
            std::memcpy(bytes.data() + l.blob_offset, t.data(), t.nbytes());
          }
    for (auto& [path, bytes] : files) {
      std::ofstream o(dir + "/" + path, std::ios::binary);
      o.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    }
    load_blobs(p);
    legalize_layout_idioms(p);
    verify(p);
    Outcome o = check_equal(std::string("seed1 ") + name, p, random_inputs(*p.function("main"), rng));
    EXPECT_GE(o.programs, 1u) << name;
  }
}

// The second seed's six training kernels at a small size.
TEST(AneSeeds, SecondSeedKernels) {
  const llm::SeedLayerConfig c{64, 128, 4, 32};
  std::mt19937 rng(31);
  llm::SeedLayerWeights w;
  w.rms1 = random_tensor(DType::FP16, {64}, rng, 0.5, 1.5);
  w.rms2 = random_tensor(DType::FP16, {64}, rng, 0.5, 1.5);
  for (Tensor* m : {&w.wq, &w.wk, &w.wv, &w.wo}) *m = random_tensor(DType::FP16, {64, 64}, rng, -0.125, 0.125);
  w.w1 = random_tensor(DType::FP16, {128, 64}, rng, -0.125, 0.125);
  w.w3 = random_tensor(DType::FP16, {128, 64}, rng, -0.125, 0.125);
  w.w2 = random_tensor(DType::FP16, {64, 128}, rng, -0.09, 0.09);
  const std::vector<std::pair<std::string, Program>> kernels = {
      {"sdpa_fwd_taps", llm::seed_sdpa_fwd_taps(c, w)}, {"ffn_fwd_taps", llm::seed_ffn_fwd_taps(c, w)},
      {"ffn_bwd", llm::seed_ffn_bwd(c, w)},             {"qkv_bwd", llm::seed_qkv_bwd(c, w)},
      {"sdpa_bwd1", llm::seed_sdpa_bwd1(c, w)},         {"sdpa_bwd2", llm::seed_sdpa_bwd2(c)}};
  for (auto& [name, p] : kernels) {
    verify(p);
    Outcome o = check_equal("seed2 " + name, p, random_inputs(*p.function("main"), rng));
    EXPECT_EQ(o.programs, 1u) << name << ": every op of the seed's kernels has an engine route";
    EXPECT_EQ(o.host_steps, 0u) << name;
  }
}

}  // namespace
}  // namespace milrt::test
