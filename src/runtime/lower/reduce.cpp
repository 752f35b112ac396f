// Lowering of the reductions (reduce_*, reduce_argmax/argmin).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kernels/generic/linalg.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {
using kernels::Reduce;

const std::map<std::string, Reduce>& reductions() {
  static const std::map<std::string, Reduce> m = {
      {"reduce_sum", Reduce::Sum}, {"reduce_mean", Reduce::Mean}, {"reduce_max", Reduce::Max},
      {"reduce_min", Reduce::Min}, {"reduce_prod", Reduce::Prod}, {"reduce_l1_norm", Reduce::L1},
      {"reduce_l2_norm", Reduce::L2}, {"reduce_sum_square", Reduce::SumSquare},
      {"reduce_log_sum", Reduce::LogSum}, {"reduce_log_sum_exp", Reduce::LogSumExp}};
  return m;
}

// One int32 line of n values `inner` apart, reduced in fp64 (exact for sums
// below 2^53) and stored as the plan stores int32: truncated toward zero,
// saturated, NaN as 0.
int32_t reduce_int_line(Reduce kind, const int32_t* p, int64_t n, int64_t inner) {
  double acc = kind == Reduce::Prod ? 1.0 : 0.0;
  double top = -std::numeric_limits<double>::infinity();
  if (kind == Reduce::Max || kind == Reduce::LogSumExp) acc = top;
  if (kind == Reduce::Min) acc = std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    const double v = double(p[i * inner]);
    switch (kind) {
      case Reduce::Sum: case Reduce::Mean: case Reduce::LogSum: acc += v; break;
      case Reduce::Max: case Reduce::LogSumExp: acc = std::max(acc, v); break;
      case Reduce::Min: acc = std::min(acc, v); break;
      case Reduce::Prod: acc *= v; break;
      case Reduce::L1: acc += std::fabs(v); break;
      case Reduce::L2: case Reduce::SumSquare: acc += v * v; break;
    }
  }
  if (kind == Reduce::Mean) acc /= double(n);
  if (kind == Reduce::L2) acc = std::sqrt(acc);
  if (kind == Reduce::LogSum) acc = std::log(acc);
  if (kind == Reduce::LogSumExp) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::exp(double(p[i * inner]) - acc);
    acc += std::log(s);
  }
  if (std::isnan(acc)) return 0;
  acc = std::trunc(acc);
  if (acc <= double(std::numeric_limits<int32_t>::lowest())) return std::numeric_limits<int32_t>::lowest();
  if (acc >= double(std::numeric_limits<int32_t>::max())) return std::numeric_limits<int32_t>::max();
  return int32_t(acc);
}

std::unique_ptr<Step> lower_reduce(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32 && x.dtype != DType::Int32) throw_op_error(op, "only float and integer reductions compile");
  int64_t rank = int64_t(x.shape.size());
  std::vector<int64_t> axes;
  if (op.has("axes")) {
    for (int64_t a : ctx.const_ints(op, "axes")) axes.push_back(norm_axis(op, a, rank));
  } else {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  }
  std::sort(axes.begin(), axes.end());
  // Size-1 dims do not matter: the reduced dims must form one contiguous run otherwise.
  std::vector<int64_t> real;
  for (int64_t a : axes) if (x.shape[size_t(a)] != 1) real.push_back(a);
  for (size_t i = 1; i < real.size(); ++i)
    for (int64_t d = real[i - 1] + 1; d < real[i]; ++d)
      if (x.shape[size_t(d)] != 1) throw_op_error(op, "reducing non-adjacent axes is not compiled yet");
  int64_t outer = 1, n = 1, inner = 1;
  if (real.empty()) { outer = x.numel(); }
  else split_dims(x.shape, real.front(), real.back(), outer, n, inner);
  Reduce kind = reductions().at(op.type);
  int ix = x.id, io = o.id;
  if (x.dtype == DType::Int32)
    return make_step("reduce:" + op.type + ":int32", op, [=](const Frame& f) {
      const int32_t* xp = f.at<int32_t>(ix);
      int32_t* yp = f.at<int32_t>(io);
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t c = 0; c < inner; ++c) yp[a * inner + c] = reduce_int_line(kind, xp + a * n * inner + c, n, inner);
    });
  return make_step("reduce:" + op.type, op, [=](const Frame& f) { kernels::reduce_f32(kind, f.at<float>(ix), f.at<float>(io), outer, n, inner); });
}

std::unique_ptr<Step> lower_arg_reduce(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  int64_t axis = norm_axis(op, ctx.const_int(op, "axis", -1), int64_t(x.shape.size()));
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  bool is_max = op.type == "reduce_argmax";
  int ix = x.id, io = o.id;
  if (x.dtype == DType::Int32) {
    // Integers are stored as int32 (read as floats they would be garbage); the first extremum wins.
    return make_step(op.type, op, [=](const Frame& f) {
      const int32_t* xp = f.at<int32_t>(ix);
      int32_t* yp = f.at<int32_t>(io);
      for (int64_t a = 0; a < outer; ++a)
        for (int64_t c = 0; c < inner; ++c) {
          const int32_t* p = xp + a * n * inner + c;
          int64_t best = 0;
          for (int64_t i = 1; i < n; ++i)
            if (is_max ? p[i * inner] > p[best * inner] : p[i * inner] < p[best * inner]) best = i;
          yp[a * inner + c] = int32_t(best);
        }
    });
  }
  if (x.dtype != DType::FP32) throw_op_error(op, "only float and integer inputs compile");
  return make_step(op.type, op, [=](const Frame& f) { kernels::arg_reduce_f32(is_max, f.at<float>(ix), f.at<int32_t>(io), outer, n, inner); });
}
}  // namespace

void register_reduce_lowerings() {
  for (auto& [name, kind] : reductions()) register_lowering(name, lower_reduce);
  register_lowering("reduce_argmax", lower_arg_reduce);
  register_lowering("reduce_argmin", lower_arg_reduce);
}

}  // namespace milrt::rt
