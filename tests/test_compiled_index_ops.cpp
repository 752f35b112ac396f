// Differential tests of the compiled index ops (lower/scatter_gather.cpp):
// gather_along_axis, gather_nd, scatter, scatter_along_axis, scatter_nd,
// one_hot, fill, fill_like, range_1d, tile, band_part, cumsum and topk, each
// run as a plan and on the reference executor with the same random inputs
// (random shapes of awkward sizes, negative axes and indices, repeated
// scatter indices), in fp32, fp16 and int32 programs.
//
// Tolerances, as |compiled - reference| / (1 + |reference|):
// - data movement, generators, topk and scatter "update": exact (0);
// - cumsum: both sum in fp64 in the same order, so fp32 and int32 are exact;
//   an fp16 program rounds fp64 -> fp32 -> fp16 instead of fp64 -> fp16,
//   which can differ by one fp16 ulp (2^-10 relative near the top of a
//   binade): 2e-3;
// - scatter "add": a plan sums repeated indices in fp32 (at most ~10 terms
//   of magnitude < 1 here, each rounding 2^-24 relative), the reference in
//   fp64 rounded once: 1e-5 in fp32; fp16 one ulp as above, 2e-3.
#include <random>

#include "kernels/threads.h"
#include "milrt/mil.h"
#include "milrt/plan.h"
#include "support/test_util.h"

namespace milrt {
namespace {

// A function input: floats uniform in [-1, 1]; integers uniform in [lo, hi).
struct In {
  std::string name;
  DType dtype;
  Shape shape;
  int lo = -50, hi = 50;
};

std::string dt_name(DType d) { return d == DType::FP16 ? "fp16" : d == DType::Int32 ? "int32" : "fp32"; }
std::string ttype(DType d, const Shape& s) { return "tensor<" + dt_name(d) + ", " + shape_str(s) + ">"; }
std::string i32(int64_t v) { return "int32(" + std::to_string(v) + ")"; }
std::string ints(const std::vector<int64_t>& v) {
  std::string r = "tensor<int32, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return r + "])";
}
std::string str(const std::string& s) { return "string(\"" + s + "\")"; }
std::string b(bool v) { return v ? "bool(true)" : "bool(false)"; }

TensorMap random_inputs(const std::vector<In>& ins, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  TensorMap m;
  for (auto& p : ins) {
    Tensor t(p.dtype, p.shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.set(size_t(i), p.dtype == DType::Int32 ? double(p.lo + int(rng() % uint32_t(p.hi - p.lo))) : u(rng));
    m[p.name] = t;
  }
  return m;
}

Program parse(const std::vector<In>& ins, const std::string& body, const std::string& outs) {
  std::string params;
  for (auto& p : ins) params += (params.empty() ? "" : ", ") + ttype(p.dtype, p.shape) + " " + p.name;
  Program prog = parse_mil(test::program_text(params, body, outs), "<test>", ".");
  verify(prog);
  return prog;
}

// The worst relative difference between the plan and the reference on `in`.
double worst_diff(const Program& prog, const TensorMap& in) {
  TensorMap want = run_reference(prog, "main", in);
  TensorMap got = compile(prog).run(in);
  double worst = 0;
  for (auto& [name, w] : want) {
    const Tensor& g = got.at(name);
    EXPECT_EQ(g.shape(), w.shape()) << name;
    EXPECT_EQ(g.dtype(), w.dtype()) << name;
    if (g.shape() != w.shape()) return 1e9;
    for (int64_t i = 0; i < w.numel(); ++i) {
      double x = g.at(size_t(i)), y = w.at(size_t(i));
      if (std::isnan(x) && std::isnan(y)) continue;
      worst = std::max(worst, std::fabs(x - y) / (1 + std::fabs(y)));
    }
  }
  return worst;
}

double compiled_vs_reference(const std::vector<In>& ins, const std::string& body, const std::string& outs,
                             uint32_t seed) {
  return worst_diff(parse(ins, body, outs), random_inputs(ins, seed));
}

// Expects a plan run to throw an Error naming the op (type and output) and
// containing `fragment`.
void expect_run_error(const std::vector<In>& ins, const std::string& body, const TensorMap& in,
                      const std::string& who, const std::string& fragment) {
  Plan plan = compile(parse(ins, body, "y"));
  try {
    plan.run(in);
    ADD_FAILURE() << "ran without error: " << body;
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find(who), std::string::npos) << m;
    EXPECT_NE(m.find(fragment), std::string::npos) << m;
  }
}

// A random shape of rank `rank` with awkward dims.
Shape random_shape(std::mt19937& rng, size_t rank) {
  static const int64_t dims[] = {1, 2, 3, 5, 7, 11};
  Shape s(rank);
  for (auto& d : s) d = dims[rng() % 6];
  return s;
}

const DType kAll[] = {DType::FP32, DType::FP16, DType::Int32};
const DType kFloats[] = {DType::FP32, DType::FP16};

// ---------------------------------------------------------------- gathers

TEST(CompiledIndexOps, GatherAlongAxisAgrees) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 24; ++trial) {
    DType dt = kAll[trial % 3];
    size_t rank = 1 + rng() % 4;
    Shape xs = random_shape(rng, rank);
    int64_t axis = int64_t(rng() % rank) - (trial % 2 ? int64_t(rank) : 0);
    size_t a = size_t(axis < 0 ? axis + int64_t(rank) : axis);
    Shape is = xs;
    is[a] = 1 + rng() % 6;
    int n = int(xs[a]);
    std::string body = test::stmt(ttype(dt, is), "y", "gather_along_axis(x = x, indices = i, axis = " + i32(axis) + ")");
    EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}, {"i", DType::Int32, is, -n, n}}, body, "y", uint32_t(trial)), 0.0)
        << "trial " << trial << " x " << shape_str(xs) << " axis " << axis;
  }
}

TEST(CompiledIndexOps, GatherNdAgreesWithAndWithoutBatchDims) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 24; ++trial) {
    DType dt = kAll[trial % 3];
    size_t rank = 1 + rng() % 4;
    Shape xs = random_shape(rng, rank);
    int64_t bd = trial % 2 && rank > 1 ? 1 : 0;
    int64_t k = 1 + int64_t(rng() % (rank - size_t(bd)));
    Shape is(xs.begin(), xs.begin() + bd);
    is.push_back(1 + rng() % 5);
    is.push_back(k);
    Shape out(is.begin(), is.end() - 1);
    out.insert(out.end(), xs.begin() + bd + k, xs.end());
    // Indices within the smallest addressed dim (negative ones too).
    int n = 1000;
    for (int64_t j = 0; j < k; ++j) n = std::min(n, int(xs[size_t(bd + j)]));
    std::string body = test::stmt(ttype(dt, out), "y",
                                  "gather_nd(x = x, indices = i, batch_dims = " + i32(bd) + ")");
    EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}, {"i", DType::Int32, is, -n, n}}, body, "y", uint32_t(trial)), 0.0)
        << "trial " << trial << " x " << shape_str(xs) << " indices " << shape_str(is);
  }
}

// ---------------------------------------------------------------- scatters

double scatter_tol(DType dt, const std::string& mode) {
  if (mode == "update" || dt == DType::Int32) return 0.0;
  return dt == DType::FP16 ? 2e-3 : 1e-5;
}

TEST(CompiledIndexOps, ScatterAgreesOnEveryAxisWithRepeatedIndices) {
  std::mt19937 rng(3);
  const std::string modes[] = {"add", "update", "sub", "mul", "max", "min"};
  for (int trial = 0; trial < 36; ++trial) {
    DType dt = kAll[trial % 3];
    const std::string& mode = modes[(trial / 3) % 6];
    size_t rank = 1 + rng() % 3;
    Shape ds = random_shape(rng, rank);
    int64_t axis = int64_t(rng() % rank) - (trial % 2 ? int64_t(rank) : 0);
    size_t a = size_t(axis < 0 ? axis + int64_t(rank) : axis);
    // More indices than rows: repeats are certain.
    Shape is = {int64_t(ds[a] + 3), 2};
    Shape us(ds.begin(), ds.begin() + int64_t(a));
    us.insert(us.end(), is.begin(), is.end());
    us.insert(us.end(), ds.begin() + int64_t(a) + 1, ds.end());
    int n = int(ds[a]);
    std::string body = test::stmt(ttype(dt, ds), "y",
                                  "scatter(data = d, indices = i, updates = u, axis = " + i32(axis) +
                                      ", mode = " + str(mode) + ")");
    double tol = scatter_tol(dt, mode);
    EXPECT_LE(compiled_vs_reference({{"d", dt, ds}, {"i", DType::Int32, is, -n, n}, {"u", dt, us}}, body, "y",
                                    uint32_t(trial)),
              tol)
        << "trial " << trial << " mode " << mode << " data " << shape_str(ds) << " axis " << axis;
  }
}

TEST(CompiledIndexOps, ScatterAddOfAnEmbeddingGradient) {
  // The backward pass of an embedding lookup: zeros [V, D] (a fill) gets
  // the rows of dY [N, D] added at the token ids, most of them repeated.
  for (DType dt : kFloats) {
    const int64_t V = 37, D = 19, N = 50;
    std::string body = test::stmt(ttype(dt, {V, D}), "z", "fill(shape = " + ints({V, D}) + ", value = " +
                                                              dt_name(dt) + "(0))") +
                       test::stmt(ttype(dt, {V, D}), "y", "scatter(data = z, indices = ids, updates = dy, mode = " +
                                                              str("add") + ")");
    std::vector<In> ins = {{"ids", DType::Int32, {N}, -V, 12}, {"dy", dt, {N, D}}};
    EXPECT_LE(compiled_vs_reference(ins, body, "y", 7), scatter_tol(dt, "add")) << dt_name(dt);
  }
}

TEST(CompiledIndexOps, ScatterAlongAxisAgrees) {
  std::mt19937 rng(4);
  const std::string modes[] = {"add", "update", "max"};
  for (int trial = 0; trial < 27; ++trial) {
    DType dt = kAll[trial % 3];
    const std::string& mode = modes[(trial / 3) % 3];
    size_t rank = 1 + rng() % 4;
    Shape ds = random_shape(rng, rank);
    int64_t axis = int64_t(rng() % rank) - (trial % 2 ? int64_t(rank) : 0);
    size_t a = size_t(axis < 0 ? axis + int64_t(rank) : axis);
    Shape is = ds;
    is[a] = ds[a] + 1 + rng() % 4;
    int n = int(ds[a]);
    std::string body = test::stmt(ttype(dt, ds), "y",
                                  "scatter_along_axis(data = d, indices = i, updates = u, axis = " + i32(axis) +
                                      ", mode = " + str(mode) + ")");
    EXPECT_LE(compiled_vs_reference({{"d", dt, ds}, {"i", DType::Int32, is, -n, n}, {"u", dt, is}}, body, "y",
                                    uint32_t(trial)),
              scatter_tol(dt, mode))
        << "trial " << trial << " mode " << mode << " data " << shape_str(ds) << " axis " << axis;
  }
}

TEST(CompiledIndexOps, ScatterNdAgrees) {
  std::mt19937 rng(5);
  const std::string modes[] = {"add", "update"};
  for (int trial = 0; trial < 24; ++trial) {
    DType dt = kAll[trial % 3];
    const std::string& mode = modes[(trial / 3) % 2];
    size_t rank = 1 + rng() % 4;
    Shape ds = random_shape(rng, rank);
    int64_t k = 1 + int64_t(rng() % rank);
    Shape is = {int64_t(2 + rng() % 9), k};
    if (trial % 4 == 3) is.insert(is.begin(), 2);
    Shape us(is.begin(), is.end() - 1);
    us.insert(us.end(), ds.begin() + k, ds.end());
    int n = 1000;
    for (int64_t j = 0; j < k; ++j) n = std::min(n, int(ds[size_t(j)]));
    std::string body = test::stmt(ttype(dt, ds), "y",
                                  "scatter_nd(data = d, indices = i, updates = u, mode = " + str(mode) + ")");
    EXPECT_LE(compiled_vs_reference({{"d", dt, ds}, {"i", DType::Int32, is, -n, n}, {"u", dt, us}}, body, "y",
                                    uint32_t(trial)),
              scatter_tol(dt, mode))
        << "trial " << trial << " mode " << mode << " data " << shape_str(ds) << " indices " << shape_str(is);
  }
}

TEST(CompiledIndexOps, ScatterAddIsBitIdenticalAcrossThreadCounts) {
  std::vector<In> ins = {{"d", DType::FP32, {23, 31}}, {"i", DType::Int32, {200}, -23, 23},
                         {"u", DType::FP32, {200, 31}}};
  Program prog = parse(ins, test::stmt(ttype(DType::FP32, {23, 31}), "y",
                                       "scatter(data = d, indices = i, updates = u, mode = " + str("add") + ")"),
                       "y");
  TensorMap in = random_inputs(ins, 11);
  kernels::set_num_threads(1);
  Tensor one = compile(prog).run(in).at("y");
  kernels::set_num_threads(4);
  Tensor four = compile(prog).run(in).at("y");
  kernels::set_num_threads(0);
  ASSERT_EQ(one.numel(), four.numel());
  EXPECT_EQ(std::memcmp(one.data(), four.data(), size_t(one.numel()) * 4), 0);
}

// ---------------------------------------------------------------- index errors

TEST(CompiledIndexOps, OutOfRangeIndicesAreErrorsNamingTheOp) {
  const DType f = DType::FP32, i = DType::Int32;
  auto idx = [](Shape s, std::vector<double> v) { return test::make(DType::Int32, std::move(s), v); };
  Tensor x = test::make(f, {3, 4}, std::vector<double>(12, 1.0));
  // gather_along_axis: index 3 of a dim of size 3.
  expect_run_error({{"x", f, {3, 4}}, {"i", i, {2, 4}}},
                   test::stmt(ttype(f, {2, 4}), "y", "gather_along_axis(x = x, indices = i, axis = int32(0))"),
                   {{"x", x}, {"i", idx({2, 4}, {0, 1, 2, 0, 1, 3, 0, 0})}}, "gather_along_axis 'y'",
                   "index 3 is out of range for a dim of size 3");
  // gather_nd: -5 in the second column (dim of size 4).
  expect_run_error({{"x", f, {3, 4}}, {"i", i, {2, 2}}},
                   test::stmt(ttype(f, {2}), "y", "gather_nd(x = x, indices = i)"),
                   {{"x", x}, {"i", idx({2, 2}, {0, 1, 2, -5})}}, "gather_nd 'y'",
                   "index -5 is out of range for a dim of size 4");
  // scatter: -4 of a dim of size 3.
  expect_run_error({{"x", f, {3, 4}}, {"i", i, {2}}, {"u", f, {2, 4}}},
                   test::stmt(ttype(f, {3, 4}), "y", "scatter(data = x, indices = i, updates = u)"),
                   {{"x", x}, {"i", idx({2}, {1, -4})}, {"u", test::make(f, {2, 4}, std::vector<double>(8, 2.0))}},
                   "scatter 'y'", "index -4 is out of range for a dim of size 3");
  // scatter_along_axis along -1 (size 4).
  expect_run_error({{"x", f, {3, 4}}, {"i", i, {3, 1}}, {"u", f, {3, 1}}},
                   test::stmt(ttype(f, {3, 4}), "y", "scatter_along_axis(data = x, indices = i, updates = u, axis = int32(-1))"),
                   {{"x", x}, {"i", idx({3, 1}, {0, 4, 1})}, {"u", test::make(f, {3, 1}, {1, 2, 3})}},
                   "scatter_along_axis 'y'", "index 4 is out of range for a dim of size 4");
  // scatter_nd
  expect_run_error({{"x", f, {3, 4}}, {"i", i, {1, 2}}, {"u", f, {1}}},
                   test::stmt(ttype(f, {3, 4}), "y", "scatter_nd(data = x, indices = i, updates = u)"),
                   {{"x", x}, {"i", idx({1, 2}, {7, 0})}, {"u", test::make(f, {1}, {1})}}, "scatter_nd 'y'",
                   "index 7 is out of range for a dim of size 3");
  // validate_indices (iOS17) rejects negative indices that would otherwise wrap.
  expect_run_error({{"x", f, {3, 4}}, {"i", i, {2}}, {"u", f, {2, 4}}},
                   test::stmt(ttype(f, {3, 4}), "y",
                              "scatter(data = x, indices = i, updates = u, validate_indices = bool(true))"),
                   {{"x", x}, {"i", idx({2}, {1, -1})}, {"u", test::make(f, {2, 4}, std::vector<double>(8, 2.0))}},
                   "scatter 'y'", "index -1 is out of range for a dim of size 3");
}

TEST(CompiledIndexOps, NegativeIndicesWrapUnlessValidated) {
  const DType f = DType::FP32, i = DType::Int32;
  std::vector<In> ins = {{"x", f, {3, 4}}, {"i", i, {2, 4}}};
  Program prog = parse(ins, test::stmt(ttype(f, {2, 4}), "y", "gather_along_axis(x = x, indices = i, axis = int32(0))"),
                       "y");
  Tensor x = test::make(f, {3, 4}, {0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23});
  Tensor ix = test::make(i, {2, 4}, {-1, -2, -3, 0, 2, 1, 0, -1});
  Tensor y = compile(prog).run({{"x", x}, {"i", ix}}).at("y");
  EXPECT_EQ(test::values(y), (std::vector<double>{20, 11, 2, 3, 20, 11, 2, 23}));
}

// ---------------------------------------------------------------- generators

TEST(CompiledIndexOps, OneHotAgreesOnEveryAxisIncludingOutOfRangeIndices) {
  std::mt19937 rng(6);
  for (int trial = 0; trial < 24; ++trial) {
    DType dt = kAll[trial % 3];
    size_t rank = rng() % 3 + (trial == 0 ? 0 : 1);
    Shape is = random_shape(rng, rank);
    int64_t depth = 1 + rng() % 7;
    int64_t axis = int64_t(rng() % (rank + 1)) - (trial % 2 ? int64_t(rank) + 1 : 0);
    Shape out = is;
    out.insert(out.begin() + (axis < 0 ? axis + int64_t(rank) + 1 : axis), depth);
    // Indices beyond [0, depth) give all-off rows, on both sides.
    std::string body = test::stmt(ttype(dt, out), "y",
                                  "one_hot(indices = i, one_hot_vector_size = " + i32(depth) + ", axis = " + i32(axis) +
                                      ", on_value = " + dt_name(dt) + "(3), off_value = " + dt_name(dt) + "(-2))");
    EXPECT_EQ(compiled_vs_reference({{"i", DType::Int32, is, -2, int(depth) + 2}}, body, "y", uint32_t(trial)), 0.0)
        << "trial " << trial << " indices " << shape_str(is) << " axis " << axis;
  }
  // coremltools' defaults: int32 on = 1, off = 0, axis -1.
  std::string body = test::stmt(ttype(DType::Int32, {5, 4}), "y", "one_hot(indices = i, one_hot_vector_size = int32(4))");
  EXPECT_EQ(compiled_vs_reference({{"i", DType::Int32, {5}, 0, 4}}, body, "y", 99), 0.0);
}

TEST(CompiledIndexOps, FillFillLikeAndRangeAgree) {
  std::string body =
      test::stmt("tensor<fp32, [3, 5, 2]>", "a", "fill(shape = " + ints({3, 5, 2}) + ", value = fp32(1.25))") +
      test::stmt("tensor<fp32, [7]>", "b0", "fill(shape = " + ints({7}) + ")") +
      test::stmt("tensor<int32, [2, 3]>", "c", "fill(shape = " + ints({2, 3}) + ", value = int32(-4))") +
      test::stmt("tensor<fp16, [4, 3]>", "d", "fill_like(ref_tensor = x, value = fp16(0.1))") +
      test::stmt("tensor<bool, [4, 3]>", "e", "fill_like(ref_tensor = x, value = bool(true))") +
      test::stmt("tensor<fp32, [7]>", "r0", "range_1d(start = fp32(0.5), end = fp32(2.25), step = fp32(0.25))") +
      test::stmt("tensor<int32, [4]>", "r1", "range_1d(start = int32(10), end = int32(-1), step = int32(-3))") +
      test::stmt("tensor<fp16, [3]>", "r2", "range_1d(start = fp16(0.1), end = fp16(1.0), step = fp16(0.3))") +
      test::stmt("tensor<int32, [0]>", "r3", "range_1d(start = int32(3), end = int32(1), step = int32(1))");
  Program prog = parse({{"x", DType::FP32, {4, 3}}}, body, "a, b0, c, d, e, r0, r1, r2, r3");
  TensorMap in = random_inputs({{"x", DType::FP32, {4, 3}}}, 1);
  EXPECT_EQ(worst_diff(prog, in), 0.0);
  // One value checked by hand: the reference agreeing with itself proves little.
  TensorMap got = compile(prog).run(in);
  EXPECT_EQ(test::values(got.at("r1")), (std::vector<double>{10, 7, 4, 1}));
  EXPECT_EQ(got.at("c").at(5), -4);
}

// ---------------------------------------------------------------- tile, band_part, cumsum, topk

TEST(CompiledIndexOps, TileAgrees) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 18; ++trial) {
    DType dt = kAll[trial % 3];
    size_t rank = 1 + rng() % 4;
    Shape xs = random_shape(rng, rank);
    std::vector<int64_t> reps(rank);
    Shape out = xs;
    for (size_t d = 0; d < rank; ++d) out[d] *= reps[d] = 1 + rng() % 3;
    std::string body = test::stmt(ttype(dt, out), "y", "tile(x = x, reps = " + ints(reps) + ")");
    EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}}, body, "y", uint32_t(trial)), 0.0)
        << "trial " << trial << " x " << shape_str(xs) << " reps " << shape_str(reps);
  }
}

TEST(CompiledIndexOps, BandPartAgrees) {
  std::mt19937 rng(8);
  for (int trial = 0; trial < 24; ++trial) {
    DType dt = kAll[trial % 3];
    Shape xs = random_shape(rng, 2 + rng() % 2);
    int64_t lower = int64_t(rng() % 5) - 1, upper = int64_t(rng() % 5) - 1;
    std::string body = test::stmt(ttype(dt, xs), "y",
                                  "band_part(x = x, lower = " + i32(lower) + ", upper = " + i32(upper) + ")");
    EXPECT_EQ(compiled_vs_reference({{"x", dt, xs}}, body, "y", uint32_t(trial)), 0.0)
        << "trial " << trial << " x " << shape_str(xs) << " lower " << lower << " upper " << upper;
  }
}

TEST(CompiledIndexOps, CumsumAgrees) {
  std::mt19937 rng(9);
  for (int trial = 0; trial < 32; ++trial) {
    DType dt = kAll[trial % 3];
    size_t rank = 1 + rng() % 4;
    Shape xs = random_shape(rng, rank);
    int64_t axis = int64_t(rng() % rank) - (trial % 2 ? int64_t(rank) : 0);
    bool exclusive = (trial / 3) % 2, reverse = (trial / 6) % 2;
    std::string body = test::stmt(ttype(dt, xs), "y",
                                  "cumsum(x = x, axis = " + i32(axis) + ", exclusive = " + b(exclusive) +
                                      ", reverse = " + b(reverse) + ")");
    EXPECT_LE(compiled_vs_reference({{"x", dt, xs}}, body, "y", uint32_t(trial)), dt == DType::FP16 ? 2e-3 : 0.0)
        << "trial " << trial << " x " << shape_str(xs) << " axis " << axis;
  }
}

TEST(CompiledIndexOps, TopkAgreesWithTiesBothWays) {
  std::mt19937 rng(10);
  for (int trial = 0; trial < 24; ++trial) {
    DType dt = kAll[trial % 3];
    size_t rank = 1 + rng() % 3;
    Shape xs = random_shape(rng, rank);
    int64_t axis = int64_t(rng() % rank) - (trial % 2 ? int64_t(rank) : 0);
    size_t a = size_t(axis < 0 ? axis + int64_t(rank) : axis);
    int64_t k = 1 + int64_t(rng() % size_t(xs[a]));
    bool ascending = (trial / 3) % 2;
    Shape out = xs;
    out[a] = k;
    std::string body = test::stmt(ttype(dt, out) + " v, tensor<int32, " + shape_str(out) + ">", "ix",
                                  "topk(x = x, k = " + i32(k) + ", axis = " + i32(axis) + ", ascending = " +
                                      b(ascending) + ")");
    // Integer data in [-3, 3): ties everywhere, which must keep their order.
    EXPECT_EQ(compiled_vs_reference({{"x", dt, xs, -3, 3}}, body, "v, ix", uint32_t(trial)), 0.0)
        << "trial " << trial << " x " << shape_str(xs) << " axis " << axis << " k " << k;
  }
}

}  // namespace
}  // namespace milrt
