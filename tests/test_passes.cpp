// Passes and whole-program checks on their own IR: legalize_layout_idioms,
// verify, and the builder. Each test shows the IR before and after.
#include "ir/verifier.h"
#include "milrt/builder.h"
#include "support/test_util.h"

namespace milrt {
namespace {

Program parse(const std::string& body, const std::string& params) {
  return parse_mil("program(1.3)\n{\n  func main<ios18>(" + params + ") {\n" + body + "\n  } -> (y);\n}\n", "t.mil", ".");
}

std::string verify_error(const Program& p) {
  try {
    verify(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::vector<std::string> op_types(const Program& p) {
  std::vector<std::string> r;
  for (auto& op : p.functions[0].ops) r.push_back(op.type);
  return r;
}

TEST(LegalizeLayoutIdioms, MatvecOfChannelVectorGetsReshapes) {
  // The first seed's idiom: [1, 64, 1, 1] activation times [128, 64] weight "gives" [1, 1, 1, 128].
  Program p = parse(
      "    tensor<fp32, [1, 1, 1, 128]> y = matmul(x = x, y = w, transpose_y = bool(true))[name = string(\"y\")];",
      "tensor<fp32, [1, 64, 1, 1]> x, tensor<fp32, [128, 64]> w");
  EXPECT_NE(verify_error(p).find("matmul 'y'"), std::string::npos);
  auto notes = legalize_layout_idioms(p);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("t.mil:4:"), std::string::npos);
  EXPECT_EQ(op_types(p), (std::vector<std::string>{"reshape", "matmul", "reshape"}));
  const auto& ops = p.functions[0].ops;
  EXPECT_EQ(ops[0].outputs[0].type.shape, (Shape{64}));           // x taken as a vector
  EXPECT_EQ(ops[1].outputs[0].type.shape, (Shape{128}));
  EXPECT_EQ(ops[2].outputs[0].name, "y");
  EXPECT_EQ(ops[2].outputs[0].type.shape, (Shape{1, 1, 1, 128}));
  EXPECT_EQ(verify_error(p), "");
  // And it computes W·x.
  Tensor x(DType::FP32, {1, 64, 1, 1}), w(DType::FP32, {128, 64});
  for (int i = 0; i < 64; ++i) x.set(i, i * 0.01);
  for (int i = 0; i < 128 * 64; ++i) w.set(i, (i % 7) - 3);
  TensorMap out = run_reference(p, "main", {{"x", x}, {"w", w}});
  for (int j = 0; j < 128; ++j) {
    double e = 0;
    for (int i = 0; i < 64; ++i) e += w.at(j * 64 + i) * x.at(i);
    EXPECT_NEAR(out["y"].at(j), e, 1e-4);
  }
}

TEST(LegalizeLayoutIdioms, OuterProductAndTransposedMatvec) {
  // dW = outer(a, b) written as matmul(a^T, b) of two channel vectors, and
  // W^T·d written with transpose_x on a channel vector (both from the seed).
  Program p = parse(
      "    tensor<fp32, [1, 4, 1, 3]> o = matmul(x = a, y = b, transpose_x = bool(true))[name = string(\"o\")];\n"
      "    tensor<fp32, [1, 1, 1, 3]> y = matmul(x = a, y = o, transpose_x = bool(true))[name = string(\"y\")];",
      "tensor<fp32, [1, 4, 1, 1]> a, tensor<fp32, [1, 3, 1, 1]> b");
  auto notes = legalize_layout_idioms(p);
  EXPECT_EQ(notes.size(), 2u);
  ASSERT_EQ(verify_error(p), "");
  Tensor a = test::make(DType::FP32, {1, 4, 1, 1}, {1, 2, 3, 4});
  Tensor b = test::make(DType::FP32, {1, 3, 1, 1}, {10, 20, 30});
  TensorMap all = run_reference_all(p, "main", {{"a", a}, {"b", b}});
  // o[r][c] = a[r]·b[c]; y[c] = sum_r a[r]·o[r][c] = (sum a²)·b[c] = 30·b[c].
  EXPECT_EQ(test::values(all["o"]), (std::vector<double>{10, 20, 30, 20, 40, 60, 30, 60, 90, 40, 80, 120}));
  EXPECT_EQ(test::values(all["y"]), (std::vector<double>{300, 600, 900}));
}

TEST(LegalizeLayoutIdioms, LeavesWellTypedAndGenuinelyWrongOpsAlone) {
  Program good = parse("    tensor<fp32, [2, 3]> y = relu(x = x)[name = string(\"y\")];", "tensor<fp32, [2, 3]> x");
  Program before = good;
  EXPECT_TRUE(legalize_layout_idioms(good).empty());
  EXPECT_EQ(ir_diff(before, good), "");
  // [2, 3] -> [3, 2] is not a size-1 move: stays an error for verify().
  Program bad = parse("    tensor<fp32, [3, 2]> y = relu(x = x)[name = string(\"y\")];", "tensor<fp32, [2, 3]> x");
  EXPECT_TRUE(legalize_layout_idioms(bad).empty());
  std::string e = verify_error(bad);
  EXPECT_NE(e.find("t.mil:4:"), std::string::npos) << e;
  EXPECT_NE(e.find("declared tensor<fp32, [3, 2]>"), std::string::npos) << e;
}

TEST(Verify, NamesTheOpAndTheProblem) {
  struct Case { std::string body, params, says; };
  const Case cases[] = {
      {"    tensor<fp32, [2]> y = frobnicate(x = x)[name = string(\"y\")];", "tensor<fp32, [2]> x", "unknown op 'frobnicate'"},
      {"    tensor<fp32, [2]> y = relu(x = z)[name = string(\"y\")];", "tensor<fp32, [2]> x", "undefined value 'z'"},
      {"    tensor<fp32, [2]> y = relu(x = x, bogus = x)[name = string(\"y\")];", "tensor<fp32, [2]> x", "unknown input 'bogus'"},
      {"    tensor<fp32, [2]> y = add(x = x)[name = string(\"y\")];", "tensor<fp32, [2]> x", "missing required input 'y'"},
      {"    tensor<fp32, [2]> y = relu(x = x)[name = string(\"y\")];\n    tensor<fp32, [2]> y = relu(x = x)[name = string(\"y2\")];",
       "tensor<fp32, [2]> x", "redefines value 'y'"},
      {"    tensor<fp32, [2]> q = relu(x = x)[name = string(\"q\")];", "tensor<fp32, [2]> x", "returns undefined value 'y'"},
  };
  for (auto& c : cases) {
    std::string e = verify_error(parse(c.body, c.params));
    EXPECT_NE(e.find(c.says), std::string::npos) << c.body << " -> " << e;
    EXPECT_NE(e.find("t.mil:"), std::string::npos) << e;
  }
}

TEST(Builder, InfersTypesAndRoundTripsThroughText) {
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP32, {2, 3}));
  Value w = f.constant("w", test::make(DType::FP32, {4, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1}));
  Value y = f.op("linear", "y", {{"x", x}, {"weight", w}});
  EXPECT_EQ(y.type.shape, (Shape{2, 4}));
  Value z = f.op("softmax", "z", {{"x", y}, {"axis", lit_i32(-1)}});
  f.output(z);
  Program p = make_program({f.build()});
  EXPECT_EQ(verify_error(p), "");
  Program q = parse_mil(print_mil(p), "printed", ".");
  EXPECT_EQ(ir_diff(p, q), "");
  EXPECT_THROW(f.op("matmul", "bad", {{"x", x}, {"y", x}}), Error);  // [2,3]·[2,3]: K mismatch
}

TEST(SaveModel, WritesBundleThatLoadsBackIdentically) {
  FunctionBuilder f("main");
  Value x = f.input("x", Type::tensor(DType::FP16, {1, 40}));
  Tensor big(DType::FP16, {40});
  for (int i = 0; i < 40; ++i) big.set(i, i * 0.25);
  Value b = f.constant("b", big);
  Value s = f.constant("s", test::make(DType::FP16, {1}, {2}));
  Value y = f.op("mul", "y", {{"x", f.op("add", "t", {{"x", x}, {"y", b}})}, {"y", s}});
  f.output(y);
  Program p = make_program({f.build()});
  std::string dir = test::temp_dir("save") + "/m.mlmodelc";
  save_model(p, dir);
  Program q = load_model(dir);
  EXPECT_EQ(q.functions[0].ops[0].arg("val")->lit->blob_path, "@model_path/weights/weight.bin");
  EXPECT_TRUE(q.functions[0].ops[1].arg("val")->lit->blob_path.empty());  // small: inline
  EXPECT_TRUE(q.functions[0].ops[0].arg("val")->lit->value.same_bytes(big));
  Tensor in(DType::FP16, {1, 40});
  for (int i = 0; i < 40; ++i) in.set(i, 1);
  TensorMap out = run_reference(q, "main", {{"x", in}});
  for (int i = 0; i < 40; ++i) EXPECT_EQ(out["y"].at(i), 2 * (1 + i * 0.25));
}

}  // namespace
}  // namespace milrt

namespace milrt {
namespace {
TEST(LegalizeLayoutIdioms, NeverReinterpretsRankDependentOps) {
  // rms_norm of a rank-4 [1, 4, 1, 3] normalizes over C = 4; a [3] weight does
  // not fit. Squeezing to [4, 3] would make it "fit" over the wrong axis.
  Program p = parse("    tensor<fp32, [1, 4, 1, 3]> y = rms_norm(x = x, w = w)[name = string(\"y\")];",
                    "tensor<fp32, [1, 4, 1, 3]> x, tensor<fp32, [3]> w");
  EXPECT_TRUE(legalize_layout_idioms(p).empty());
  EXPECT_NE(verify_error(p).find("rms_norm 'y'"), std::string::npos);
}
}  // namespace
}  // namespace milrt
