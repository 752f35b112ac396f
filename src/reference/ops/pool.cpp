// Reference implementations of the pooling and upsampling ops: max_pool,
// avg_pool, l2_pool, upsample_nearest_neighbor, upsample_bilinear.
//
// Plain loops over fp64 arrays; semantics follow coremltools (iOS15/pool.py,
// iOS15 and iOS16 image_resizing.py) and PyTorch where coremltools is silent:
//  - A window of output o along a spatial dim covers input positions
//    [o·S - B, o·S - B + K) (B: the padding before). Padding never holds a
//    value: max_pool and l2_pool see only input elements (a window of padding
//    alone gives -inf / 0). avg_pool sums the input elements and divides by
//    their count when exclude_padding_from_average, else by the window's
//    size clipped to the padded extent [-B, D + A) (ceil_mode windows may
//    pass it, as in PyTorch's count_include_pad).
//  - upsample_nearest_neighbor: output i reads input floor(i · D_in / D_out).
//  - upsample_bilinear reads input coordinate
//      align_corners:       i · (D_in - 1) / (D_out - 1)   (0 when D_out = 1)
//      half_pixel_centers:  (i + 0.5) · D_in / D_out - 0.5, clamped to [0, D_in - 1]
//      neither:             i · D_in / D_out, clamped to [0, D_in - 1]
//    (half_pixel_centers defaults to !align_corners) and interpolates the
//    two neighbours linearly per axis.
#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/ref_ops.h"

namespace milrt::ref {
namespace {

enum class Pool { Max, Avg, L2 };

void ref_pool(RefCtx& c, Pool kind) {
  NdArray x = c.nd("x");
  if (x.rank() < 3 || x.rank() > 5) c.fail("x must have rank 3 to 5, got " + shape_str(x.shape));
  const size_t n = size_t(x.rank() - 2);
  std::vector<int64_t> k = c.ints("kernel_sizes");
  std::vector<int64_t> s = c.ints("strides", std::vector<int64_t>(n, 1));
  std::string pad_type = c.str("pad_type", "valid");
  std::vector<int64_t> pad = pad_type == "custom" ? c.ints("pad", std::vector<int64_t>(2 * n, 0))
                                                  : std::vector<int64_t>(2 * n, 0);
  bool ceil = c.flag("ceil_mode", false);
  bool exclude = kind == Pool::Avg && c.flag("exclude_padding_from_average", false);
  if (k.size() != n || s.size() != n || pad.size() != 2 * n)
    c.fail("kernel_sizes, strides and pad must have one (pad: two) value per spatial dim");
  Shape in(x.shape.begin() + 2, x.shape.end()), out;
  std::vector<int64_t> before(n), after(n);
  for (size_t i = 0; i < n; ++i) {
    if (k[i] < 1 || s[i] < 1) c.fail("kernel_sizes and strides must be >= 1");
    int64_t total = 0;
    if (pad_type == "same" || pad_type == "same_lower") {
      total = std::max<int64_t>(0, s[i] * ((in[i] + s[i] - 1) / s[i]) - in[i] + k[i] - s[i]);
      before[i] = pad_type == "same" ? total / 2 : total - total / 2;
    } else if (pad_type == "custom") {
      total = pad[2 * i] + pad[2 * i + 1];
      before[i] = pad[2 * i];
    } else if (pad_type != "valid") {
      c.fail("unknown pad_type '" + pad_type + "'");
    }
    after[i] = total - before[i];
    double span = double(in[i] + total - k[i] + (ceil ? s[i] - 1 : 0));
    int64_t o = int64_t(std::floor(span / double(s[i]))) + 1;
    if (ceil && total > 0 && double((o - 1) * s[i]) >= double(in[i]) + double(total) / 2) --o;
    if (o <= 0) c.fail("spatial dim " + std::to_string(i) + " gets output size " + std::to_string(o));
    out.push_back(o);
  }
  Shape os = {x.shape[0], x.shape[1]};
  os.insert(os.end(), out.begin(), out.end());
  NdArray y(os);
  const int64_t planes = x.shape[0] * x.shape[1], nin = shape_numel(in), nout = shape_numel(out);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t f = 0; f < nout; ++f) {
      // Output multi-index, row-major.
      std::vector<int64_t> o(n);
      for (size_t i = n, r = size_t(f); i-- > 0;) o[i] = int64_t(r) % out[i], r /= size_t(out[i]);
      double acc = kind == Pool::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t count = 0, padded = 1;
      for (size_t i = 0; i < n; ++i) {
        int64_t lo = o[i] * s[i] - before[i];
        int64_t hi = std::min(lo + k[i], in[i] + after[i]);
        padded *= hi - lo;
      }
      for (int64_t w = 0; w < shape_numel(Shape(k.begin(), k.end())); ++w) {
        int64_t flat = 0;
        bool inside = true;
        for (size_t i = 0; i < n; ++i) {
          int64_t stride_after = 1;
          for (size_t j = i + 1; j < n; ++j) stride_after *= k[j];
          int64_t ki = (w / stride_after) % k[i];
          int64_t pos = o[i] * s[i] - before[i] + ki;
          inside = inside && pos >= 0 && pos < in[i];
          flat = flat * in[i] + pos;
        }
        if (!inside) continue;
        double v = x.v[size_t(p * nin + flat)];
        ++count;
        if (kind == Pool::Max) acc = std::max(acc, v);
        else if (kind == Pool::Avg) acc += v;
        else acc += v * v;
      }
      if (kind == Pool::Avg) {
        int64_t div = exclude ? count : padded;
        acc = div > 0 ? acc / double(div) : 0.0;
      } else if (kind == Pool::L2) {
        acc = std::sqrt(acc);
      }
      y.v[size_t(p * nout + f)] = acc;
    }
  c.set_nd(0, y);
}

double scale(const RefCtx& c, const std::string& key) { return c.has(key) ? c.f64(key) : 1.0; }

// The input coordinate output i of `out` samples along an axis of `in`.
double source_coord(int64_t i, int64_t in, int64_t out, bool align, bool half) {
  double v;
  if (align) v = out > 1 ? double(i) * double(in - 1) / double(out - 1) : 0.0;
  else if (half) v = (double(i) + 0.5) * double(in) / double(out) - 0.5;
  else v = double(i) * double(in) / double(out);
  return std::min(std::max(v, 0.0), double(in - 1));
}

void ref_upsample(RefCtx& c, bool bilinear) {
  NdArray x = c.nd("x");
  if (x.rank() < 3) c.fail("x must have rank >= 3, got " + shape_str(x.shape));
  const size_t r = size_t(x.rank());
  const int64_t h = x.shape[r - 2], w = x.shape[r - 1];
  const int64_t ho = int64_t(std::floor(double(h) * scale(c, "scale_factor_height")));
  const int64_t wo = int64_t(std::floor(double(w) * scale(c, "scale_factor_width")));
  if (ho < 1 || wo < 1) c.fail("the scale factors give an empty output");
  const bool align = bilinear && c.flag("align_corners", true);
  const bool half = bilinear && c.flag("half_pixel_centers", !align);
  Shape os = x.shape;
  os[r - 2] = ho;
  os[r - 1] = wo;
  NdArray y(os);
  const int64_t planes = x.numel() / (h * w);
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t i = 0; i < ho; ++i)
      for (int64_t j = 0; j < wo; ++j) {
        const double* src = x.v.data() + p * h * w;
        double v;
        if (!bilinear) {
          int64_t si = std::min(int64_t(std::floor(double(i) * double(h) / double(ho))), h - 1);
          int64_t sj = std::min(int64_t(std::floor(double(j) * double(w) / double(wo))), w - 1);
          v = src[si * w + sj];
        } else {
          double cy = source_coord(i, h, ho, align, half), cx = source_coord(j, w, wo, align, half);
          int64_t y0 = int64_t(std::floor(cy)), x0 = int64_t(std::floor(cx));
          int64_t y1 = std::min(y0 + 1, h - 1), x1 = std::min(x0 + 1, w - 1);
          double fy = cy - double(y0), fx = cx - double(x0);
          double top = src[y0 * w + x0] * (1 - fx) + src[y0 * w + x1] * fx;
          double bottom = src[y1 * w + x0] * (1 - fx) + src[y1 * w + x1] * fx;
          v = top * (1 - fy) + bottom * fy;
        }
        y.v[size_t((p * ho + i) * wo + j)] = v;
      }
  c.set_nd(0, y);
}

}  // namespace

void register_ref_pool_ops() {
  register_ref("max_pool", [](RefCtx& c) { ref_pool(c, Pool::Max); });
  register_ref("avg_pool", [](RefCtx& c) { ref_pool(c, Pool::Avg); });
  register_ref("l2_pool", [](RefCtx& c) { ref_pool(c, Pool::L2); });
  register_ref("upsample_nearest_neighbor", [](RefCtx& c) { ref_upsample(c, false); });
  register_ref("upsample_bilinear", [](RefCtx& c) { ref_upsample(c, true); });
}

}  // namespace milrt::ref
