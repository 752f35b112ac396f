// The op-registry sweep: every op milrt knows (`milrt check --ops`, the op
// registry) either compiles and agrees with the reference executor on random
// shapes, dtypes and values, or stands in the commented skip list below. A
// new op that is in neither fails OpCoverage.EveryRegisteredOpIsCoveredOrSkipped,
// so it cannot escape the compiled engine silently.
//
// Each case builds a one-op program with the IR builder (inputs as function
// parameters unless the op wants compile-time constants), runs the
// reference executor (fp64, rounded to the declared dtypes) and the
// compile()d plan (the default pipeline: decompositions included) on the same
// inputs, in each dtype the case lists, twice with fresh shapes.
//
// Tolerances, |plan - reference| <= abs + rel·|reference|:
//  - fp32: 1e-4 + 1e-4·|ref|. A plan computes in fp32 (errors of a few ulps,
//    ~1e-7 relative, more for sums over up to a few hundred terms and for
//    decomposed ops such as batch_norm or local_response_norm, a handful
//    of fp32 ops), the reference in fp64;
//  - fp16: 1e-2 + 1e-2·|ref|. Both round the result to fp16 once, but from
//    different values (fp32 vs fp64), which can fall on either side of a
//    rounding boundary: one fp16 ulp is 2^-10 relative, and a decomposed
//    op's fp32 chain adds a few fp32 ulps before that rounding;
//  - integer and bool results are exact (the bound is below 1).
// Inputs are drawn where each op is well conditioned (log of positives,
// acos in (-1, 1), divisors away from 0), so the bounds measure the
// engines, not the functions' sensitivity.
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "ir/op_registry.h"
#include "milrt/builder.h"
#include "milrt/plan.h"
#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {
namespace {

// Ops this sweep does not build, and why. Each is tested elsewhere.
const std::set<std::string> kSkipped = {
    // A constant is not computed: the plan stores it (every case here has some).
    "const",
    // constexpr ops decompress weights at compile time (fold-constexpr), never
    // at run time: test_pass_fold_constexpr.cpp and test_constexpr.cpp.
    "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale", "constexpr_cast", "constexpr_lut_to_dense",
    "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale", "constexpr_sparse_to_dense",
    // State ops need state<> parameters and persist across runs:
    // test_plan_bindings.cpp and the KV-cache tests.
    "read_state", "coreml_update_state",
    // The output shape depends on the values (how many are non-zero): a plan
    // has static shapes, so non_zero runs on the reference executor only.
    "non_zero",
    // Control flow holds nested blocks, which a one-op program cannot have:
    // test_control_flow.cpp runs loops and branches on both engines.
    "while_loop", "cond",
};

const std::vector<DType> kF = {DType::FP32, DType::FP16};
const std::vector<DType> kFI = {DType::FP32, DType::FP16, DType::Int32};
const std::vector<DType> kF32 = {DType::FP32};

// One program under construction: random inputs of the case's dtype `dt`.
struct Gen {
  FunctionBuilder f{"main"};
  std::mt19937_64 rng;
  DType dt;
  std::string type;  // the op under test, for the generic cases
  TensorMap in;
  int n = 0;

  Gen(uint64_t seed, DType d) : rng(seed), dt(d) {}

  int64_t pick(int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); }
  bool coin() { return rng() % 2 == 0; }
  Shape shape(size_t rank, int64_t max_dim = 5) {
    Shape s(rank);
    for (auto& d : s) d = pick(1, max_dim);
    return s;
  }
  // A function input of `s` (dtype `d`, default the case's) uniform in [lo, hi].
  Value input(const Shape& s, double lo = -2, double hi = 2, std::optional<DType> d = std::nullopt) {
    DType t = d.value_or(dt);
    std::string name = "in" + std::to_string(n++);
    in[name] = random_tensor(t, s, rng, lo, hi);
    return f.input(name, Type::tensor(t, s));
  }
  // The same as a compile-time constant (weights, per-channel parameters).
  Value constant(const Shape& s, double lo = -1, double hi = 1, std::optional<DType> d = std::nullopt) {
    return f.constant("c" + std::to_string(n++), random_tensor(d.value_or(dt), s, rng, lo, hi));
  }
  // A scalar literal of the case's dtype.
  Arg scalar(double v) const {
    return dt == DType::FP16 ? lit_f16(v) : dt == DType::Int32 ? lit_i32(int64_t(v)) : lit_f32(v);
  }
  Value op(const std::string& type, const std::vector<std::pair<std::string, Operand>>& inputs) {
    Value y = f.op(type, "y" + std::to_string(n++), inputs);
    f.output(y);
    return y;
  }
  // A random non-empty subset of [0, rank), some axes negative.
  std::vector<int64_t> axes(size_t rank) {
    std::vector<int64_t> a;
    for (int64_t i = 0; i < int64_t(rank); ++i)
      if (coin()) a.push_back(coin() ? i : i - int64_t(rank));
    if (a.empty()) a.push_back(pick(0, int64_t(rank) - 1));
    return a;
  }
  int64_t axis(size_t rank) { return pick(-int64_t(rank), int64_t(rank) - 1); }
};

struct Case {
  std::vector<DType> dtypes;
  std::function<void(Gen&)> build;
};

// ---- generic cases ------------------------------------------------------------

// The op under test, unary: x in [lo, hi], rank 1 to 4.
Case unary_op(double lo, double hi, std::vector<DType> dts = kF) {
  return {dts, [lo, hi](Gen& g) {
            Value x = g.input(g.shape(size_t(g.pick(1, 4))), lo, hi);
            g.op(g.type, {{"x", x}});
          }};
}

// unary(x, params...) with scalar parameters of x's dtype.
Case unary_params(std::vector<std::pair<std::string, double>> params, double lo = -3, double hi = 3) {
  return {kF, [params, lo, hi](Gen& g) {
            Value x = g.input(g.shape(size_t(g.pick(1, 4))), lo, hi);
            std::vector<std::pair<std::string, Operand>> in = {{"x", x}};
            for (auto& [k, v] : params) in.push_back({k, g.scalar(v)});
            g.op(g.type, in);
          }};
}

// binary(x, y), y broadcasting (dims dropped in front or set to 1), each in
// its range; `dts` the dtypes of x and y.
Case binary(std::vector<DType> dts, double xlo, double xhi, double ylo, double yhi,
            std::optional<DType> both = std::nullopt) {
  return {dts, [=](Gen& g) {
            Shape xs = g.shape(size_t(g.pick(1, 4)));
            Shape ys(xs.begin() + g.pick(0, int64_t(xs.size()) - 1), xs.end());
            for (auto& d : ys)
              if (g.coin() && g.coin()) d = 1;
            if (g.coin()) std::swap(xs, ys);
            DType t = both.value_or(g.dt);
            Value x = g.input(xs, xlo, xhi, t), y = g.input(ys, ylo, yhi, t);
            g.op(g.type, {{"x", x}, {"y", y}});
          }};
}

// reduce_*(x, axes, keep_dims) over random axes.
Case reduction(double lo, double hi, std::vector<DType> dts = kFI) {
  return {dts, [lo, hi](Gen& g) {
            size_t rank = size_t(g.pick(1, 4));
            Value x = g.input(g.shape(rank), lo, hi);
            g.op(g.type, {{"x", x}, {"axes", lit_i32s(g.axes(rank))}, {"keep_dims", lit_bool(g.coin())}});
          }};
}

Case arg_reduction() {
  return {kFI, [](Gen& g) {
            size_t rank = size_t(g.pick(1, 4));
            Value x = g.input(g.shape(rank), -3, 3);
            g.op(g.type, {{"x", x}, {"axis", lit_i32(g.axis(rank))}, {"keep_dims", lit_bool(g.coin())}});
          }};
}

Case custom(std::vector<DType> dts, std::function<void(Gen&)> build) { return {dts, std::move(build)}; }

// ---- the table ----------------------------------------------------------------

std::map<std::string, Case> cases() {
  std::map<std::string, Case> t;
  // Unary math, each on a domain where it is defined and well conditioned.
  for (const char* op : {"abs", "atan", "ceil", "cos", "cosh", "erf", "exp", "exp2", "floor", "relu", "round",
                         "sigmoid", "sign", "silu", "sin", "sinh", "softsign", "square", "tanh", "gelu", "softplus",
                         "identity"})
    t[op] = unary_op(-2, 2);
  for (const char* op : {"abs", "sign", "square", "identity"}) t[op].dtypes = kFI;
  for (const char* op : {"acos", "asin", "atanh"}) t[op] = unary_op(-0.9, 0.9);
  t["tan"] = unary_op(-1.2, 1.2);
  t["relu6"] = unary_op(-2, 8);
  for (const char* op : {"inverse", "log", "rsqrt"}) t[op] = unary_op(0.25, 4);
  t["sqrt"] = unary_op(0, 4);
  t["logical_not"] = custom(kF32, [](Gen& g) {
    g.op("logical_not", {{"x", g.input(g.shape(size_t(g.pick(1, 3))), 0, 1, DType::Bool)}});
  });

  // Activations with parameters.
  t["clip"] = unary_params({{"alpha", -0.5}, {"beta", 1.25}});
  t["clamped_relu"] = unary_params({{"alpha", 0.1}, {"beta", 1.5}});
  t["elu"] = unary_params({{"alpha", 0.7}});
  t["leaky_relu"] = unary_params({{"alpha", 0.2}});
  t["linear_activation"] = unary_params({{"alpha", -1.5}, {"beta", 0.25}});
  t["scaled_tanh"] = unary_params({{"alpha", 1.5}, {"beta", 0.75}});
  t["sigmoid_hard"] = unary_params({{"alpha", 0.2}, {"beta", 0.5}}, -5, 5);
  t["threshold"] = unary_params({{"alpha", 0.3}});
  t["thresholded_relu"] = unary_params({{"alpha", 0.3}});
  t["softmax"] = custom(kF, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 4));
    g.op("softmax", {{"x", g.input(g.shape(rank), -3, 3)}, {"axis", lit_i32(g.axis(rank))}});
  });

  // Binary arithmetic and comparisons (integers on a small range, so that
  // equal and not_equal see both answers).
  for (const char* op : {"add", "sub", "mul", "maximum", "minimum"}) t[op] = binary(kFI, -3, 3, -3, 3);
  t["real_div"] = binary(kF, -3, 3, 0.5, 2);
  t["pow"] = binary(kF, 0.5, 2, -2, 2);
  t["floor_div"] = binary(kFI, -6, 6, 1, 3);
  t["mod"] = binary(kFI, -6, 6, 1, 3);
  for (const char* op : {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"})
    t[op] = binary(kFI, -2, 2, -2, 2);
  for (const char* op : {"logical_and", "logical_or", "logical_xor"}) t[op] = binary(kF32, 0, 1, 0, 1, DType::Bool);
  t["select"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(1, 4)));
    Shape cs(s.begin() + g.pick(0, int64_t(s.size()) - 1), s.end());
    g.op("select", {{"cond", g.input(cs, 0, 1, DType::Bool)}, {"a", g.input(s)}, {"b", g.input(s)}});
  });
  t["cast"] = custom(kFI, [](Gen& g) {
    const char* to[] = {"fp32", "fp16", "int32", "bool"};
    g.op("cast", {{"x", g.input(g.shape(size_t(g.pick(1, 3))), -3, 3)}, {"dtype", lit_str(to[g.pick(0, 3)])}});
  });

  // Reductions.
  for (const char* op : {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_sum_square",
                         "reduce_l1_norm", "reduce_l2_norm"})
    t[op] = reduction(-2, 2);
  t["reduce_prod"] = reduction(0.6, 1.5);
  t["reduce_log_sum"] = reduction(0.6, 3);
  t["reduce_log_sum_exp"] = reduction(-3, 3);
  t["reduce_argmax"] = arg_reduction();
  t["reduce_argmin"] = arg_reduction();

  // Data movement.
  t["reshape"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(1, 4)));
    g.op("reshape", {{"x", g.input(s)}, {"shape", lit_i32s({-1, s.back()})}});
  });
  t["expand_dims"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    g.op("expand_dims", {{"x", g.input(g.shape(rank))}, {"axes", lit_i32s({g.pick(-int64_t(rank) - 1, int64_t(rank))})}});
  });
  t["squeeze"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(3);
    s[1] = 1;
    g.op("squeeze", {{"x", g.input(s)}, {"axes", lit_i32s({1})}});
  });
  t["flatten2d"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(2, 4));
    g.op("flatten2d", {{"x", g.input(g.shape(rank))}, {"axis", lit_i32(g.pick(0, int64_t(rank)))}});
  });
  t["transpose"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 4));
    std::vector<int64_t> perm(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(i);
    std::shuffle(perm.begin(), perm.end(), g.rng);
    g.op("transpose", {{"x", g.input(g.shape(rank))}, {"perm", lit_i32s(perm)}});
  });
  t["concat"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 4));
    Shape s = g.shape(rank);
    int64_t ax = g.axis(rank);
    Shape s2 = s;
    s2[size_t(ax < 0 ? ax + int64_t(rank) : ax)] = g.pick(1, 4);
    if (g.coin()) {  // interleaved: values of one shape
      g.op("concat", {{"values", tuple({g.input(s), g.input(s), g.input(s)})}, {"axis", lit_i32(ax)},
                      {"interleave", lit_bool(true)}});
      return;
    }
    g.op("concat", {{"values", tuple({g.input(s), g.input(s2), g.input(s)})}, {"axis", lit_i32(ax)}});
  });
  t["stack"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 4));
    Shape s = g.shape(rank);
    std::vector<Operand> vals;
    for (int64_t i = 0, n = g.pick(1, 4); i < n; ++i) vals.push_back(g.input(s));
    g.op("stack", {{"values", tuple(vals)}, {"axis", lit_i32(g.pick(-int64_t(rank) - 1, int64_t(rank)))}});
  });
  t["split"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    Shape s = g.shape(rank);
    size_t ax = size_t(g.pick(0, int64_t(rank) - 1));
    s[ax] = 6;
    bool sizes = g.coin();
    std::vector<std::pair<std::string, Operand>> in = {{"x", g.input(s)}, {"axis", lit_i32(int64_t(ax))}};
    if (sizes) in.push_back({"split_sizes", lit_i32s({1, 3, 2})});
    else in.push_back({"num_splits", lit_i32(3)});
    for (auto& v : g.f.op_n("split", {"s0", "s1", "s2"}, in)) g.f.output(v);
  });
  t["slice_by_index"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(3, 6);
    std::vector<int64_t> b, e, st;
    for (int64_t d : s) {
      int64_t step = g.coin() ? 1 : g.coin() ? 2 : -1;
      st.push_back(step);
      b.push_back(step > 0 ? g.pick(0, d - 1) : d - 1);
      e.push_back(step > 0 ? d : -d - 1);
    }
    g.op("slice_by_index", {{"x", g.input(s)}, {"begin", lit_i32s(b)}, {"end", lit_i32s(e)}, {"stride", lit_i32s(st)}});
  });
  t["slice_by_size"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(3, 6);
    std::vector<int64_t> b, sz;
    for (int64_t d : s) {
      b.push_back(g.pick(0, d - 1));
      sz.push_back(g.coin() ? -1 : g.pick(1, d - b.back()));
    }
    g.op("slice_by_size", {{"x", g.input(s)}, {"begin", lit_i32s(b)}, {"size", lit_i32s(sz)}});
  });
  t["slice_update"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(3, 6), us;
    std::vector<int64_t> b, e;
    for (int64_t d : s) {
      b.push_back(g.pick(0, d - 1));
      e.push_back(g.pick(b.back() + 1, d));
      us.push_back(e.back() - b.back());
    }
    g.op("slice_update", {{"x", g.input(s)}, {"update", g.input(us)}, {"begin", lit_i32s(b)}, {"end", lit_i32s(e)}});
  });
  t["pad"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(3, 5);
    for (auto& d : s) d = std::max<int64_t>(d, 3);
    const char* modes[] = {"constant", "reflect", "replicate"};
    std::string mode = modes[g.pick(0, 2)];
    std::vector<int64_t> p = {g.pick(0, 2), g.pick(0, 2), g.pick(0, 2), g.pick(0, 2)};
    g.op("pad", {{"x", g.input(s)}, {"pad", lit_i32s(p)}, {"mode", lit_str(mode)}, {"constant_val", g.scalar(1.5)}});
  });
  t["tile"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    std::vector<int64_t> reps;
    for (size_t i = 0; i < rank; ++i) reps.push_back(g.pick(1, 3));
    g.op("tile", {{"x", g.input(g.shape(rank))}, {"reps", lit_i32s(reps)}});
  });
  t["reverse"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 4));
    std::vector<std::pair<std::string, Operand>> in = {{"x", g.input(g.shape(rank))}};
    if (g.coin()) in.push_back({"axes", lit_i32s(g.axes(rank))});
    g.op("reverse", in);
  });
  t["reverse_sequence"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(3, 6);
    int64_t seq = g.pick(0, 2), batch = (seq + g.pick(1, 2)) % 3;
    Value x = g.input(s);
    Value len = g.input({s[size_t(batch)]}, 0, double(s[size_t(seq)]), DType::Int32);
    g.op("reverse_sequence", {{"x", x}, {"lengths", len}, {"seq_axis", lit_i32(seq)}, {"batch_axis", lit_i32(batch)}});
  });
  t["shape"] = custom(kFI, [](Gen& g) { g.op("shape", {{"x", g.input(g.shape(size_t(g.pick(1, 4))))}}); });
  t["band_part"] = custom(kFI, [](Gen& g) {
    g.op("band_part", {{"x", g.input(g.shape(3, 6))}, {"lower", lit_i32(g.pick(-1, 2))}, {"upper", lit_i32(g.pick(-1, 2))}});
  });
  t["cumsum"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    g.op("cumsum", {{"x", g.input(g.shape(rank))}, {"axis", lit_i32(g.axis(rank))}, {"exclusive", lit_bool(g.coin())},
                    {"reverse", lit_bool(g.coin())}});
  });
  t["topk"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    Shape s = g.shape(rank, 6);
    int64_t ax = g.axis(rank);
    int64_t n = s[size_t(ax < 0 ? ax + int64_t(rank) : ax)];
    std::vector<Value> out = g.f.op_n("topk", {"values", "indices"},
                                      {{"x", g.input(s, -3, 3)}, {"k", lit_i32(g.pick(1, n))}, {"axis", lit_i32(ax)},
                                       {"ascending", lit_bool(g.coin())}});
    for (auto& v : out) g.f.output(v);
  });
  t["argsort"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    g.op("argsort", {{"x", g.input(g.shape(rank, 6), -3, 3)}, {"axis", lit_i32(g.axis(rank))},
                     {"ascending", lit_bool(g.coin())}});
  });

  // Generators.
  t["fill"] = custom(kFI, [](Gen& g) { g.op("fill", {{"shape", lit_i32s(g.shape(3))}, {"value", g.scalar(-2)}}); });
  t["fill_like"] = custom(kFI, [](Gen& g) {
    g.op("fill_like", {{"ref_tensor", g.input(g.shape(3))}, {"value", g.scalar(3)}});
  });
  t["range_1d"] = custom(kFI, [](Gen& g) {
    g.op("range_1d", {{"start", g.scalar(-2)}, {"end", g.scalar(double(g.pick(3, 9)))}, {"step", g.scalar(double(g.pick(1, 2)))}});
  });
  t["one_hot"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 2));
    g.op("one_hot", {{"indices", g.input(g.shape(rank), -1, 5, DType::Int32)}, {"one_hot_vector_size", lit_i32(5)},
                     {"axis", lit_i32(g.pick(-int64_t(rank) - 1, int64_t(rank)))}, {"on_value", g.scalar(2)},
                     {"off_value", g.scalar(-1)}});
  });

  // Gathers and scatters (indices in range, negative ones included).
  t["gather"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    Shape s = g.shape(rank);
    int64_t ax = g.pick(0, int64_t(rank) - 1), n = s[size_t(ax)];
    g.op("gather", {{"x", g.input(s)}, {"indices", g.input(g.shape(size_t(g.pick(1, 2))), -n, n - 1, DType::Int32)},
                    {"axis", lit_i32(ax)}});
  });
  t["gather_along_axis"] = custom(kFI, [](Gen& g) {
    size_t rank = size_t(g.pick(1, 3));
    Shape s = g.shape(rank), is = s;
    int64_t ax = g.pick(0, int64_t(rank) - 1), n = s[size_t(ax)];
    is[size_t(ax)] = g.pick(1, 4);
    g.op("gather_along_axis", {{"x", g.input(s)}, {"indices", g.input(is, -n, n - 1, DType::Int32)}, {"axis", lit_i32(ax)}});
  });
  t["gather_nd"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(3);
    int64_t k = g.pick(1, 3);
    Tensor idx(DType::Int32, {g.pick(1, 4), k});
    for (int64_t i = 0; i < idx.numel(); ++i) idx.set(size_t(i), double(g.pick(0, s[size_t(i % k)] - 1)));
    std::string name = "in" + std::to_string(g.n++);
    g.in[name] = idx;
    Value iv = g.f.input(name, Type::tensor(DType::Int32, idx.shape()));
    g.op("gather_nd", {{"x", g.input(s)}, {"indices", iv}});
  });
  t["scatter"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(2);
    int64_t m = g.pick(1, 4);
    Shape us = {m, s[1]};
    g.op("scatter", {{"data", g.input(s)}, {"indices", g.input({m}, 0, double(s[0] - 1), DType::Int32)},
                     {"updates", g.input(us)}, {"axis", lit_i32(0)}, {"mode", lit_str(g.coin() ? "add" : "max")}});
  });
  t["scatter_along_axis"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(2), is = s;
    is[1] = g.pick(1, 3);
    g.op("scatter_along_axis", {{"data", g.input(s)}, {"indices", g.input(is, 0, double(s[1] - 1), DType::Int32)},
                                {"updates", g.input(is)}, {"axis", lit_i32(1)}, {"mode", lit_str("add")}});
  });
  t["scatter_nd"] = custom(kFI, [](Gen& g) {
    Shape s = g.shape(2);
    int64_t m = g.pick(1, 4);
    Tensor idx(DType::Int32, {m, 1});
    for (int64_t i = 0; i < m; ++i) idx.set(size_t(i), double(g.pick(0, s[0] - 1)));
    std::string name = "in" + std::to_string(g.n++);
    g.in[name] = idx;
    Value iv = g.f.input(name, Type::tensor(DType::Int32, idx.shape()));
    g.op("scatter_nd", {{"data", g.input(s)}, {"indices", iv}, {"updates", g.input({m, s[1]})}, {"mode", lit_str("add")}});
  });

  // Linear algebra.
  t["matmul"] = custom(kF, [](Gen& g) {
    int64_t m = g.pick(1, 6), k = g.pick(1, 6), n = g.pick(1, 6), b = g.pick(1, 3);
    bool tx = g.coin(), ty = g.coin();
    Value x = g.input(tx ? Shape{b, k, m} : Shape{b, m, k}), y = g.input(ty ? Shape{n, k} : Shape{k, n});
    g.op("matmul", {{"x", x}, {"y", y}, {"transpose_x", lit_bool(tx)}, {"transpose_y", lit_bool(ty)}});
  });
  // Rank 1 to 5: Core ML runs linear beyond coremltools' documented rank 3
  // (docs/mil-deviations.md).
  t["linear"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(1, 5)), 4);
    int64_t n = g.pick(1, 7);
    std::vector<std::pair<std::string, Operand>> in = {{"x", g.input(s)}, {"weight", g.constant({n, s.back()})}};
    if (g.coin()) in.push_back({"bias", g.constant({n})});
    g.op("linear", in);
  });
  t["conv"] = custom(kF, [](Gen& g) {
    int64_t groups = g.pick(1, 2), cin = groups * g.pick(1, 3), cout = groups * g.pick(1, 3);
    size_t nsp = size_t(g.pick(1, 2));
    Shape xs = {g.pick(1, 2), cin}, ws = {cout, cin / groups};
    for (size_t i = 0; i < nsp; ++i) xs.push_back(g.pick(4, 7)), ws.push_back(g.pick(1, 3));
    std::vector<int64_t> strides(nsp), dil(nsp);
    for (size_t i = 0; i < nsp; ++i) strides[i] = g.pick(1, 2), dil[i] = g.pick(1, 2);
    const char* pads[] = {"valid", "same", "same_lower"};
    g.op("conv", {{"x", g.input(xs)}, {"weight", g.constant(ws)}, {"bias", g.constant({cout})},
                  {"strides", lit_i32s(strides)}, {"dilations", lit_i32s(dil)}, {"groups", lit_i32(groups)},
                  {"pad_type", lit_str(pads[g.pick(0, 2)])}});
  });
  t["conv_transpose"] = custom(kF, [](Gen& g) {
    int64_t groups = g.pick(1, 2), cin = groups * g.pick(1, 3), cog = g.pick(1, 3);
    size_t nsp = size_t(g.pick(1, 2));
    Shape xs = {g.pick(1, 2), cin}, ws = {cin, cog};
    for (size_t i = 0; i < nsp; ++i) xs.push_back(g.pick(2, 5)), ws.push_back(g.pick(1, 3));
    std::vector<int64_t> strides(nsp), dil(nsp), pad;
    for (size_t i = 0; i < nsp; ++i) strides[i] = g.pick(1, 2), dil[i] = g.pick(1, 2), pad.push_back(0), pad.push_back(g.pick(0, 1));
    std::string pad_type = g.coin() ? "custom" : g.coin() ? "valid" : "same";
    std::vector<std::pair<std::string, Operand>> in = {
        {"x", g.input(xs)}, {"weight", g.constant(ws)}, {"strides", lit_i32s(strides)}, {"dilations", lit_i32s(dil)},
        {"groups", lit_i32(groups)}, {"pad_type", lit_str(pad_type)}};
    if (pad_type == "custom") in.push_back({"pad", lit_i32s(pad)});
    if (pad_type == "valid" && g.coin()) {  // output_shape past the full output: bias only there
      std::vector<int64_t> os = {xs[0], cog * groups};
      for (size_t i = 0; i < nsp; ++i) os.push_back((xs[2 + i] - 1) * strides[i] + (ws[2 + i] - 1) * dil[i] + 1 + g.pick(0, 1));
      in.push_back({"output_shape", lit_i32s(os)});
    }
    if (g.coin()) in.push_back({"bias", g.constant({cog * groups})});
    g.op("conv_transpose", in);
  });
  // Pooling: 1 or 2 spatial dims (3 without ceil_mode), every pad_type,
  // strides, ceil_mode with symmetric pads, exclude_padding on and off.
  for (const char* pool : {"max_pool", "avg_pool", "l2_pool"}) {
    t[pool] = custom(kF, [pool](Gen& g) {
      const bool l2 = std::string(pool) == "l2_pool";
      size_t nsp = size_t(g.pick(1, l2 ? 2 : 3));
      bool ceil = nsp <= 2 && g.coin();
      Shape xs = {g.pick(1, 2), g.pick(1, 3)};
      std::vector<int64_t> k(nsp), s(nsp), pad;
      for (size_t i = 0; i < nsp; ++i) {
        xs.push_back(g.pick(3, nsp == 3 ? 5 : 9));
        k[i] = g.pick(1, 3), s[i] = g.pick(1, 3);
        int64_t p = g.pick(0, k[i] / 2);  // <= k / 2 (as PyTorch): no window of padding alone
        pad.push_back(p), pad.push_back(ceil ? p : g.pick(0, k[i] / 2));
      }
      const char* types[] = {"valid", "custom", "same", "same_lower"};
      std::string pad_type = types[g.pick(0, ceil ? 1 : 3)];
      std::vector<std::pair<std::string, Operand>> in = {{"x", g.input(xs)}, {"kernel_sizes", lit_i32s(k)},
                                                         {"strides", lit_i32s(s)}, {"pad_type", lit_str(pad_type)},
                                                         {"ceil_mode", lit_bool(ceil)}};
      if (pad_type == "custom") in.push_back({"pad", lit_i32s(pad)});
      if (std::string(pool) == "avg_pool") in.push_back({"exclude_padding_from_average", lit_bool(g.coin())});
      g.op(pool, in);
    });
  }
  t["upsample_nearest_neighbor"] = custom(kF, [](Gen& g) {
    Shape xs = g.shape(size_t(g.pick(3, 4)), 4);
    g.op("upsample_nearest_neighbor", {{"x", g.input(xs)}, {"scale_factor_height", lit_f32(double(g.pick(2, 6)) / 2)},
                                       {"scale_factor_width", lit_i32(g.pick(1, 3))}});
  });
  t["upsample_bilinear"] = custom(kF, [](Gen& g) {
    Shape xs = g.shape(size_t(g.pick(3, 4)), 4);
    int mode = int(g.pick(0, 2));  // align_corners, half_pixel_centers, neither
    std::vector<std::pair<std::string, Operand>> in = {
        {"x", g.input(xs)}, {"scale_factor_height", lit_f32(double(g.pick(2, 6)) / 2)},
        {"scale_factor_width", lit_i32(g.pick(1, 3))}, {"align_corners", lit_bool(mode == 0)}};
    if (mode != 0 || g.coin()) in.push_back({"half_pixel_centers", lit_bool(mode == 1)});
    g.op("upsample_bilinear", in);
  });
  t["layer_norm"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(3);
    for (auto& d : s) d += 1;
    g.op("layer_norm", {{"x", g.input(s)}, {"axes", lit_i32s({-1})}, {"gamma", g.constant({s[2]})},
                        {"beta", g.constant({s[2]})}, {"epsilon", g.scalar(1e-3)}});
  });
  t["rms_norm"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(2, 4)));
    int64_t n = s[s.size() == 4 ? 1 : s.size() - 1];
    g.op("rms_norm", {{"x", g.input(s)}, {"w", g.constant({n})}, {"eps", g.scalar(1e-3)}});
  });
  t["batch_norm"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(2, 4)));
    int64_t c = s[1];
    std::vector<std::pair<std::string, Operand>> in = {
        {"x", g.input(s)}, {"mean", g.constant({c})}, {"variance", g.constant({c}, 0.5, 2)}, {"epsilon", g.scalar(1e-3)}};
    if (g.coin()) in.push_back({"gamma", g.constant({c})});
    if (g.coin()) in.push_back({"beta", g.constant({c})});
    g.op("batch_norm", in);
  });
  t["instance_norm"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(3, 4)));
    s.back() += 2;  // at least three values per instance
    int64_t c = s[1];
    std::vector<std::pair<std::string, Operand>> in = {{"x", g.input(s)}, {"epsilon", g.scalar(1e-3)}};
    if (g.coin()) in.push_back({"gamma", g.constant({c})});
    if (g.coin()) in.push_back({"beta", g.constant({c})});
    g.op("instance_norm", in);
  });
  t["l2_norm"] = custom(kF, [](Gen& g) {
    g.op("l2_norm", {{"x", g.input(g.shape(size_t(g.pick(3, 4))))}, {"epsilon", g.scalar(1e-4)}});
  });
  t["local_response_norm"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(3, 4)));
    s[1] = g.pick(1, 7);
    g.op("local_response_norm", {{"x", g.input(s)}, {"size", lit_i32(g.pick(1, 5))}, {"alpha", g.scalar(0.5)},
                                 {"beta", g.scalar(0.75)}, {"k", g.scalar(1.5)}});
  });
  t["prelu"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(4);
    g.op("prelu", {{"x", g.input(s)}, {"alpha", g.constant({s[1]})}});
  });
  t["softplus_parametric"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(3, 4)));
    g.op("softplus_parametric", {{"x", g.input(s)}, {"alpha", g.constant({s[1]}, 0.5, 2)}, {"beta", g.constant({s[1]}, -2, 2)}});
  });
  t["lstm"] = custom(kF32, [](Gen& g) {
    int64_t seq = g.pick(1, 4), b = g.pick(1, 2), in = g.pick(1, 4), h = g.pick(1, 4);
    bool out_seq = g.coin();
    std::vector<Value> out = g.f.op_n(
        "lstm", {"lstm_y", "lstm_h", "lstm_c"},
        {{"x", g.input({seq, b, in})}, {"initial_h", g.input({b, h})}, {"initial_c", g.input({b, h})},
         {"weight_ih", g.constant({4 * h, in})}, {"weight_hh", g.constant({4 * h, h})}, {"bias", g.constant({4 * h})},
         {"output_sequence", lit_bool(out_seq)}, {"direction", lit_str(g.coin() ? "forward" : "reverse")}});
    for (auto& v : out) g.f.output(v);
  });
  t["scaled_dot_product_attention"] = custom(kF, [](Gen& g) {
    int64_t b = g.pick(1, 2), l = g.pick(1, 5), s = g.pick(1, 5), e = g.pick(1, 6), ev = g.pick(1, 6);
    std::vector<std::pair<std::string, Operand>> in = {
        {"query", g.input({b, l, e})}, {"key", g.input({b, s, e})}, {"value", g.input({b, s, ev})}};
    if (g.coin()) in.push_back({"attn_mask", g.input({l, s}, 0, 1, DType::Bool)});
    g.op("scaled_dot_product_attention", in);
  });

  // milrt's fused ops, which the fusion passes make (and test_pass_fuse_*.cpp
  // test as passes), written here directly.
  t["milrt_elementwise"] = custom(kF, [](Gen& g) {
    const char* exprs[] = {"add(%1, mul(%0, sigmoid(%0)))", "clip(mul(%0, 0.5), 0, 6)", "real_div(%0, add(abs(%1), 1))",
                           "gelu_tanh(sub(%0, %1))"};
    Shape s = g.shape(size_t(g.pick(1, 4)));
    Shape ys(s.begin() + g.pick(0, int64_t(s.size()) - 1), s.end());
    g.op("milrt_elementwise", {{"inputs", tuple({g.input(s), g.input(ys)})}, {"expr", lit_str(exprs[g.pick(0, 3)])}});
  });
  t["milrt_gemm"] = custom(kF, [](Gen& g) {
    const char* acts[] = {"none", "relu", "gelu_tanh", "silu", "sigmoid"};
    int64_t m = g.pick(1, 6), k = g.pick(1, 8), n = g.pick(1, 6);
    std::vector<std::pair<std::string, Operand>> in = {{"x", g.input({2, m, k})}, {"y", g.constant({n, k})},
                                                       {"transpose_y", lit_bool(true)}, {"bias", g.constant({n})},
                                                       {"activation", lit_str(acts[g.pick(0, 4)])}};
    if (g.coin()) in.push_back({"residual", g.input({2, m, n})});
    if (g.coin()) in.push_back({"alpha", g.scalar(0.5)});
    g.op("milrt_gemm", in);
  });
  t["milrt_softmax"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(3);
    g.op("milrt_softmax", {{"x", g.input(s, -3, 3)}, {"mask", g.input({s[1], s[2]})}, {"scale", g.scalar(0.75)},
                           {"axis", lit_i32(-1)}});
  });
  t["milrt_attention"] = custom(kF, [](Gen& g) {
    int64_t b = g.pick(1, 2), l = g.pick(1, 5), e = g.pick(1, 6), ev = g.pick(1, 6);
    g.op("milrt_attention", {{"q", g.input({b, l, e})}, {"k", g.input({b, l, e})}, {"v", g.input({b, l, ev})},
                             {"scale", g.scalar(0.5)}, {"causal", lit_bool(g.coin())}});
  });
  t["milrt_attention_grad"] = custom(kF, [](Gen& g) {
    int64_t b = g.pick(1, 2), l = g.pick(1, 5), e = g.pick(1, 6), ev = g.pick(1, 6);
    std::vector<std::pair<std::string, Operand>> in = {{"q", g.input({b, l, e})}, {"k", g.input({b, l, e})},
                                                       {"v", g.input({b, l, ev})}, {"scale", g.scalar(0.5)},
                                                       {"causal", lit_bool(g.coin())}};
    std::vector<std::pair<std::string, Operand>> grad_in = in;
    grad_in.push_back({"o", g.f.op("milrt_attention", "o", in)});  // the forward's output, as the op requires
    grad_in.push_back({"dout", g.input({b, l, ev})});
    for (const Value& y : g.f.op_n("milrt_attention_grad", {"dq", "dk", "dv"}, grad_in)) g.f.output(y);
  });
  t["milrt_conv"] = custom(kF, [](Gen& g) {
    const char* acts[] = {"none", "relu", "sigmoid", "silu"};
    int64_t cin = g.pick(1, 3), cout = g.pick(1, 3);
    g.op("milrt_conv", {{"x", g.input({1, cin, g.pick(3, 7)})}, {"weight", g.constant({cout, cin, g.pick(1, 3)})},
                        {"bias", g.constant({cout})}, {"pad_type", lit_str("same")},
                        {"activation", lit_str(acts[g.pick(0, 3)])}});
  });
  t["milrt_conv_chain"] = custom(kF, [](Gen& g) {
    const char* acts[] = {"none", "relu", "sigmoid", "silu"};
    int64_t c0 = g.pick(1, 3), c1 = g.pick(1, 4), c2 = g.pick(1, 3);
    g.op("milrt_conv_chain", {{"x", g.input({2, c0, g.pick(1, 6)})},
                              {"weights", tuple({g.constant({c1, c0, 1}), g.constant({c2, c1, 1})})},
                              {"biases", tuple({g.constant({c1}), g.constant({c2})})},
                              {"activations", lit_str(std::string(acts[g.pick(0, 3)]) + " " + acts[g.pick(0, 3)])}});
  });
  t["milrt_rms_norm"] = custom(kF, [](Gen& g) {
    Shape s = g.shape(3);
    g.op("milrt_rms_norm", {{"x", g.input(s)}, {"gamma", g.constant({s[2]})}, {"axes", lit_i32s({-1})},
                            {"eps", g.scalar(1e-3)}});
  });
  t["milrt_rope"] = custom(kF32, [](Gen& g) {
    const int64_t t = g.pick(1, 5), w = 2 * g.pick(1, 4);
    g.op("milrt_rope", {{"x", g.input({g.pick(1, 3), t, w})}, {"cos", g.constant({t, w})}, {"sin", g.input({t, w})},
                        {"transpose", lit_bool(g.coin())}});
  });
  t["milrt_silu_mul"] = custom(kF32, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(1, 3)));
    g.op("milrt_silu_mul", {{"a", g.input(s, -6, 6)}, {"b", g.input(s)}});
  });
  t["milrt_silu_mul_grad"] = custom(kF32, [](Gen& g) {
    Shape s = g.shape(size_t(g.pick(1, 3)));
    for (const Value& y : g.f.op_n("milrt_silu_mul_grad", {"da", "db"},
                                   {{"a", g.input(s, -6, 6)}, {"b", g.input(s)}, {"dy", g.input(s)}}))
      g.f.output(y);
  });
  t["milrt_rms_norm_grad"] = custom(kF32, [](Gen& g) {
    Shape s = g.shape(3);
    for (const Value& y : g.f.op_n("milrt_rms_norm_grad", {"dx", "dw"},
                                   {{"x", g.input(s)}, {"w", g.input({s[2]})}, {"dy", g.input(s)}, {"eps", g.scalar(1e-3)}}))
      g.f.output(y);
  });
  return t;
}

// ---- the sweep ----------------------------------------------------------------

TEST(OpCoverage, EveryRegisteredOpIsCoveredOrSkipped) {
  std::map<std::string, Case> table = cases();
  std::set<std::string> registered;
  for (const std::string& op : registered_ops()) {
    registered.insert(op);
    bool covered = table.count(op) != 0, skipped = kSkipped.count(op) != 0;
    EXPECT_TRUE(covered || skipped) << "op '" << op
                                    << "' is in the registry but neither in this sweep's table nor in kSkipped";
    EXPECT_FALSE(covered && skipped) << "op '" << op << "' is both covered and skipped";
  }
  for (auto& [op, c] : table) EXPECT_TRUE(registered.count(op)) << "table entry '" << op << "' is not a registered op";
  for (const std::string& op : kSkipped) EXPECT_TRUE(registered.count(op)) << "skip entry '" << op << "' is not registered";
}

TEST(OpCoverage, EveryCoveredOpCompilesAndAgreesWithTheReference) {
  std::map<std::string, Case> table = cases();
  uint64_t seed = 1;
  int runs = 0;
  for (auto& [op, c] : table) {
    for (DType dt : c.dtypes) {
      for (int trial = 0; trial < 2; ++trial, ++seed) {
        std::string what = op + " (" + std::string(dtype_name(dt)) + ", seed " + std::to_string(seed) + ")";
        SCOPED_TRACE(what);
        Gen g(seed, dt);
        g.type = op;
        Program p;
        try {
          c.build(g);
          p = make_program({g.f.build()});
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": building the program failed: " << e.what();
          continue;
        }
        TensorMap want, got;
        try {
          want = run_reference(p, "main", g.in);
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": the reference failed: " << e.what();
          continue;
        }
        try {
          got = compile(p).run(g.in);
        } catch (const Error& e) {
          ADD_FAILURE() << what << ": the compiled plan failed: " << e.what();
          continue;
        }
        double tol = dt == DType::FP16 ? 1e-2 : 1e-4;
        expect_outputs_close(want, got, tol, tol, what);
        ++runs;
      }
    }
  }
  std::printf("[op-coverage] %zu ops, %d programs compiled and compared\n", table.size(), runs);
}

}  // namespace
}  // namespace milrt::test::rewrite
