// Lowering of milrt_softmax, milrt_attention and scaled_dot_product_attention
// onto kernels/generic/softmax.h and kernels/generic/attention.h.
//
// Broadcasting is resolved here once: per output batch the element offsets
// of q, k, v and the mask, and for milrt_softmax the mask offset of every
// line. The attention kernel's scratch is allocated here, once per step.
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/generic/attention.h"
#include "kernels/generic/softmax.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

// Element strides of `src` read as if broadcast to `target` (right-aligned;
// 0 along broadcast dims). An error at `op` when it does not broadcast.
std::vector<int64_t> bcast_strides(const Op& op, const Shape& src, const Shape& target, const std::string& what) {
  if (src.size() > target.size()) throw_op_error(op, what + " " + shape_str(src) + " does not broadcast to " + shape_str(target));
  std::vector<int64_t> st(target.size(), 0);
  int64_t s = 1;
  for (size_t i = src.size(); i-- > 0;) {
    size_t t = i + target.size() - src.size();
    if (src[i] != target[t] && src[i] != 1)
      throw_op_error(op, what + " " + shape_str(src) + " does not broadcast to " + shape_str(target));
    st[t] = src[i] == 1 ? 0 : s;
    s *= src[i];
  }
  return st;
}

// Per index of the batch dims `batch` (the leading dims of `target`), the
// element offset given by `strides`.
std::vector<int64_t> batch_offsets(const Shape& batch, const std::vector<int64_t>& strides) {
  std::vector<int64_t> r;
  for (int64_t b = 0; b < shape_numel(batch); ++b) {
    int64_t rem = b, off = 0;
    for (size_t i = batch.size(); i-- > 0;) {
      off += (rem % batch[i]) * strides[i];
      rem /= batch[i];
    }
    r.push_back(off);
  }
  return r;
}

std::unique_ptr<Step> lower_milrt_softmax(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  const int64_t rank = int64_t(x.shape.size());
  int64_t axis = norm_axis(op, ctx.const_int(op, "axis", -1), rank);
  float scale = float(ctx.const_float(op, "scale", 1.0));
  int64_t outer, n, inner;
  split_dims(x.shape, axis, axis, outer, n, inner);
  int ix = x.id, io = o.id, im = -1;
  auto offsets = std::make_shared<std::vector<int64_t>>();
  int64_t mstride = 0;
  if (ctx.has(op, "mask")) {
    ValueRef m = ctx.input(op, "mask");
    im = m.id;
    std::vector<int64_t> st = bcast_strides(op, m.shape, x.shape, "mask");
    mstride = st[size_t(axis)];
    // Offsets of line (o, i): o over the dims before the axis, i over those after.
    Shape before(x.shape.begin(), x.shape.begin() + axis), after(x.shape.begin() + axis + 1, x.shape.end());
    std::vector<int64_t> ob = batch_offsets(before, std::vector<int64_t>(st.begin(), st.begin() + axis));
    std::vector<int64_t> ib = batch_offsets(after, std::vector<int64_t>(st.begin() + axis + 1, st.end()));
    for (int64_t a : ob)
      for (int64_t b : ib) offsets->push_back(a + b);
  }
  return make_step("softmax", op, [=](const Frame& f) {
    kernels::SoftmaxMask mask;
    if (im >= 0) mask = {f.at<float>(im), offsets->data(), mstride};
    kernels::scaled_masked_softmax_f32(f.at<float>(ix), f.at<float>(io), outer, n, inner, scale, mask);
  });
}

struct AttentionInputs {
  const char *q, *k, *v, *mask;
};

std::unique_ptr<Step> lower_attention_with(const Op& op, LowerCtx& ctx, const AttentionInputs& keys, float scale,
                                           bool causal) {
  ValueRef q = ctx.input(op, keys.q), k = ctx.input(op, keys.k), v = ctx.input(op, keys.v), o = ctx.output(op);
  if (q.shape.size() < 2 || k.shape.size() < 2 || v.shape.size() < 2)
    throw_op_error(op, "q, k and v must have rank >= 2");
  auto back = [](const Shape& s, size_t i) { return s[s.size() - i]; };
  kernels::AttentionShape sh{back(q.shape, 2), back(k.shape, 2), back(q.shape, 1), back(v.shape, 1), scale, causal};
  if (back(k.shape, 1) != sh.d || back(v.shape, 2) != sh.tk)
    throw_op_error(op, "k must be [..., Tk, D] and v [..., Tk, Dv] for q [..., Tq, D]");
  Shape batch(o.shape.begin(), o.shape.end() - 2);
  auto offsets_of = [&](const ValueRef& x, const char* what) {
    Shape target = batch;
    target.push_back(back(x.shape, 2));
    target.push_back(back(x.shape, 1));
    return batch_offsets(batch, bcast_strides(op, x.shape, target, what));
  };
  std::vector<int64_t> qo = offsets_of(q, "q"), ko = offsets_of(k, "k"), vo = offsets_of(v, "v"), mo;
  kernels::AttentionMask mask;
  int im = -1;
  if (ctx.has(op, keys.mask)) {
    ValueRef m = ctx.input(op, keys.mask);
    im = m.id;
    Shape scores = batch;
    scores.push_back(sh.tq);
    scores.push_back(sh.tk);
    std::vector<int64_t> st = bcast_strides(op, m.shape, scores, "mask");
    mask.kind = m.dtype == DType::Bool ? kernels::AttentionMaskKind::keep : kernels::AttentionMaskKind::additive;
    mask.row_stride = st[st.size() - 2];
    mask.col_stride = st[st.size() - 1];
    mo = batch_offsets(batch, st);
  }
  auto scratch = std::make_shared<std::vector<float>>(kernels::attention_scratch_floats(sh));
  int iq = q.id, ik = k.id, iv = v.id, io = o.id;
  size_t elem = im >= 0 && mask.kind == kernels::AttentionMaskKind::keep ? 1 : sizeof(float);
  const int64_t out_step = sh.tq * sh.dv;
  auto step = make_step("attention", op, [=](const Frame& f) {
    const float *pq = f.at<float>(iq), *pk = f.at<float>(ik), *pv = f.at<float>(iv);
    float* po = f.at<float>(io);
    kernels::AttentionMask mk = mask;
    for (size_t b = 0; b < qo.size(); ++b) {
      if (im >= 0) mk.data = static_cast<const char*>(f.ptr[size_t(im)]) + size_t(mo[b]) * elem;
      kernels::attention_f32(pq + qo[b], pk + ko[b], pv + vo[b], po + int64_t(b) * out_step, sh, mk, scratch->data());
    }
  });
  // Both products over every score (a causal kernel skips about half of them).
  step->info.flops = 2.0 * double(qo.size()) * double(sh.tq) * double(sh.tk) * double(sh.d + sh.dv);
  return step;
}

std::unique_ptr<Step> lower_milrt_attention(const Op& op, LowerCtx& ctx) {
  return lower_attention_with(op, ctx, {"q", "k", "v", "mask"}, float(ctx.const_float(op, "scale", 1.0)),
                              ctx.const_bool(op, "causal", false));
}

// ios18 scaled_dot_product_attention: scale 1/sqrt(D), no causal flag.
std::unique_ptr<Step> lower_sdpa(const Op& op, LowerCtx& ctx) {
  ValueRef q = ctx.input(op, "query");
  if (q.shape.empty()) throw_op_error(op, "query must have rank >= 3");
  float scale = float(1.0 / std::sqrt(double(q.shape.back())));
  return lower_attention_with(op, ctx, {"query", "key", "value", "attn_mask"}, scale, false);
}

}  // namespace

void register_fused_attention_lowerings() {
  register_lowering("milrt_softmax", lower_milrt_softmax);
  register_lowering("milrt_attention", lower_milrt_attention);
  register_lowering("scaled_dot_product_attention", lower_sdpa);
}

}  // namespace milrt::rt
