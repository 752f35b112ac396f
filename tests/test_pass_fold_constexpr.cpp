// fold-constexpr: constexpr_* decompression and small data movement of
// constants become `const` ops. The folded values are compared bit for bit
// with what the reference executor (which has its own, independent constexpr
// and data-movement implementations) computes for the unfolded program, on
// hand-written programs of every form and on every constexpr op of the real
// Silero bundles.
#include <cstdio>
#include <set>

#include "milrt/builder.h"
#include "passes/pass_registry.h"
#include "test_pass_util.h"

namespace milrt::test::pass {
namespace {

double f16(double v) { return f16_to_f32(f32_to_f16(float(v))); }

Program folded(const Program& p) {
  Program q = p;
  run_passes(q, {"fold-constexpr"});
  return q;
}

// Every value of the program on the reference executor (inputs from inputs_for).
TensorMap reference_values(const Program& p) {
  return run_reference_all(p, "main", inputs_for(p.functions.at(0), 1));
}

// Every output of the ops of `before` that `is_folded` selects is a `const`
// in `after`, of the declared type, holding exactly the reference's value.
// Returns how many ops were checked.
template <class Pred>
int expect_folded_to_reference(const Program& before, const Program& after, Pred is_folded) {
  const TensorMap ref = reference_values(before);
  int n = 0;
  for (const Op& op : before.functions.at(0).ops) {
    if (!is_folded(op)) continue;
    ++n;
    for (const Output& o : op.outputs) {
      const Op* c = producer(after, o.name);
      if (!c) {
        ADD_FAILURE() << "no op defines " << o.name;
        continue;
      }
      EXPECT_EQ(c->type, "const") << o.name << " (was " << op.type << ")";
      EXPECT_EQ(c->outputs.at(0).type, o.type) << o.name;
      EXPECT_EQ(c->loc.line, op.loc.line) << o.name;
      const Tensor& v = c->arg("val")->lit->value;
      EXPECT_TRUE(v.same_bytes(ref.at(o.name))) << op.type << " '" << o.name << "': folded "
                                                << ::testing::PrintToString(values(v)) << ", reference "
                                                << ::testing::PrintToString(values(ref.at(o.name)));
    }
  }
  return n;
}

bool is_constexpr(const Op& op) { return op.type.rfind("constexpr_", 0) == 0; }

TEST(FoldConstexpr, AffineDequantizeBecomesAConst) {
  const Program before = parse16(
      "tensor<fp16, [2, 3]> x",
      "        tensor<fp16, [2, 3]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(0), "
      "name = tensor<string, []>(\"w\"), quantized_data = tensor<int8, [2, 3]>([[-128, 0, 127], [5, 6, 7]]), "
      "scale = tensor<fp16, [2]>([0.1, 3]), zero_point = tensor<int8, [2]>([1, -2])];\n"
      "        tensor<fp16, [2, 3]> y = add(x = x, y = w)[name = tensor<string, []>(\"y\")];",
      "y");
  EXPECT_EQ(op_types(before), (std::vector<std::string>{"constexpr_affine_dequantize", "add"}));
  const Program after = folded(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const", "add"}));
  // (q - zp) * scale in fp32, rounded to fp16.
  const float s0 = float(f16(0.1));
  EXPECT_EQ(values(producer(after, "w")->arg("val")->lit->value),
            (std::vector<double>{f16(-129 * s0), f16(-1 * s0), f16(126 * s0), 21, 24, 27}));
  const std::string text = print_mil(after);
  EXPECT_NE(text.find("tensor<fp16, [2, 3]> w = const()[name = tensor<string, []>(\"w\"), val = tensor<fp16, [2, 3]>("),
            std::string::npos)
      << text;
  EXPECT_EQ(expect_folded_to_reference(before, after, is_constexpr), 1);
  expect_same_outputs(before, after);
}

// Each form of each constexpr op, in a program of its own whose outputs are
// the decompressed tensors.
TEST(FoldConstexpr, EveryConstexprFormFoldsToTheReferenceValues) {
  const std::vector<std::pair<std::string, Program>> cases = {
      {"affine uint8, fp32 zero point, scalar scale, axis -1",
       parse16("", "        tensor<fp32, [2, 2]> w = constexpr_affine_dequantize()[axis = tensor<int32, []>(-1), "
                   "name = tensor<string, []>(\"w\"), quantized_data = tensor<uint8, [2, 2]>([[0, 255], [17, 128]]), "
                   "scale = tensor<fp32, []>(0.3), zero_point = tensor<fp32, [2]>([127.5, -3])];",
               "w")},
      {"lut iOS16, 2-bit packed",
       parse16("", "        tensor<fp16, [2, 3]> w = constexpr_lut_to_dense()[indices = tensor<uint8, [2]>([147, 6]), "
                   "lut = tensor<fp16, [4]>([-1, 0.5, 2, 10]), name = tensor<string, []>(\"w\"), "
                   "shape = tensor<uint32, [2]>([2, 3])];",
               "w")},
      {"lut iOS16, 8-bit",
       parse16("", "        tensor<int8, [3]> w = constexpr_lut_to_dense()[indices = tensor<uint8, [3]>([255, 0, 7]), "
                   "lut = tensor<int8, [256]>([" + [] {
                     std::string s;
                     for (int i = 0; i < 256; ++i) s += (i ? ", " : "") + std::to_string((i * 7) % 256 - 128);
                     return s;
                   }() + "]), name = tensor<string, []>(\"w\"), shape = tensor<uint32, [1]>([3])];",
               "w")},
      {"sparse iOS16, packed mask",
       parse16("", "        tensor<fp16, [2, 5]> w = constexpr_sparse_to_dense()[mask = tensor<uint8, [2]>([18, 2]), "
                   "name = tensor<string, []>(\"w\"), nonzero_data = tensor<fp16, [3]>([1, 2, 3]), "
                   "shape = tensor<uint32, [2]>([2, 5])];",
               "w")},
      {"cast fp16 -> fp32",
       parse16("", "        tensor<fp32, [3]> w = constexpr_cast()[name = tensor<string, []>(\"w\"), "
                   "output_dtype = tensor<string, []>(\"fp32\"), source_val = tensor<fp16, [3]>([0.1, -65504, 1])];",
               "w")},
      {"blockwise int4 with int4 offsets",
       parse18("", "    tensor<fp16, [2, 4]> w = constexpr_blockwise_shift_scale(data = tensor<int4, [2, 4]>([[-8, 7, 1, -1], "
                   "[0, 3, -2, 5]]), scale = tensor<fp16, [2, 2]>([[0.5, 2], [1, 0.25]]), offset = tensor<int4, [2, 2]>("
                   "[[1, -1], [2, 0]]))[name = string(\"w\")];",
               "w")},
      {"blockwise fp16 scale, fp32 offset (fp32 intermediate)",
       parse18("", "    tensor<fp16, [2, 2]> w = constexpr_blockwise_shift_scale(data = tensor<int8, [2, 2]>([[100, -3], "
                   "[7, 127]]), scale = tensor<fp16, [2, 1]>([[0.1], [3.3]]), offset = tensor<fp32, [2, 1]>([[0.0001], "
                   "[-0.7]]))[name = string(\"w\")];",
               "w")},
      {"blockwise fp16 data, fp32 scale, no offset",
       parse18("", "    tensor<fp32, [3]> w = constexpr_blockwise_shift_scale(data = tensor<fp16, [3]>([0.1, 2, -3]), "
                   "scale = tensor<fp32, [1]>([1.7]))[name = string(\"w\")];",
               "w")},
      {"lut iOS18, one lut per half of axis 0",
       parse18("", "    tensor<fp16, [6, 2]> w = constexpr_lut_to_dense(indices = tensor<uint2, [6, 2]>([[2, 3], [3, 0], "
                   "[1, 0], [3, 0], [2, 1], [0, 3]]), lut = tensor<fp16, [2, 1, 4, 1]>([[[[1], [5], [9], [13]]], "
                   "[[[2], [10], [18], [26]]]]))[name = string(\"w\")];",
               "w")},
      {"lut iOS18, vectors along axis 1 and -1",
       parse18("", "    tensor<int8, [2, 6, 2]> a = constexpr_lut_to_dense(indices = tensor<uint1, [2, 2, 2]>([[[0, 0], "
                   "[1, 0]], [[1, 1], [0, 0]]]), lut = tensor<int8, [1, 1, 1, 2, 3]>([[[[[1, 2, 3], [-1, -2, -3]]]]]), "
                   "vector_axis = int32(1))[name = string(\"a\")];\n"
                   "    tensor<int8, [2, 2, 6]> b = constexpr_lut_to_dense(indices = tensor<uint1, [2, 2, 2]>([[[0, 0], "
                   "[1, 0]], [[1, 1], [0, 0]]]), lut = tensor<int8, [1, 1, 1, 2, 3]>([[[[[1, 2, 3], [-1, -2, -3]]]]]), "
                   "vector_axis = int32(-1))[name = string(\"b\")];",
               "a, b")},
      {"lut iOS18, uint3 indices, per-column luts",
       parse18("", "    tensor<fp32, [2, 2]> w = constexpr_lut_to_dense(indices = tensor<uint3, [2, 2]>([[5, 3], [7, 0]]), "
                   "lut = tensor<fp32, [1, 2, 8, 1]>([[[[0], [10], [20], [30], [40], [50], [60], [70]], "
                   "[[0], [-1], [-2], [-3], [-4], [-5], [-6], [-7]]]]))[name = string(\"w\")];",
               "w")},
      {"sparse iOS18, uint1 mask",
       parse18("", "    tensor<int8, [2, 3]> w = constexpr_sparse_to_dense(nonzero_data = tensor<int8, [3]>([-5, 7, 9]), "
                   "mask = tensor<uint1, [2, 3]>([[1, 0, 0], [1, 1, 0]]))[name = string(\"w\")];",
               "w")},
      {"lut to sparse, vectors along axis 0",
       parse18("", "    tensor<uint1, [8, 6]> m, tensor<fp16, [18]> v = constexpr_lut_to_sparse(indices_mask = "
                   "tensor<uint1, [4, 6]>([[1, 1, 0, 0, 0, 0], [1, 1, 0, 0, 0, 1], [0, 1, 1, 0, 1, 0], "
                   "[0, 0, 0, 1, 0, 0]]), indices_nonzero_data = tensor<uint1, [9]>([0, 1, 1, 0, 1, 1, 0, 0, 1]), "
                   "lut = tensor<fp16, [1, 1, 2, 2]>([[[[2, 2.5], [3, 3.5]]]]), vector_axis = int32(0))"
                   "[name = string(\"v\")];",
               "m, v")},
      {"sparse blockwise shift scale with offsets",
       parse18("", "    tensor<uint1, [4, 4]> m, tensor<fp16, [9]> v = constexpr_sparse_blockwise_shift_scale("
                   "data_mask = tensor<uint1, [4, 4]>([[1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 1, 1], [1, 1, 0, 0]]), "
                   "nonzero_data = tensor<uint8, [9]>([10, 11, 3, 4, 5, 6, 7, 8, 9]), "
                   "scale = tensor<fp16, [1, 4]>([[0.1, 0.2, 0.3, 0.4]]), offset = tensor<uint8, [1, 4]>([[1, 2, 3, 4]]))"
                   "[name = string(\"v\")];",
               "m, v")},
  };
  for (const auto& [what, before] : cases) {
    SCOPED_TRACE(what);
    const Program after = folded(before);
    for (const Op& op : after.functions[0].ops) EXPECT_EQ(op.type, "const");
    int outputs = 0;
    for (const Op& op : before.functions[0].ops) outputs += int(op.outputs.size());
    EXPECT_EQ(total_ops(after), outputs);  // one const per output
    EXPECT_GE(expect_folded_to_reference(before, after, is_constexpr), 1);
    expect_same_outputs(before, after, 1);
  }
}

// A decompressed tensor feeding another decompression (iOS18 allows the
// chain): both fold, in order; dce then drops the intermediate.
TEST(FoldConstexpr, ChainedDecompressionFolds) {
  const Program before = parse18(
      "tensor<fp16, [2, 4]> x",
      "    tensor<int8, [2, 4]> q = constexpr_lut_to_dense(indices = tensor<uint2, [2, 4]>([[0, 1, 2, 3], [3, 3, 0, 1]]), "
      "lut = tensor<int8, [1, 1, 4, 1]>([[[[-100], [-1], [5], [127]]]]))[name = string(\"q\")];\n"
      "    tensor<fp16, [2, 4]> w = constexpr_blockwise_shift_scale(data = q, scale = tensor<fp16, [2, 2]>("
      "[[0.5, 0.25], [0.125, 3]]))[name = string(\"w\")];\n"
      "    tensor<fp16, [2, 4]> y = mul(x = x, y = w)[name = string(\"y\")];",
      "y");
  Program after = folded(before);
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const", "const", "mul"}));
  EXPECT_EQ(expect_folded_to_reference(before, after, is_constexpr), 2);
  EXPECT_EQ(values(producer(after, "w")->arg("val")->lit->value),
            (std::vector<double>{-50, -0.5, 1.25, 31.75, 127 * 0.125, 127 * 0.125, -300, -3}));
  run_passes(after, {"dce"});
  EXPECT_EQ(op_types(after), (std::vector<std::string>{"const", "mul"}));
  expect_same_outputs(before, after);
}

TEST(FoldConstexpr, DataMovementOfConstantsFolds) {
  const std::string c = "tensor<fp32, [2, 3]>([[1.5, -2.75, 3], [4, 1e10, -7.25]])";
  const Program before = parse18(
      "tensor<fp32, [2, 3]> x",
      "    tensor<fp32, [2, 3]> c = const()[name = string(\"c\"), val = " + c + "];\n"
      "    tensor<int32, [2]> p = const()[name = string(\"p\"), val = tensor<int32, [2]>([-1, 0])];\n"
      "    tensor<fp32, [3, 2]> r = reshape(x = c, shape = tensor<int32, [2]>([3, -1]))[name = string(\"r\")];\n"
      "    tensor<fp32, [3, 2]> t = transpose(x = c, perm = p)[name = string(\"t\")];\n"
      "    tensor<fp32, [1, 2, 1, 3]> e = expand_dims(x = c, axes = tensor<int32, [2]>([0, -2]))[name = string(\"e\")];\n"
      "    tensor<fp32, [2, 3]> q = squeeze(x = e)[name = string(\"q\")];\n"
      "    tensor<fp32, [2, 1, 3]> q1 = squeeze(x = e, axes = tensor<int32, [1]>([0]))[name = string(\"q1\")];\n"
      "    tensor<fp16, [2, 3]> h = cast(x = c, dtype = string(\"fp16\"))[name = string(\"h\")];\n"
      "    tensor<int32, [2, 3]> i = cast(x = c, dtype = string(\"int32\"))[name = string(\"i\")];\n"
      "    tensor<bool, [2, 3]> b = cast(x = i, dtype = string(\"bool\"))[name = string(\"b\")];\n"
      "    tensor<int32, [3, 2]> it = transpose(x = i, perm = tensor<int32, [2]>([1, 0]))[name = string(\"it\")];\n"
      "    tensor<fp32, [2, 3]> d = identity(x = c)[name = string(\"d\")];\n"
      "    tensor<fp32, [4, 3]> k = concat(values = (c, d), axis = int32(0))[name = string(\"k\")];\n"
      "    tensor<fp32, [2, 6]> il = concat(values = (c, d), axis = int32(-1), interleave = bool(true))"
      "[name = string(\"il\")];\n"
      "    tensor<int32, [3]> sc = concat(values = (int32(1), int32(-2), int32(3)), axis = int32(0))"
      "[name = string(\"sc\")];\n"
      "    tensor<bool, [2, 6]> bb = concat(values = (b, b), axis = int32(1))[name = string(\"bb\")];\n"
      "    tensor<fp32, [2, 2]> s1 = slice_by_index(x = c, begin = tensor<int32, [2]>([0, 2]), "
      "end = tensor<int32, [2]>([2, 0]), stride = tensor<int32, [2]>([1, -1]))[name = string(\"s1\")];\n"
      "    tensor<fp32, [3]> s2 = slice_by_index(x = c, begin = tensor<int32, [2]>([-1, 0]), "
      "end = tensor<int32, [2]>([0, 3]), squeeze_mask = tensor<bool, [2]>([true, false]))[name = string(\"s2\")];\n"
      "    tensor<fp32, [2, 2]> s3 = slice_by_index(x = c, begin = tensor<int32, [2]>([5, 7]), "
      "end = tensor<int32, [2]>([0, 0]), stride = tensor<int32, [2]>([1, 2]), begin_mask = tensor<bool, [2]>([true, true]), "
      "end_mask = tensor<bool, [2]>([true, true]))[name = string(\"s3\")];\n"
      "    tensor<fp32, [2, 3]> s4 = slice_by_index(x = c, begin = tensor<int32, [2]>([0, 0]), "
      "end = tensor<int32, [2]>([0, 0]), stride = tensor<int32, [2]>([-1, -1]), begin_mask = tensor<bool, [2]>([true, true]), "
      "end_mask = tensor<bool, [2]>([true, true]))[name = string(\"s4\")];\n"
      "    tensor<fp32, [0, 3]> s5 = slice_by_index(x = c, begin = tensor<int32, [2]>([1, 0]), "
      "end = tensor<int32, [2]>([1, 3]))[name = string(\"s5\")];\n"
      "    tensor<fp32, [1, 2]> z = slice_by_size(x = c, begin = tensor<int32, [2]>([-1, 1]), "
      "size = tensor<int32, [2]>([1, -1]))[name = string(\"z\")];\n"
      "    tensor<fp32, [2, 3]> y = add(x = x, y = q)[name = string(\"y\")];",
      "y, r, t, q1, h, i, b, it, k, il, sc, bb, s1, s2, s3, s4, s5, z");
  const Program after = folded(before);
  const std::vector<std::string> types = op_types(after);
  EXPECT_EQ(std::count(types.begin(), types.end(), "const"), int64_t(types.size()) - 1);  // all but the add
  EXPECT_EQ(types.back(), "add");
  const std::set<std::string> moved = {"reshape", "transpose", "expand_dims", "squeeze", "cast",
                                       "identity", "concat", "slice_by_index", "slice_by_size"};
  EXPECT_EQ(expect_folded_to_reference(before, after, [&](const Op& op) { return moved.count(op.type) > 0; }), 20);
  // Spot checks against hand-worked values.
  auto val = [&](const std::string& n) { return values(producer(after, n)->arg("val")->lit->value); };
  EXPECT_EQ(val("t"), (std::vector<double>{1.5, 4, -2.75, 1e10, 3, -7.25}));
  EXPECT_EQ(val("i"), (std::vector<double>{1, -2, 3, 4, 2147483647, -7}));
  EXPECT_EQ(val("h")[4], INFINITY);
  EXPECT_EQ(val("il"), (std::vector<double>{1.5, 1.5, -2.75, -2.75, 3, 3, 4, 4, 1e10, 1e10, -7.25, -7.25}));
  EXPECT_EQ(val("s1"), (std::vector<double>{3, -2.75, -7.25, 1e10}));
  EXPECT_EQ(val("s2"), (std::vector<double>{4, 1e10, -7.25}));
  EXPECT_EQ(val("s3"), (std::vector<double>{1.5, 3, 4, -7.25}));
  EXPECT_EQ(val("s4"), (std::vector<double>{-7.25, 1e10, 4, 3, -2.75, 1.5}));
  EXPECT_EQ(val("z"), (std::vector<double>{1e10, -7.25}));
  expect_same_outputs(before, after);
}

// Data movement of a constant stays computed above 2^20 result elements (a
// kernel reads the weight through the view); decompression always folds.
TEST(FoldConstexpr, LargeDataMovementStaysComputedNonConstantsStay) {
  FunctionBuilder f("main");
  const Value x = f.input("x", Type::tensor(DType::FP16, {1024, 1025}));
  Tensor big(DType::FP16, {1024, 1025});
  const Value c = f.constant("c", big);
  f.output(f.op("reshape", "r_big", {{"x", c}, {"shape", lit_i32s({1025, 1024})}}));                   // 2^20 + 1024
  f.output(f.op("slice_by_size", "s_max", {{"x", c}, {"begin", lit_i32s({0, 1})}, {"size", lit_i32s({1024, 1024})}}));
  f.output(f.op("reshape", "r_x", {{"x", x}, {"shape", lit_i32s({1025, 1024})}}));                     // not constant
  Tensor q(DType::Int8, {1024, 1025});
  Tensor s(DType::FP16, {1, 1});
  s.set(0, 0.5);
  f.output(f.op("constexpr_blockwise_shift_scale", "w_big", {{"data", lit(q)}, {"scale", lit(s)}}));
  Program p = make_program({f.build()});
  verify(p);
  run_passes(p, {"fold-constexpr"});
  EXPECT_EQ(op_types(p), (std::vector<std::string>{"const", "reshape", "const", "reshape", "const"}));
  const Tensor& w = producer(p, "w_big")->arg("val")->lit->value;
  EXPECT_EQ(w.shape(), (Shape{1024, 1025}));
  EXPECT_EQ(w.dtype(), DType::FP16);
}

TEST(FoldConstexpr, RunsAfterLegalizeAndBeforeCseAndDce) {
  std::vector<std::string> names;
  for (const PassInfo& p : all_passes()) names.push_back(p.name);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  ASSERT_LT(at("dce"), int64_t(names.size()));
  EXPECT_LT(at("legalize-layout-idioms"), at("fold-constexpr"));
  EXPECT_EQ(at("fold-constexpr") + 1, at("cse"));
  EXPECT_EQ(at("cse") + 1, at("dce"));
}

// All 98 constexpr ops of the 16 Silero bundles fold to exactly the values
// the reference executor decompresses, one const for one op.
TEST(FoldConstexpr, EverySileroConstexprFoldsToTheReferenceValues) {
  MILRT_REQUIRE_SHARED();
  int folded_ops = 0;
  for (const CorpusProgram& c : shared_corpus()) {
    if (c.name.rfind("silero-vad/", 0) != 0) continue;
    SCOPED_TRACE(c.name);
    const Program after = folded(c.program);
    EXPECT_EQ(total_ops(after), total_ops(c.program));
    EXPECT_EQ(std::count_if(after.functions[0].ops.begin(), after.functions[0].ops.end(), is_constexpr), 0);
    folded_ops += expect_folded_to_reference(c.program, after, is_constexpr);
  }
  EXPECT_EQ(folded_ops, 98);
}

// The measured effect of the three passes on two Silero 32 ms bundles: the
// 7 decompressions become consts one for one; cse then merges 45 repeated
// constants (conv strides, pads and dilations, dtype names, exponents);
// nothing is dead, every op feeds an output.
TEST(FoldConstexpr, SileroOpCountsThroughFoldCseDce) {
  MILRT_REQUIRE_SHARED();
  struct Expect {
    const char* bundle;
    int before, after_fold, after_cse, after_dce;
  };
  for (const Expect& e : {Expect{"unified_int8", 137, 137, 92, 92}, Expect{"unified_palette_4bit", 137, 137, 92, 92}}) {
    SCOPED_TRACE(e.bundle);
    Program p = load_model(shared_dir() + "/testdata/coreml/silero-vad/" + e.bundle + ".mlmodelc");
    legalize_layout_idioms(p);
    verify(p);
    const Program original = p;
    std::vector<int> counts = {total_ops(p)};
    for (const char* pass : {"fold-constexpr", "cse", "dce"}) {
      run_passes(p, {pass});
      counts.push_back(total_ops(p));
    }
    std::string hist;
    for (const auto& [type, n] : op_counts(p)) hist += " " + type + ":" + std::to_string(n);
    std::printf("[passes] %s: %d ops -> fold-constexpr %d -> cse %d -> dce %d;%s\n", e.bundle, counts[0], counts[1],
                counts[2], counts[3], hist.c_str());
    EXPECT_EQ(counts, (std::vector<int>{e.before, e.after_fold, e.after_cse, e.after_dce}));
    expect_same_outputs(original, p);
  }
}

TEST(FoldConstexpr, SeedProgramsComputeTheSame) {
  expect_preserved(seed_corpus(), {"fold-constexpr"}, [](const std::string&, const Program& before, const Program& after) {
    EXPECT_EQ(total_ops(after), total_ops(before));
    EXPECT_EQ(op_counts(after).count("constexpr_blockwise_shift_scale"), 0u);
  });
}

TEST(FoldConstexpr, CoreMLBundlesComputeTheSame) {
  MILRT_REQUIRE_SHARED();
  expect_preserved(shared_corpus(), {"fold-constexpr"}, [](const std::string&, const Program&, const Program& after) {
    for (const auto& [type, n] : op_counts(after)) EXPECT_NE(type.rfind("constexpr_", 0), 0u) << type;
  });
}

}  // namespace
}  // namespace milrt::test::pass
