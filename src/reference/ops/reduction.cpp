// Reference implementations of the reductions, registered from
// register_ref_tensor_ops(). Values are grouped by output element, then each
// group is reduced in fp64 and rounded to the declared dtype (int32 results
// truncate toward zero, as coremltools' astype does).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "reference/ref_ops.h"

namespace milrt::ref {

void register_ref_reduction_ops();

namespace {

using Group = std::vector<double>;

struct Grouped {
  Shape out_shape;
  std::vector<Group> groups;  // in output order; each in increasing index order
};

// Groups the elements of x by the output element they reduce into.
Grouped group_by(const RefCtx& c, const NdArray& x, const std::vector<bool>& reduced, bool keep) {
  Shape kept = x.shape;
  Grouped g;
  for (size_t d = 0; d < kept.size(); ++d) {
    if (reduced[d]) kept[d] = 1;
    if (!reduced[d] || keep) g.out_shape.push_back(kept[d]);
  }
  g.groups.resize(size_t(shape_numel(kept)));
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t rem = i, flat = 0, scale = 1;
    for (size_t d = kept.size(); d-- > 0;) {
      int64_t pos = rem % x.shape[d];
      rem /= x.shape[d];
      flat += (reduced[d] ? 0 : pos) * scale;
      scale *= kept[d];
    }
    g.groups[size_t(flat)].push_back(x.v[size_t(i)]);
  }
  for (auto& grp : g.groups) if (grp.empty()) c.fail("cannot reduce over an empty dim");
  return g;
}

int64_t axis_in(const RefCtx& c, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

bool any_nan(const Group& g) {
  return std::any_of(g.begin(), g.end(), [](double v) { return std::isnan(v); });
}
double sum(const Group& g) { return std::accumulate(g.begin(), g.end(), 0.0); }
double mean(const Group& g) { return sum(g) / double(g.size()); }
double max(const Group& g) { return any_nan(g) ? NAN : *std::max_element(g.begin(), g.end()); }
double min(const Group& g) { return any_nan(g) ? NAN : *std::min_element(g.begin(), g.end()); }
double prod(const Group& g) { return std::accumulate(g.begin(), g.end(), 1.0, std::multiplies<>()); }
double l1_norm(const Group& g) {
  double s = 0;
  for (double v : g) s += std::fabs(v);
  return s;
}
double sum_square(const Group& g) {
  double s = 0;
  for (double v : g) s += v * v;
  return s;
}
double l2_norm(const Group& g) { return std::sqrt(sum_square(g)); }
double log_sum(const Group& g) { return std::log(sum(g)); }
// Shifted by the maximum so large inputs do not overflow exp.
double log_sum_exp(const Group& g) {
  double m = max(g);
  if (std::isinf(m)) return m;
  double s = 0;
  for (double v : g) s += std::exp(v - m);
  return m + std::log(s);
}

template <double (*F)(const Group&)>
void ref_reduce(RefCtx& c) {
  NdArray x = c.nd("x");
  std::vector<bool> reduced(x.shape.size(), !c.has("axes"));
  for (int64_t a : c.ints("axes", std::vector<int64_t>{})) {
    size_t d = size_t(axis_in(c, a, x.rank()));
    if (reduced[d]) c.fail("axis " + std::to_string(a) + " is repeated");
    reduced[d] = true;
  }
  Grouped g = group_by(c, x, reduced, c.flag("keep_dims", false));
  NdArray r(g.out_shape);
  for (size_t i = 0; i < g.groups.size(); ++i) r.v[i] = F(g.groups[i]);
  c.set_nd(0, r);
}

// The first position of the largest (greater = true) or smallest value; a NaN
// wins at its first occurrence, as with numpy.
double arg_extreme(const Group& g, bool greater) {
  size_t best = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) return double(i);
    if (greater ? g[i] > g[best] : g[i] < g[best]) best = i;
  }
  return double(best);
}

template <bool Greater>
void ref_reduce_arg(RefCtx& c) {
  NdArray x = c.nd("x");
  std::vector<bool> reduced(x.shape.size(), false);
  reduced[size_t(axis_in(c, c.i64("axis", -1), x.rank()))] = true;
  Grouped g = group_by(c, x, reduced, c.flag("keep_dims", false));
  NdArray r(g.out_shape);
  for (size_t i = 0; i < g.groups.size(); ++i) r.v[i] = arg_extreme(g.groups[i], Greater);
  c.set_nd(0, r);
}

}  // namespace

void register_ref_reduction_ops() {
  register_ref("reduce_sum", ref_reduce<sum>);
  register_ref("reduce_mean", ref_reduce<mean>);
  register_ref("reduce_max", ref_reduce<max>);
  register_ref("reduce_min", ref_reduce<min>);
  register_ref("reduce_prod", ref_reduce<prod>);
  register_ref("reduce_l1_norm", ref_reduce<l1_norm>);
  register_ref("reduce_l2_norm", ref_reduce<l2_norm>);
  register_ref("reduce_sum_square", ref_reduce<sum_square>);
  register_ref("reduce_log_sum", ref_reduce<log_sum>);
  register_ref("reduce_log_sum_exp", ref_reduce<log_sum_exp>);
  register_ref("reduce_argmax", ref_reduce_arg<true>);
  register_ref("reduce_argmin", ref_reduce_arg<false>);
}

}  // namespace milrt::ref
