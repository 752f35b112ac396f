// canonicalize: linear and 1x1 conv become matmul (+ add), squeeze and
// expand_dims become reshape, reshape/transpose chains collapse, identities
// go. Each test shows the IR before and after and runs both programs on the
// reference executor with random inputs.
//
// Tolerances: the data-movement rules are exact (compared bit for bit).
// linear and 1x1 conv compute the same sum in double and round it once, as
// the single op does; with a bias the sum is rounded before the add, one
// extra rounding of at most half an ulp of |x·W|. With inputs and weights in
// [-1, 1] and K <= 8 that is <= 2^-24·8 = 4.8e-7 in fp32, hence 1e-6 absolute.
#include <cstdio>

#include "passes/pass_registry.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

using Strings = std::vector<std::string>;

constexpr double kBiasAbsF32 = 1e-6;

Program canonicalized(const Program& p) {
  Program q = p;
  run_passes(q, {"canonicalize"});
  return q;
}

std::vector<int64_t> ints_of(const Tensor* t) {
  std::vector<int64_t> r;
  if (t)
    for (double v : values(*t)) r.push_back(int64_t(v));
  return r;
}

// ---- pow --------------------------------------------------------------------

// pow(x, 2) becomes x·x (a scalar or a full constant 2, fp16 too); any other
// exponent, a variable one, or one that broadcasts x stays a pow. Before and
// after agree bit for bit on the reference executor (x² is exact in double
// and rounded once either way).
TEST(Canonicalize, PowOfTwoBecomesASquare) {
  for (const char* dt : {"fp32", "fp16"}) {
    SCOPED_TRACE(dt);
    const std::string t = std::string("tensor<") + dt + ", [2, 3]>";
    const Program before = parse_program(
        t + " x, " + t + " e",
        stmt(t, "a", std::string("pow(x = x, y = ") + dt + "(2))") +
            stmt(t, "b", "pow(x = a, y = " + std::string("tensor<") + dt + ", [2, 3]>([[2, 2, 2], [2, 2, 2]]))") +
            stmt(t, "c", std::string("pow(x = b, y = ") + dt + "(3))") + stmt(t, "d", "pow(x = c, y = e)") +
            stmt(std::string("tensor<") + dt + ", [2, 2, 3]>", "f",
                 "pow(x = d, y = tensor<" + std::string(dt) + ", [2, 1, 1]>([[[2]], [[2]]]))"),
        "f");
    EXPECT_EQ(op_types(canonicalized(before)), (Strings{"mul", "mul", "pow", "pow", "pow"}));
    expect_same_function(before, canonicalized(before), 0, 0, "pow");
  }
}

// ---- linear -----------------------------------------------------------------

TEST(Canonicalize, LinearBecomesMatmulThenBiasAdd) {
  Tensor w = random(DType::FP32, {5, 4}, 1), b = random(DType::FP32, {5}, 2);
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      const_stmt("w", w) + const_stmt("b", b) +
          stmt("tensor<fp32, [2, 3, 5]>", "y", "linear(x = x, weight = w, bias = b)") +
          stmt("tensor<fp32, [2, 3, 5]>", "z", "relu(x = y)"),
      "z");
  EXPECT_EQ(op_types(before), (Strings{"linear", "relu"}));
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"matmul", "add", "relu"}));
  const Op& add = producer(after, "y");
  const Op& mm = producer(after, var_of(add, "x"));
  EXPECT_EQ(mm.type, "matmul");
  EXPECT_EQ(var_of(mm, "x"), "x");
  EXPECT_EQ(var_of(mm, "y"), "w");
  EXPECT_EQ(values(*const_input(after, mm, "transpose_y")), (std::vector<double>{1}));
  EXPECT_EQ(var_of(add, "y"), "b");
  EXPECT_EQ(add.name, "y");
  // Both keep the linear's source position.
  int line = producer(before, "y").loc.line;
  EXPECT_EQ(mm.loc.line, line);
  EXPECT_EQ(add.loc.line, line);
  std::string text = print_mil(after);
  EXPECT_NE(text.find("tensor<fp32, [2, 3, 5]> y__matmul = matmul(x = x, y = w, transpose_y = bool(true))"),
            std::string::npos)
      << text;
  expect_same_function(before, after, 0, kBiasAbsF32, "linear");
}

// Without a bias the matmul is the whole replacement and takes the output's
// name; in a program 1.0 the new literal is spelled in that dialect.
TEST(Canonicalize, LinearWithoutBiasIsOneMatmulInEitherDialect) {
  const Program before = parse_mil(
      "program(1.0)\n{\n    func main<ios15>(tensor<fp16, [4]> x) {\n"
      "        tensor<fp16, [3, 4]> w = const()[name = tensor<string, []>(\"w\"), val = " +
          literal(random(DType::FP16, {3, 4}, 3)) +
          "];\n"
          "        tensor<fp16, [3]> y = linear(x = x, weight = w)[name = tensor<string, []>(\"y\")];\n"
          "    } -> (y);\n}\n",
      "t.mil", ".");
  verify(before);
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"matmul"}));
  EXPECT_EQ(producer(after, "y").type, "matmul");
  std::string text = print_mil(after);
  EXPECT_NE(text.find("tensor<fp16, [3]> y = matmul(x = x, y = w, transpose_y = tensor<bool, []>(true))"),
            std::string::npos)
      << text;
  // The same sum, rounded once: identical results.
  expect_same_function(before, after, 0, 0, "linear without bias");
}

// ---- 1x1 conv ----------------------------------------------------------------

// The seeds' channel-first [1, C, 1, S] idiom.
TEST(Canonicalize, PointwiseConvOnRank4BecomesMatmulOfFlattenedX) {
  Tensor w = random(DType::FP32, {6, 8, 1, 1}, 4), b = random(DType::FP32, {6}, 5);
  const Program before = parse_program(
      "tensor<fp32, [1, 8, 1, 5]> x",
      const_stmt("w", w) + const_stmt("b", b) +
          stmt("tensor<fp32, [1, 6, 1, 5]>", "y", "conv(x = x, weight = w, bias = b)"),
      "y");
  const Program after = canonicalized(before);
  // The 4-D weight and the bias are replaced by [6, 8] and [6, 1] constants.
  EXPECT_EQ(op_types(after, true), (Strings{"const", "const", "reshape", "matmul", "add", "reshape"}));
  const Op& out = producer(after, "y");
  EXPECT_EQ(out.type, "reshape");
  EXPECT_EQ(ints_of(const_input(after, out, "shape")), (std::vector<int64_t>{1, 6, 1, 5}));
  const Op& add = producer(after, var_of(out, "x"));
  const Op& mm = producer(after, var_of(add, "x"));
  const Op& flat = producer(after, var_of(mm, "y"));
  EXPECT_EQ(var_of(flat, "x"), "x");
  EXPECT_EQ(ints_of(const_input(after, flat, "shape")), (std::vector<int64_t>{1, 8, 5}));
  const Tensor* w2 = const_input(after, mm, "x");
  ASSERT_NE(w2, nullptr);
  EXPECT_EQ(w2->shape(), (Shape{6, 8}));
  EXPECT_EQ(values(*w2), values(w));
  const Tensor* b2 = const_input(after, add, "y");
  ASSERT_NE(b2, nullptr);
  EXPECT_EQ(b2->shape(), (Shape{6, 1}));
  EXPECT_EQ(values(*b2), values(b));
  for (const Op& op : after.function("main")->ops) EXPECT_EQ(op.loc.line, producer(before, "y").loc.line);
  expect_same_function(before, after, 0, kBiasAbsF32, "1x1 conv, rank 4");
}

// [N, C, L] needs no reshape of x: W [Cout, Cin] broadcasts over the batch.
// A weight that is not a constant is reshaped by an op.
TEST(Canonicalize, PointwiseConvOnRank3BatchesOverN) {
  const Program before = parse_program(
      "tensor<fp32, [2, 8, 5]> x, tensor<fp32, [6, 8, 1]> w",
      stmt("tensor<fp32, [2, 6, 5]>", "y",
           "conv(x = x, weight = w, pad_type = string(\"custom\"), pad = tensor<int32, [2]>([0, 0]), "
           "strides = tensor<int32, [1]>([1]), dilations = tensor<int32, [1]>([1]), groups = int32(1))"),
      "y");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"reshape", "matmul"}));
  const Op& mm = producer(after, "y");
  EXPECT_EQ(var_of(mm, "y"), "x");
  const Op& w2 = producer(after, var_of(mm, "x"));
  EXPECT_EQ(var_of(w2, "x"), "w");
  EXPECT_EQ(w2.outputs[0].type.shape, (Shape{6, 8}));
  expect_same_function(before, after, 0, 0, "1x1 conv, rank 3");
}

TEST(Canonicalize, SamePaddingOfAPointwiseConvIsNoPadding) {
  for (const char* pad_type : {"same", "same_lower", "valid"}) {
    SCOPED_TRACE(pad_type);
    Tensor b = random(DType::FP32, {3}, 6);
    const Program before = parse_program(
        "tensor<fp32, [1, 2, 4]> x",
        const_stmt("w", random(DType::FP32, {3, 2, 1}, 7)) + const_stmt("b", b) +
            stmt("tensor<fp32, [1, 3, 4]>", "y",
                 std::string("conv(x = x, weight = w, bias = b, pad_type = string(\"") + pad_type + "\"))"),
        "y");
    const Program after = canonicalized(before);
    EXPECT_EQ(op_types(after), (Strings{"matmul", "add"}));
    EXPECT_EQ(const_input(after, producer(after, "y"), "y")->shape(), (Shape{3, 1}));
    expect_same_function(before, after, 0, kBiasAbsF32, pad_type);
  }
}

// Anything but a plain channel mix stays a conv.
TEST(Canonicalize, OtherConvsStay) {
  struct Case {
    const char* what;
    std::string params, weight, out, extra;
  };
  const Case cases[] = {
      {"3-wide kernel", "tensor<fp32, [1, 2, 4]> x", "tensor<fp32, [3, 2, 3]>", "tensor<fp32, [1, 3, 2]>", ""},
      {"stride 2", "tensor<fp32, [1, 2, 4]> x", "tensor<fp32, [3, 2, 1]>", "tensor<fp32, [1, 3, 2]>",
       ", strides = tensor<int32, [1]>([2])"},
      {"dilation 2", "tensor<fp32, [1, 2, 4]> x", "tensor<fp32, [3, 2, 1]>", "tensor<fp32, [1, 3, 4]>",
       ", dilations = tensor<int32, [1]>([2])"},
      {"two groups", "tensor<fp32, [1, 2, 4]> x", "tensor<fp32, [4, 1, 1]>", "tensor<fp32, [1, 4, 4]>",
       ", groups = int32(2)"},
      {"custom padding", "tensor<fp32, [1, 2, 4]> x", "tensor<fp32, [3, 2, 1]>", "tensor<fp32, [1, 3, 5]>",
       ", pad_type = string(\"custom\"), pad = tensor<int32, [2]>([1, 0])"},
      {"3-D conv", "tensor<fp32, [1, 2, 1, 1, 4]> x", "tensor<fp32, [3, 2, 1, 1, 1]>",
       "tensor<fp32, [1, 3, 1, 1, 4]>", ""},
      {"unknown spatial size, rank 4", "tensor<fp32, [1, 2, 1, ?]> x", "tensor<fp32, [3, 2, 1, 1]>",
       "tensor<fp32, [1, 3, 1, ?]>", ""},
      {"fp32 bias on fp16 x", "tensor<fp16, [1, 2, 4]> x", "tensor<fp16, [3, 2, 1]>", "tensor<fp16, [1, 3, 4]>",
       ", bias = tensor<fp32, [3]>([1, 2, 3])"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const Program before = parse_program(
        c.params + ", " + c.weight + " w", stmt(c.out, "y", "conv(x = x, weight = w" + c.extra + ")"), "y");
    EXPECT_EQ(ir_diff(before, canonicalized(before)), "");
  }
}

// ---- squeeze, expand_dims, reshape chains --------------------------------------

TEST(Canonicalize, SqueezeAndExpandDimsBecomeOneReshape) {
  const Program before = parse_program(
      "tensor<fp32, [2, 1, 3]> x",
      stmt("tensor<fp32, [2, 3]>", "s", "squeeze(x = x, axes = tensor<int32, [1]>([1]))") +
          stmt("tensor<fp32, [1, 2, 3]>", "e", "expand_dims(x = s, axes = tensor<int32, [1]>([0]))") +
          stmt("tensor<fp32, [1, 2, 3]>", "z", "relu(x = e)"),
      "z");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"reshape", "relu"}));
  const Op& r = producer(after, "e");
  EXPECT_EQ(var_of(r, "x"), "x");
  EXPECT_EQ(ints_of(const_input(after, r, "shape")), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(r.loc.line, producer(before, "e").loc.line);
  expect_same_function(before, after, 0, 0, "squeeze/expand_dims");
}

TEST(Canonicalize, SqueezeWithUnknownResultStays) {
  const Program before = parse_program(
      "tensor<fp32, [?, 1, 3]> x", stmt("tensor<fp32, [?, 3]>", "y", "squeeze(x = x, axes = tensor<int32, [1]>([1]))"),
      "y");
  EXPECT_EQ(ir_diff(before, canonicalized(before)), "");
}

TEST(Canonicalize, ReshapeOfReshapeIsOneReshape) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [6, 4]>", "r1", "reshape(x = x, shape = tensor<int32, [2]>([6, -1]))") +
          stmt("tensor<fp32, [4, 6]>", "r2", "reshape(x = r1, shape = tensor<int32, [2]>([4, 6]))") +
          stmt("tensor<fp32, [4, 6]>", "z", "relu(x = r2)"),
      "z");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"reshape", "relu"}));
  EXPECT_EQ(var_of(producer(after, "r2"), "x"), "x");
  expect_same_function(before, after, 0, 0, "reshape chain");
}

TEST(Canonicalize, ReshapeBackToTheSameShapeDisappears) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [6, 4]>", "r1", "reshape(x = x, shape = tensor<int32, [2]>([6, 4]))") +
          stmt("tensor<fp32, [2, 3, 4]>", "r2", "reshape(x = r1, shape = tensor<int32, [3]>([2, 3, 4]))") +
          stmt("tensor<fp32, [2, 3, 4]>", "z", "relu(x = r2)"),
      "z");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"relu"}));
  EXPECT_EQ(var_of(producer(after, "z"), "x"), "x");
  expect_same_function(before, after, 0, 0, "reshape round trip");
}

// A reshape used elsewhere stays; the one reading it reads x instead (a
// reshape is a view, so this duplicates nothing).
TEST(Canonicalize, ReshapeUsedElsewhereStays) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [6, 4]>", "r1", "reshape(x = x, shape = tensor<int32, [2]>([6, 4]))") +
          stmt("tensor<fp32, [6, 4]>", "a", "relu(x = r1)") +
          stmt("tensor<fp32, [24]>", "r2", "reshape(x = r1, shape = tensor<int32, [1]>([24]))") +
          stmt("tensor<fp32, [24]>", "b", "relu(x = r2)"),
      "a, b");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"reshape", "relu", "reshape", "relu"}));
  EXPECT_EQ(var_of(producer(after, "a"), "x"), "r1");
  EXPECT_EQ(var_of(producer(after, "r2"), "x"), "x");
  expect_same_function(before, after, 0, 0, "shared reshape");
}

// ---- transposes, identities ----------------------------------------------------------

TEST(Canonicalize, TransposeOfTransposeComposesPerms) {
  // t1 = x^(0 2 1): [2, 4, 3]; t2 = t1^(2 0 1): [3, 2, 4], i.e. x^(1 0 2).
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [2, 4, 3]>", "t1", "transpose(x = x, perm = tensor<int32, [3]>([0, -1, 1]))") +
          stmt("tensor<fp32, [3, 2, 4]>", "t2", "transpose(x = t1, perm = tensor<int32, [3]>([2, 0, 1]))") +
          stmt("tensor<fp32, [3, 2, 4]>", "z", "relu(x = t2)"),
      "z");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"transpose", "relu"}));
  const Op& t = producer(after, "t2");
  EXPECT_EQ(var_of(t, "x"), "x");
  EXPECT_EQ(ints_of(const_input(after, t, "perm")), (std::vector<int64_t>{1, 0, 2}));
  expect_same_function(before, after, 0, 0, "transpose chain");
}

// coremltools writes perms as `const` ops; those of merged transposes go too.
TEST(Canonicalize, TransposesWithConstOpPermsCompose) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      const_stmt("p1", make(DType::Int32, {3}, {2, 0, 1})) + const_stmt("p2", make(DType::Int32, {3}, {1, 2, 0})) +
          const_stmt("p3", make(DType::Int32, {3}, {0, 2, 1})) +
          stmt("tensor<fp32, [4, 2, 3]>", "t1", "transpose(x = x, perm = p1)") +
          stmt("tensor<fp32, [2, 3, 4]>", "t2", "transpose(x = t1, perm = p2)") +
          stmt("tensor<fp32, [2, 4, 3]>", "t3", "transpose(x = t2, perm = p3)") +
          stmt("tensor<fp32, [2, 4, 3]>", "z", "relu(x = t3)"),
      "z");
  const Program after = canonicalized(before);
  // t1 and t2 cancel; t3 then reads x with its own perm, which stays in use.
  EXPECT_EQ(op_types(after, true), (Strings{"const", "transpose", "relu"}));
  EXPECT_EQ(var_of(producer(after, "t3"), "x"), "x");
  EXPECT_EQ(var_of(producer(after, "t3"), "perm"), "p3");
  expect_same_function(before, after, 0, 0, "const-op perms");
}

TEST(Canonicalize, IdentityPermsAndIdentityOpsDisappear) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [2, 3, 4]>", "i", "identity(x = x)") +
          stmt("tensor<fp32, [2, 3, 4]>", "t0", "transpose(x = i, perm = tensor<int32, [3]>([0, 1, 2]))") +
          stmt("tensor<fp32, [3, 2, 4]>", "t1", "transpose(x = t0, perm = tensor<int32, [3]>([1, 0, 2]))") +
          stmt("tensor<fp32, [2, 3, 4]>", "t2", "transpose(x = t1, perm = tensor<int32, [3]>([1, 0, 2]))") +
          stmt("tensor<fp32, [2, 3, 4]>", "z", "relu(x = t2)"),
      "z");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"relu"}));
  EXPECT_EQ(var_of(producer(after, "z"), "x"), "x");
  expect_same_function(before, after, 0, 0, "identities");
}

// ---- legality --------------------------------------------------------------------

// Merging t2 into x would leave t1 for `a` and add a second transpose of x.
TEST(Canonicalize, TransposeUsedElsewhereIsNotMergedAway) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [2, 4, 3]>", "t1", "transpose(x = x, perm = tensor<int32, [3]>([0, 2, 1]))") +
          stmt("tensor<fp32, [2, 4, 3]>", "a", "relu(x = t1)") +
          stmt("tensor<fp32, [3, 2, 4]>", "t2", "transpose(x = t1, perm = tensor<int32, [3]>([2, 0, 1]))"),
      "a, t2");
  EXPECT_EQ(ir_diff(before, canonicalized(before)), "");
  // The same when t1 is itself a function output.
  const Program out = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [2, 4, 3]>", "t1", "transpose(x = x, perm = tensor<int32, [3]>([0, 2, 1]))") +
          stmt("tensor<fp32, [3, 2, 4]>", "t2", "transpose(x = t1, perm = tensor<int32, [3]>([2, 0, 1]))"),
      "t1, t2");
  EXPECT_EQ(ir_diff(out, canonicalized(out)), "");
}

// When the pair cancels, the second transpose goes (its users read x) and
// the first stays for its other user.
TEST(Canonicalize, CancellingTransposeGoesEvenIfTheFirstIsShared) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3, 4]> x",
      stmt("tensor<fp32, [2, 4, 3]>", "t1", "transpose(x = x, perm = tensor<int32, [3]>([0, 2, 1]))") +
          stmt("tensor<fp32, [2, 4, 3]>", "a", "relu(x = t1)") +
          stmt("tensor<fp32, [2, 3, 4]>", "t2", "transpose(x = t1, perm = tensor<int32, [3]>([0, 2, 1]))") +
          stmt("tensor<fp32, [2, 3, 4]>", "b", "relu(x = t2)"),
      "a, b");
  const Program after = canonicalized(before);
  EXPECT_EQ(op_types(after), (Strings{"transpose", "relu", "relu"}));
  EXPECT_EQ(var_of(producer(after, "a"), "x"), "t1");
  EXPECT_EQ(var_of(producer(after, "b"), "x"), "x");
  expect_same_function(before, after, 0, 0, "cancelling transposes");
}

// Ops producing function outputs keep their names and stay, even when they
// do nothing; a pair that cancels into an output becomes one identity-perm
// transpose named like the output.
TEST(Canonicalize, FunctionOutputsAreNeverRemovedOrRenamed) {
  const Program before = parse_program(
      "tensor<fp32, [2, 3]> x",
      stmt("tensor<fp32, [2, 3]>", "i", "identity(x = x)") +
          stmt("tensor<fp32, [2, 3]>", "r", "reshape(x = x, shape = tensor<int32, [2]>([2, 3]))") +
          stmt("tensor<fp32, [2, 3]>", "p", "transpose(x = x, perm = tensor<int32, [2]>([0, 1]))") +
          stmt("tensor<fp32, [3, 2]>", "t1", "transpose(x = x, perm = tensor<int32, [2]>([1, 0]))") +
          stmt("tensor<fp32, [2, 3]>", "t2", "transpose(x = t1, perm = tensor<int32, [2]>([1, 0]))") +
          stmt("tensor<fp32, [2, 3]>", "s", "squeeze(x = x)"),
      "i, r, p, t2, s");
  const Program after = canonicalized(before);
  EXPECT_EQ(after.function("main")->outputs, before.function("main")->outputs);
  EXPECT_EQ(op_types(after), (Strings{"identity", "reshape", "transpose", "transpose", "reshape"}));
  const Op& t2 = producer(after, "t2");
  EXPECT_EQ(var_of(t2, "x"), "x");
  EXPECT_EQ(ints_of(const_input(after, t2, "perm")), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(producer(after, "s").type, "reshape");
  expect_same_function(before, after, 0, 0, "outputs");
}

TEST(Canonicalize, RegisteredRightBeforeDecompose) {
  std::vector<std::string> names;
  for (const PassInfo& p : all_passes()) names.push_back(p.name);
  auto at = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  ASSERT_LT(at("canonicalize"), int64_t(names.size()));
  EXPECT_EQ(at("canonicalize") + 1, at("decompose"));
  EXPECT_LT(at("legalize-layout-idioms"), at("canonicalize"));
}

// ---- real programs -----------------------------------------------------------------

// The first seed's programs: only exact rewrites apply (their convs have no
// bias), so the outputs stay bit-identical.
TEST(Canonicalize, SeedProgramsComputeTheSame) {
  for (const std::string& mil : seed1_programs()) {
    SCOPED_TRACE(mil);
    const Program before = load_seed1(mil, 11);
    const Program after = canonicalized(before);
    std::printf("[canonicalize] seed1/%s: %zu ops -> %zu (consts %zu -> %zu)\n", mil.c_str(), count_ops(before),
                count_ops(after), count_ops(before, true) - count_ops(before), count_ops(after, true) - count_ops(after));
    expect_same_function(before, after, 0, 0, mil, 2);
  }
}

// Silero's last 1x1 conv carries a bias, so the expanded form rounds to
// fp16 once more, before the bias add; through the sigmoid that moves the
// speech probability by about one fp16 ulp of a value <= 1. The bound is
// 2^-10 (one ulp at 1); the measured maximum is printed.
TEST(Canonicalize, CoreMLBundlesComputeTheSame) {
  MILRT_REQUIRE_SHARED();
  Deviation dev;
  for (const std::string& path : coreml_bundles()) {
    SCOPED_TRACE(path);
    const Program before = load_verified(path);
    const Program after = canonicalized(before);
    dev.merge(expect_same_function(before, after, 0, 1.0 / 1024, path, 1));
  }
  std::printf("[canonicalize] Core ML bundles: max |diff| %g\n", dev.abs);
}

// The measured effect on the Silero 32 ms fp16 bundle and the seed's FFN.
// Silero: its 9 squeeze/expand_dims become reshapes, and the 4 pairs that
// only wrap the LSTM state ([1, 128] -> [1, 1, 128] -> [1, 128]) vanish; the
// final 1x1 conv becomes matmul + add (-7 ops); the 9 axes constants and the
// conv's parameter constants go, its weight and bias come back as 2-D
// constants, and the STFT magnitude's two pow(x, 2) become x·x, leaving
// their exponent constants unused (-16 consts). FFN: the layout reshapes that legalize-layout-idioms
// put around consecutive ops merge pairwise (-3 ops).
TEST(Canonicalize, OpCounts) {
  struct Expect {
    std::string what;
    Program before;
    size_t ops, consts, ops_after, consts_after;
  };
  std::vector<Expect> cases = {{"seed1/rms_q8_swiglu", load_seed1("rms_q8_swiglu.mil", 11), 22, 6, 19, 6}};
  if (!shared_dir().empty())
    cases.push_back({"silero-vad-unified-v6.0.0",
                     load_verified(shared_dir() + "/testdata/coreml/silero-vad/silero-vad-unified-v6.0.0.mlmodelc"), 48,
                     89, 41, 73});
  for (const Expect& e : cases) {
    const Program after = canonicalized(e.before);
    size_t ops = count_ops(e.before), consts = count_ops(e.before, true) - ops;
    size_t ops_after = count_ops(after), consts_after = count_ops(after, true) - ops_after;
    std::printf("[canonicalize] %s: %zu ops + %zu consts -> %zu ops + %zu consts\n", e.what.c_str(), ops, consts,
                ops_after, consts_after);
    EXPECT_EQ((std::vector<size_t>{ops, consts, ops_after, consts_after}),
              (std::vector<size_t>{e.ops, e.consts, e.ops_after, e.consts_after}))
        << e.what;
  }
}

}  // namespace
}  // namespace milrt::test::rewrite
