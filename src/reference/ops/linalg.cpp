// Reference implementations of the linalg op family: matmul, linear, conv,
// conv_transpose, the normalizations, lstm and scaled_dot_product_attention.
//
// Plain loops over fp64 arrays, written for obviousness: every output element
// is one explicit sum. Semantics follow coremltools' op definitions; the few
// choices those leave open are noted where they are made.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Multi-index of row-major position `flat` in `shape`.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t i = shape.size(); i-- > 0;) {
    idx[i] = flat % shape[i];
    flat /= shape[i];
  }
  return idx;
}

// Every multi-index of `shape`, in row-major order.
std::vector<std::vector<int64_t>> all_indices(const Shape& shape) {
  std::vector<std::vector<int64_t>> r;
  for (int64_t f = 0; f < shape_numel(shape); ++f) r.push_back(unravel(f, shape));
  return r;
}

Shape bcast(const RefCtx& c, const Shape& a, const Shape& b) {
  try {
    return broadcast(a, b);
  } catch (const Error& e) {
    c.fail(e.what());
  }
}

// A per-channel parameter of `n` values.
std::vector<double> vec(const RefCtx& c, const std::string& key, int64_t n) {
  NdArray a = c.nd(key);
  if (a.numel() != n)
    c.fail("input '" + key + "' has " + str(a.numel()) + " elements, expected " + str(n));
  return a.v;
}

// An optional one; `def` fills it when absent.
std::vector<double> vec_or(const RefCtx& c, const std::string& key, int64_t n, double def) {
  return c.has(key) ? vec(c, key, n) : std::vector<double>(size_t(n), def);
}

// ---- matmul, linear -------------------------------------------------------

NdArray swap_last_two(const NdArray& a) {
  NdArray r(a.shape);
  int k = a.rank();
  std::swap(r.shape[size_t(k) - 1], r.shape[size_t(k) - 2]);
  int64_t m = a.shape[size_t(k) - 2], n = a.shape[size_t(k) - 1];
  if (m * n == 0) return r;
  for (int64_t b = 0; b < a.numel() / (m * n); ++b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) r.v[size_t(b * m * n + j * m + i)] = a.v[size_t(b * m * n + i * n + j)];
  return r;
}

void ref_matmul(RefCtx& c) {
  NdArray x = c.nd("x"), y = c.nd("y");
  if (x.rank() == 0 || y.rank() == 0) c.fail("x and y must have rank >= 1");
  bool xvec = x.rank() == 1, yvec = y.rank() == 1;
  if (c.flag("transpose_x", false)) {
    if (xvec) c.fail("x is rank 1, so transpose_x must be false");
    x = swap_last_two(x);
  }
  if (c.flag("transpose_y", false)) {
    if (yvec) c.fail("y is rank 1, so transpose_y must be false");
    y = swap_last_two(y);
  }
  if (xvec) x.shape.insert(x.shape.begin(), 1);
  if (yvec) y.shape.push_back(1);
  size_t xr = x.shape.size(), yr = y.shape.size();
  int64_t m = x.shape[xr - 2], k = x.shape[xr - 1], n = y.shape[yr - 1];
  if (y.shape[yr - 2] != k)
    c.fail("inner dimensions do not match: " + shape_str(x.shape) + " x " + shape_str(y.shape));
  Shape xb(x.shape.begin(), x.shape.end() - 2), yb(y.shape.begin(), y.shape.end() - 2);
  Shape ob = bcast(c, xb, yb);
  Shape os = ob;
  os.push_back(m);
  os.push_back(n);
  NdArray out(os);
  for (int64_t b = 0; b < shape_numel(ob); ++b) {
    std::vector<int64_t> idx = unravel(b, ob);
    int64_t xo = broadcast_index(idx, ob, xb) * m * k, yo = broadcast_index(idx, ob, yb) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p) s += x.v[size_t(xo + i * k + p)] * y.v[size_t(yo + p * n + j)];
        out.v[size_t((b * m + i) * n + j)] = s;
      }
  }
  if (yvec) out.shape.pop_back();
  if (xvec) out.shape.erase(out.shape.end() - (yvec ? 1 : 2));
  c.set_nd(0, out);
}

void ref_linear(RefCtx& c) {
  NdArray x = c.nd("x"), w = c.nd("weight");
  if (w.rank() != 2) c.fail("weight must have rank 2, got " + shape_str(w.shape));
  if (x.rank() < 1) c.fail("x must have rank >= 1");
  int64_t in = x.shape.back(), outf = w.shape[0];
  if (w.shape[1] != in) c.fail("x " + shape_str(x.shape) + " does not match weight " + shape_str(w.shape));
  std::vector<double> bias = vec_or(c, "bias", outf, 0.0);
  Shape os = x.shape;
  os.back() = outf;
  NdArray out(os);
  int64_t rows = shape_numel(Shape(x.shape.begin(), x.shape.end() - 1));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < outf; ++o) {
      double s = bias[size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x.v[size_t(r * in + i)] * w.v[size_t(o * in + i)];
      out.v[size_t(r * outf + o)] = s;
    }
  c.set_nd(0, out);
}

// ---- conv, conv_transpose -------------------------------------------------

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// What conv and conv_transpose read besides x and weight.
struct ConvArgs {
  size_t nsp = 0;
  std::vector<int64_t> strides, dilations, pad;
  std::string pad_type;
  int64_t groups = 1;
  Shape kernel;                  // weight's spatial dims
  std::vector<int64_t> ek;       // dilated kernel sizes
};

ConvArgs conv_args(const RefCtx& c, const NdArray& x, const NdArray& w) {
  if (x.rank() < 3 || x.rank() > 5) c.fail("x must have rank 3 to 5, got " + shape_str(x.shape));
  if (w.rank() != x.rank()) c.fail("weight " + shape_str(w.shape) + " must have the rank of x " + shape_str(x.shape));
  ConvArgs a;
  a.nsp = size_t(x.rank() - 2);
  a.strides = c.ints("strides", std::vector<int64_t>(a.nsp, 1));
  a.dilations = c.ints("dilations", std::vector<int64_t>(a.nsp, 1));
  a.groups = c.i64("groups", 1);
  a.pad_type = c.str("pad_type", "valid");
  a.pad = a.pad_type == "custom" ? c.ints("pad", std::vector<int64_t>(2 * a.nsp, 0))
                                 : std::vector<int64_t>(2 * a.nsp, 0);
  if (a.strides.size() != a.nsp || a.dilations.size() != a.nsp || a.pad.size() != 2 * a.nsp)
    c.fail("strides, dilations and pad must have one (pad: two) value per spatial dim");
  for (size_t i = 0; i < a.nsp; ++i)
    if (a.strides[i] < 1 || a.dilations[i] < 1) c.fail("strides and dilations must be >= 1");
  if (a.groups < 1) c.fail("groups must be >= 1");
  a.kernel.assign(w.shape.begin() + 2, w.shape.end());
  for (size_t i = 0; i < a.nsp; ++i) a.ek.push_back((a.kernel[i] - 1) * a.dilations[i] + 1);
  return a;
}

void ref_conv(RefCtx& c) {
  NdArray x = c.nd("x"), w = c.nd("weight");
  ConvArgs a = conv_args(c, x, w);
  int64_t batch = x.shape[0], cin = x.shape[1], cout = w.shape[0];
  if (cin % a.groups != 0 || w.shape[1] != cin / a.groups || cout % a.groups != 0)
    c.fail("channels do not fit groups = " + str(a.groups) + ": x " + shape_str(x.shape) + ", weight " +
           shape_str(w.shape));
  // Output size and leading padding per spatial dim. `same` pads to
  // ceil(in / stride) outputs with any odd padding unit after, `same_lower` before.
  Shape in_sp(x.shape.begin() + 2, x.shape.end()), out_sp;
  std::vector<int64_t> before;
  for (size_t i = 0; i < a.nsp; ++i) {
    int64_t in = in_sp[i], s = a.strides[i], total = 0, b = 0;
    if (a.pad_type == "same" || a.pad_type == "same_lower") {
      total = std::max<int64_t>(0, s * ((in + s - 1) / s) - in + a.ek[i] - s);
      b = a.pad_type == "same" ? total / 2 : total - total / 2;
    } else if (a.pad_type == "custom") {
      total = a.pad[2 * i] + a.pad[2 * i + 1];
      b = a.pad[2 * i];
    } else if (a.pad_type != "valid") {
      c.fail("unknown pad_type '" + a.pad_type + "'");
    }
    int64_t o = floor_div(in + total - a.ek[i], s) + 1;
    if (o <= 0) c.fail("spatial dim " + str(int64_t(i)) + " gets output size " + str(o));
    out_sp.push_back(o);
    before.push_back(b);
  }
  std::vector<double> bias = vec_or(c, "bias", cout, 0.0);
  Shape os = {batch, cout};
  os.insert(os.end(), out_sp.begin(), out_sp.end());
  NdArray out(os);
  int64_t cig = cin / a.groups, cog = cout / a.groups;
  int64_t nin = shape_numel(in_sp), nk = shape_numel(a.kernel), nout = shape_numel(out_sp);
  auto kidx = all_indices(a.kernel);
  auto oidx = all_indices(out_sp);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t oc = 0; oc < cout; ++oc) {
      int64_t g = oc / cog;
      for (int64_t op = 0; op < nout; ++op) {
        double s = bias[size_t(oc)];
        for (int64_t icl = 0; icl < cig; ++icl)
          for (int64_t kp = 0; kp < nk; ++kp) {
            int64_t xflat = 0;
            bool inside = true;
            for (size_t i = 0; i < a.nsp; ++i) {
              int64_t p = oidx[size_t(op)][i] * a.strides[i] + kidx[size_t(kp)][i] * a.dilations[i] - before[i];
              inside = inside && p >= 0 && p < in_sp[i];
              xflat = xflat * in_sp[i] + p;
            }
            if (!inside) continue;
            s += x.v[size_t((n * cin + g * cig + icl) * nin + xflat)] * w.v[size_t((oc * cig + icl) * nk + kp)];
          }
        out.v[size_t((n * cout + oc) * nout + op)] = s;
      }
    }
  c.set_nd(0, out);
}

// Scatters every input element through the kernel into the full (unpadded)
// output of length (in - 1) * stride + dilated kernel, then keeps the window
// that starts `before` elements in. With output_shape given, positions past the
// full output are zero (plus bias). `same` crops floor(excess / 2) in front, the
// mirror of conv's `same` that puts the odd padding unit after.
void ref_conv_transpose(RefCtx& c) {
  NdArray x = c.nd("x"), w = c.nd("weight");
  ConvArgs a = conv_args(c, x, w);
  int64_t batch = x.shape[0], cin = x.shape[1];
  if (w.shape[0] != cin || cin % a.groups != 0)
    c.fail("weight " + shape_str(w.shape) + " does not fit x " + shape_str(x.shape) + " with groups = " +
           str(a.groups));
  int64_t cig = cin / a.groups, cog = w.shape[1], cout = cog * a.groups;
  Shape in_sp(x.shape.begin() + 2, x.shape.end()), out_sp;
  std::vector<int64_t> given;
  if (c.has("output_shape")) {
    given = c.ints("output_shape");
    if (given.size() != size_t(x.rank()) || given[0] != batch || given[1] != cout)
      c.fail("output_shape " + shape_str(given) + " must be [n, C_out, spatial...] with n = " + str(batch) +
             ", C_out = " + str(cout));
  }
  std::vector<int64_t> before;
  for (size_t i = 0; i < a.nsp; ++i) {
    int64_t full = (in_sp[i] - 1) * a.strides[i] + a.ek[i], o = 0, b = 0;
    if (a.pad_type == "valid") {
      o = full;
    } else if (a.pad_type == "custom") {
      o = full - a.pad[2 * i] - a.pad[2 * i + 1];
      b = a.pad[2 * i];
    } else if (a.pad_type == "same") {
      o = in_sp[i] * a.strides[i];
    } else {
      c.fail("pad_type must be valid, same or custom, got '" + a.pad_type + "'");
    }
    if (!given.empty()) o = given[i + 2];
    if (a.pad_type == "same") b = std::max<int64_t>(0, full - o) / 2;
    if (o <= 0) c.fail("spatial dim " + str(int64_t(i)) + " gets output size " + str(o));
    out_sp.push_back(o);
    before.push_back(b);
  }
  std::vector<double> bias = vec_or(c, "bias", cout, 0.0);
  Shape os = {batch, cout};
  os.insert(os.end(), out_sp.begin(), out_sp.end());
  NdArray out(os);
  int64_t nin = shape_numel(in_sp), nk = shape_numel(a.kernel), nout = shape_numel(out_sp);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t oc = 0; oc < cout; ++oc)
      for (int64_t op = 0; op < nout; ++op) out.v[size_t((n * cout + oc) * nout + op)] = bias[size_t(oc)];
  auto kidx = all_indices(a.kernel);
  auto iidx = all_indices(in_sp);
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t ic = 0; ic < cin; ++ic) {
      int64_t g = ic / cig;
      for (int64_t ip = 0; ip < nin; ++ip) {
        double xv = x.v[size_t((n * cin + ic) * nin + ip)];
        for (int64_t kp = 0; kp < nk; ++kp) {
          int64_t oflat = 0;
          bool inside = true;
          for (size_t i = 0; i < a.nsp; ++i) {
            int64_t j = iidx[size_t(ip)][i] * a.strides[i] + kidx[size_t(kp)][i] * a.dilations[i] - before[i];
            inside = inside && j >= 0 && j < out_sp[i];
            oflat = oflat * out_sp[i] + j;
          }
          if (!inside) continue;
          for (int64_t ocl = 0; ocl < cog; ++ocl)
            out.v[size_t((n * cout + g * cog + ocl) * nout + oflat)] += xv * w.v[size_t((ic * cog + ocl) * nk + kp)];
        }
      }
    }
  c.set_nd(0, out);
}

// ---- normalizations -------------------------------------------------------

// Splits the elements of `shape` into groups that share the dims not in
// `reduced`; `member` numbers an element within its group, row-major over the
// reduced dims (so it indexes a parameter shaped like those dims).
struct Groups {
  std::vector<int64_t> group, member;
  int64_t count = 1, size = 1;
};

Groups group_by(const Shape& shape, const std::vector<bool>& reduced) {
  Groups g;
  for (size_t d = 0; d < shape.size(); ++d) (reduced[d] ? g.size : g.count) *= shape[d];
  for (int64_t f = 0; f < shape_numel(shape); ++f) {
    std::vector<int64_t> idx = unravel(f, shape);
    int64_t gi = 0, mi = 0;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (reduced[d]) mi = mi * shape[d] + idx[d];
      else gi = gi * shape[d] + idx[d];
    }
    g.group.push_back(gi);
    g.member.push_back(mi);
  }
  return g;
}

// Per-group sum / mean of f(x, group) over the reduced dims.
template <class F>
std::vector<double> group_sum(const NdArray& x, const Groups& g, F f) {
  std::vector<double> s(size_t(g.count), 0.0);
  for (int64_t i = 0; i < x.numel(); ++i) s[size_t(g.group[size_t(i)])] += f(x.v[size_t(i)], g.group[size_t(i)]);
  return s;
}
template <class F>
std::vector<double> group_mean(const NdArray& x, const Groups& g, F f) {
  std::vector<double> s = group_sum(x, g, f);
  for (double& v : s) v /= double(g.size);
  return s;
}

// (x - mean) / sqrt(var + eps) within each group; the shared core of
// layer_norm and instance_norm.
NdArray standardize(const NdArray& x, const Groups& g, double eps) {
  std::vector<double> mean = group_mean(x, g, [](double v, int64_t) { return v; });
  std::vector<double> var = group_mean(x, g, [&](double v, int64_t gi) {
    double d = v - mean[size_t(gi)];
    return d * d;
  });
  NdArray y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    size_t gi = size_t(g.group[size_t(i)]);
    y.v[size_t(i)] = (x.v[size_t(i)] - mean[gi]) / std::sqrt(var[gi] + eps);
  }
  return y;
}

void ref_layer_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  std::vector<int64_t> all;
  for (int d = 0; d < x.rank(); ++d) all.push_back(d);
  std::vector<bool> reduced(size_t(x.rank()), false);
  for (int64_t a : c.ints("axes", all)) {
    try {
      reduced[size_t(norm_axis(a, x.rank()))] = true;
    } catch (const Error& e) {
      c.fail(e.what());
    }
  }
  Groups g = group_by(x.shape, reduced);
  NdArray y = standardize(x, g, c.f64("epsilon", 1e-5));
  std::vector<double> gamma = vec_or(c, "gamma", g.size, 1.0), beta = vec_or(c, "beta", g.size, 0.0);
  for (int64_t i = 0; i < y.numel(); ++i) {
    size_t m = size_t(g.member[size_t(i)]);
    y.v[size_t(i)] = y.v[size_t(i)] * gamma[m] + beta[m];
  }
  c.set_nd(0, y);
}

// Channel (dim 1) of every element of x.
std::vector<int64_t> channel_of(const NdArray& x) {
  int64_t inner = shape_numel(Shape(x.shape.begin() + 2, x.shape.end()));
  std::vector<int64_t> ch(size_t(x.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) ch[size_t(i)] = (i / inner) % x.shape[1];
  return ch;
}

void ref_batch_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  if (x.rank() < 2) c.fail("x must have rank >= 2");
  int64_t ch = x.shape[1];
  std::vector<double> mean = vec(c, "mean", ch), var = vec(c, "variance", ch);
  std::vector<double> gamma = vec_or(c, "gamma", ch, 1.0), beta = vec_or(c, "beta", ch, 0.0);
  double eps = c.f64("epsilon", 1e-5);
  std::vector<int64_t> chan = channel_of(x);
  NdArray y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    size_t k = size_t(chan[size_t(i)]);
    y.v[size_t(i)] = (x.v[size_t(i)] - mean[k]) / std::sqrt(var[k] + eps) * gamma[k] + beta[k];
  }
  c.set_nd(0, y);
}

void ref_instance_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  if (x.rank() < 3) c.fail("x must have rank >= 3");
  int64_t ch = x.shape[1];
  std::vector<bool> reduced(size_t(x.rank()), true);
  reduced[0] = reduced[1] = false;
  NdArray y = standardize(x, group_by(x.shape, reduced), c.f64("epsilon", 1e-5));
  std::vector<double> gamma = vec_or(c, "gamma", ch, 1.0), beta = vec_or(c, "beta", ch, 0.0);
  std::vector<int64_t> chan = channel_of(x);
  for (int64_t i = 0; i < y.numel(); ++i) {
    size_t k = size_t(chan[size_t(i)]);
    y.v[size_t(i)] = y.v[size_t(i)] * gamma[k] + beta[k];
  }
  c.set_nd(0, y);
}

// x / sqrt(sum(x²) + eps) over the last three dims, the leading ones batch.
void ref_l2_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  if (x.rank() < 3) c.fail("x must have rank >= 3");
  std::vector<bool> reduced(size_t(x.rank()), false);
  for (int d = x.rank() - 3; d < x.rank(); ++d) reduced[size_t(d)] = true;
  Groups g = group_by(x.shape, reduced);
  std::vector<double> ss = group_sum(x, g, [](double v, int64_t) { return v * v; });
  double eps = c.f64("epsilon", 1e-6);
  NdArray y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) y.v[size_t(i)] = x.v[size_t(i)] / std::sqrt(ss[size_t(g.group[size_t(i)])] + eps);
  c.set_nd(0, y);
}

// x / (k + alpha / size * sum of x² over `size` neighbouring channels)^beta.
// The window starts (size - 1) / 2 channels before (Caffe's convention, which
// only matters for even sizes).
void ref_local_response_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  if (x.rank() < 3) c.fail("x must have rank >= 3");
  int64_t size = c.i64("size");
  if (size < 1) c.fail("size must be >= 1");
  double alpha = c.f64("alpha", 1e-4), beta = c.f64("beta", 0.75), k = c.f64("k", 1.0);
  int64_t ch = x.shape[1], inner = shape_numel(Shape(x.shape.begin() + 2, x.shape.end()));
  NdArray y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t n = i / (ch * inner), cc = (i / inner) % ch, sp = i % inner;
    double s = 0;
    for (int64_t j = cc - (size - 1) / 2; j < cc - (size - 1) / 2 + size; ++j) {
      if (j < 0 || j >= ch) continue;
      double v = x.v[size_t((n * ch + j) * inner + sp)];
      s += v * v;
    }
    y.v[size_t(i)] = x.v[size_t(i)] / std::pow(k + alpha / double(size) * s, beta);
  }
  c.set_nd(0, y);
}

// x · rsqrt(mean(x²) + eps) · w over dim 1 of rank-4 x, the last dim otherwise.
void ref_rms_norm(RefCtx& c) {
  NdArray x = c.nd("x");
  if (x.rank() < 1) c.fail("x must have rank >= 1");
  std::vector<bool> reduced(size_t(x.rank()), false);
  reduced[x.rank() == 4 ? 1 : size_t(x.rank()) - 1] = true;
  Groups g = group_by(x.shape, reduced);
  std::vector<double> ms = group_mean(x, g, [](double v, int64_t) { return v * v; });
  std::vector<double> w = vec_or(c, "w", g.size, 1.0);
  double eps = c.f64("eps", 1e-5);
  NdArray y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i)
    y.v[size_t(i)] = x.v[size_t(i)] / std::sqrt(ms[size_t(g.group[size_t(i)])] + eps) * w[size_t(g.member[size_t(i)])];
  c.set_nd(0, y);
}

// ---- lstm -----------------------------------------------------------------

// The activations lstm accepts, with their default parameters (scaled_tanh's
// alpha = beta = 1 makes it tanh; hard_sigmoid is 0.2 x + 0.5 clamped).
double activate(const RefCtx& c, const std::string& name, double v) {
  std::string a = name;
  for (char& ch : a) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  if (a == "sigmoid") return 1.0 / (1.0 + std::exp(-v));
  if (a == "tanh" || a == "scaled_tanh") return std::tanh(v);
  if (a == "relu") return std::max(0.0, v);
  if (a == "linear") return v;
  if (a == "hard_sigmoid") return std::min(1.0, std::max(0.0, 0.2 * v + 0.5));
  c.fail("unsupported activation '" + name + "'");
}

struct LstmWeights {
  NdArray wih, whh;                     // [4H, I], [4H, H]; gate rows in i, f, o, g order
  std::vector<double> bias, peephole;   // [4H], [3H]
};

LstmWeights lstm_weights(const RefCtx& c, const std::string& sfx, int64_t in, int64_t h) {
  LstmWeights w{c.nd("weight_ih" + sfx), c.nd("weight_hh" + sfx), {}, {}};
  if (w.wih.shape != Shape{4 * h, in} || w.whh.shape != Shape{4 * h, h})
    c.fail("weight_ih" + sfx + " " + shape_str(w.wih.shape) + " / weight_hh" + sfx + " " + shape_str(w.whh.shape) +
           " must be [4*H, input_size] / [4*H, H]");
  w.bias = vec_or(c, "bias" + sfx, 4 * h, 0.0);
  w.peephole = vec_or(c, "peephole" + sfx, 3 * h, 0.0);
  return w;
}

void ref_lstm(RefCtx& c) {
  NdArray x = c.nd("x"), h0 = c.nd("initial_h"), c0 = c.nd("initial_c");
  if (x.rank() != 3) c.fail("x must be [seq, batch, input_size], got " + shape_str(x.shape));
  int64_t seq = x.shape[0], batch = x.shape[1], in = x.shape[2];
  NdArray whh0 = c.nd("weight_hh");
  if (whh0.rank() != 2) c.fail("weight_hh must have rank 2");
  int64_t h = whh0.shape[1];
  std::string dir = c.str("direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional") c.fail("unknown direction '" + dir + "'");
  int64_t dirs = dir == "bidirectional" ? 2 : 1, hd = dirs * h;
  if (h0.shape != Shape{batch, hd} || c0.shape != Shape{batch, hd})
    c.fail("initial_h / initial_c must be [batch, DIRECTIONS*H] = " + shape_str({batch, hd}));
  bool out_seq = c.flag("output_sequence", false);
  std::string ract = c.str("recurrent_activation", "sigmoid"), cact = c.str("cell_activation", "tanh"),
              act = c.str("activation", "tanh");
  bool has_clip = c.has("clip");
  double clip = has_clip ? c.f64("clip") : 0.0;

  NdArray ys({out_seq ? seq : 1, batch, hd}), hn({batch, hd}), cn({batch, hd});
  for (int64_t d = 0; d < dirs; ++d) {
    LstmWeights w = lstm_weights(c, d == 1 ? "_back" : "", in, h);
    bool backward = dir == "reverse" || d == 1;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> hs(static_cast<size_t>(h)), cs(static_cast<size_t>(h));
      for (int64_t j = 0; j < h; ++j) {
        hs[size_t(j)] = h0.v[size_t(b * hd + d * h + j)];
        cs[size_t(j)] = c0.v[size_t(b * hd + d * h + j)];
      }
      for (int64_t step = 0; step < seq; ++step) {
        int64_t t = backward ? seq - 1 - step : step;
        // gate pre-activations: W_ih x_t + W_hh h + bias, rows i, f, o, g
        std::vector<double> z(size_t(4 * h));
        for (int64_t r = 0; r < 4 * h; ++r) {
          double s = w.bias[size_t(r)];
          for (int64_t k = 0; k < in; ++k) s += w.wih.v[size_t(r * in + k)] * x.v[size_t((t * batch + b) * in + k)];
          for (int64_t k = 0; k < h; ++k) s += w.whh.v[size_t(r * h + k)] * hs[size_t(k)];
          z[size_t(r)] = s;
        }
        for (int64_t j = 0; j < h; ++j) {
          size_t u = size_t(j);
          double ig = activate(c, ract, z[u] + w.peephole[u] * cs[u]);
          double fg = activate(c, ract, z[size_t(h) + u] + w.peephole[size_t(h) + u] * cs[u]);
          double gg = activate(c, cact, z[size_t(3 * h) + u]);
          double cnew = fg * cs[u] + ig * gg;
          if (has_clip) cnew = std::min(clip, std::max(-clip, cnew));
          // the output gate's peephole sees the new cell state
          double og = activate(c, ract, z[size_t(2 * h) + u] + w.peephole[size_t(2 * h) + u] * cnew);
          cs[u] = cnew;
          hs[u] = og * activate(c, act, cnew);
        }
        // "reverse" emits steps in processing order; a bidirectional lstm's
        // backward half is aligned with the input positions (as PyTorch's).
        int64_t pos = dir == "reverse" ? step : t;
        if (out_seq)
          for (int64_t j = 0; j < h; ++j) ys.v[size_t((pos * batch + b) * hd + d * h + j)] = hs[size_t(j)];
      }
      for (int64_t j = 0; j < h; ++j) {
        hn.v[size_t(b * hd + d * h + j)] = hs[size_t(j)];
        cn.v[size_t(b * hd + d * h + j)] = cs[size_t(j)];
        if (!out_seq) ys.v[size_t(b * hd + d * h + j)] = hs[size_t(j)];
      }
    }
  }
  c.set_nd(0, ys);
  c.set_nd(1, hn);
  c.set_nd(2, cn);
}

// ---- scaled_dot_product_attention ------------------------------------------

void ref_sdpa(RefCtx& c) {
  NdArray q = c.nd("query"), k = c.nd("key"), v = c.nd("value");
  int r = q.rank();
  if (r < 3 || k.rank() != r || v.rank() != r) c.fail("query, key and value must have one rank >= 3");
  Shape batch(q.shape.begin(), q.shape.end() - 2);
  if (Shape(k.shape.begin(), k.shape.end() - 2) != batch || Shape(v.shape.begin(), v.shape.end() - 2) != batch)
    c.fail("query, key and value must have the same batch dims");
  int64_t L = q.shape[size_t(r) - 2], E = q.shape[size_t(r) - 1], S = k.shape[size_t(r) - 2],
          EV = v.shape[size_t(r) - 1];
  if (k.shape[size_t(r) - 1] != E || v.shape[size_t(r) - 2] != S)
    c.fail("key must be [*B, S, E] and value [*B, S, EV] for query [*B, L, E]");
  Shape scores_shape = batch;
  scores_shape.push_back(L);
  scores_shape.push_back(S);
  // A bool mask keeps where true; a float mask is added to the scores.
  NdArray mask;
  bool has_mask = c.has("attn_mask"), bool_mask = false;
  if (has_mask) {
    mask = c.nd("attn_mask");
    bool_mask = c.in("attn_mask").dtype() == DType::Bool;
    if (mask.rank() < 1 || bcast(c, scores_shape, mask.shape) != scores_shape)
      c.fail("attn_mask " + shape_str(mask.shape) + " does not broadcast to the scores " + shape_str(scores_shape));
  }
  Shape os = batch;
  os.push_back(L);
  os.push_back(EV);
  NdArray out(os);
  double scale = 1.0 / std::sqrt(double(E));
  for (int64_t b = 0; b < shape_numel(batch); ++b)
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> s(static_cast<size_t>(S));
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += q.v[size_t((b * L + i) * E + e)] * k.v[size_t((b * S + j) * E + e)];
        s[size_t(j)] = dot * scale;
        if (has_mask) {
          double m = mask.v[size_t(broadcast_index(unravel((b * L + i) * S + j, scores_shape), scores_shape, mask.shape))];
          s[size_t(j)] += bool_mask ? (m != 0 ? 0.0 : -std::numeric_limits<double>::infinity()) : m;
        }
      }
      // softmax; a row masked out entirely gives NaN, as NumPy's does
      double mx = *std::max_element(s.begin(), s.end()), den = 0;
      for (double& e : s) den += (e = std::exp(e - mx));
      for (int64_t ev = 0; ev < EV; ++ev) {
        double acc = 0;
        for (int64_t j = 0; j < S; ++j) acc += s[size_t(j)] / den * v.v[size_t((b * S + j) * EV + ev)];
        out.v[size_t((b * L + i) * EV + ev)] = acc;
      }
    }
  c.set_nd(0, out);
}

}  // namespace

void register_ref_linalg_ops() {
  register_ref("matmul", ref_matmul);
  register_ref("linear", ref_linear);
  register_ref("conv", ref_conv);
  register_ref("conv_transpose", ref_conv_transpose);
  register_ref("layer_norm", ref_layer_norm);
  register_ref("batch_norm", ref_batch_norm);
  register_ref("instance_norm", ref_instance_norm);
  register_ref("l2_norm", ref_l2_norm);
  register_ref("local_response_norm", ref_local_response_norm);
  register_ref("rms_norm", ref_rms_norm);
  register_ref("lstm", ref_lstm);
  register_ref("scaled_dot_product_attention", ref_sdpa);
}

}  // namespace milrt::ref
