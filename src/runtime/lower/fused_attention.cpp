// Lowering of milrt_softmax, milrt_attention, milrt_attention_grad and
// scaled_dot_product_attention onto kernels/generic/softmax.h, attention.h
// and attention_backward.h; under CompileOptions::matmul_precision bf16 on
// the AMX path, both attention steps onto kernels/attention_amx.h instead,
// and on the AVX-512 (or AMX) path of a CPU with avx512_bf16 onto
// kernels/attention_avx512_bf16.h.
//
// Broadcasting is resolved here once: per output batch the element offsets
// of q, k, v and the mask, and for milrt_softmax the mask offset of every
// line. The attention kernels run one (batch, head) slice per thread, each
// with a per-thread scratch buffer that only grows.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "kernels/attention_amx.h"
#include "kernels/attention_avx512_bf16.h"
#include "kernels/cpu_features.h"
#include "kernels/generic/attention.h"
#include "kernels/generic/attention_backward.h"
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

// Shapes and per-batch element offsets of an attention op's operands, the
// batch being `batch` (the output's leading dims).
struct AttentionGeom {
  kernels::AttentionShape sh;
  kernels::AttentionMask mask;  // kind and strides; data set per batch at run time
  int iq = -1, ik = -1, iv = -1, im = -1;
  size_t mask_elem = sizeof(float);
  std::vector<int64_t> qo, ko, vo, mo;

  const kernels::AttentionMask& mask_at(const Frame& f, size_t b, kernels::AttentionMask& mk) const {
    mk = mask;
    if (im >= 0) mk.data = static_cast<const char*>(f.ptr[size_t(im)]) + size_t(mo[b]) * mask_elem;
    return mk;
  }
};

AttentionGeom attention_geom(const Op& op, LowerCtx& ctx, const AttentionInputs& keys, float scale, bool causal,
                             const Shape& batch) {
  ValueRef q = ctx.input(op, keys.q), k = ctx.input(op, keys.k), v = ctx.input(op, keys.v);
  if (q.shape.size() < 2 || k.shape.size() < 2 || v.shape.size() < 2)
    throw_op_error(op, "q, k and v must have rank >= 2");
  auto back = [](const Shape& s, size_t i) { return s[s.size() - i]; };
  AttentionGeom g;
  g.sh = {back(q.shape, 2), back(k.shape, 2), back(q.shape, 1), back(v.shape, 1), scale, causal,
          ctx.bf16_matmuls ? kernels::GemmMath::bf16 : kernels::GemmMath::fp32};
  if (back(k.shape, 1) != g.sh.d || back(v.shape, 2) != g.sh.tk)
    throw_op_error(op, "k must be [..., Tk, D] and v [..., Tk, Dv] for q [..., Tq, D]");
  auto offsets_of = [&](const ValueRef& x, const char* what) {
    Shape target = batch;
    target.push_back(back(x.shape, 2));
    target.push_back(back(x.shape, 1));
    return batch_offsets(batch, bcast_strides(op, x.shape, target, what));
  };
  g.qo = offsets_of(q, "q"), g.ko = offsets_of(k, "k"), g.vo = offsets_of(v, "v");
  g.iq = q.id, g.ik = k.id, g.iv = v.id;
  if (ctx.has(op, keys.mask)) {
    ValueRef m = ctx.input(op, keys.mask);
    g.im = m.id;
    Shape scores = batch;
    scores.push_back(g.sh.tq);
    scores.push_back(g.sh.tk);
    std::vector<int64_t> st = bcast_strides(op, m.shape, scores, "mask");
    g.mask.kind = m.dtype == DType::Bool ? kernels::AttentionMaskKind::keep : kernels::AttentionMaskKind::additive;
    g.mask.row_stride = st[st.size() - 2];
    g.mask.col_stride = st[st.size() - 1];
    g.mo = batch_offsets(batch, st);
    if (g.mask.kind == kernels::AttentionMaskKind::keep) g.mask_elem = 1;
  }
  return g;
}

// Multiply-adds of both products over every score of one slice (a causal
// kernel skips about half of them).
double attention_slice_macs(const kernels::AttentionShape& sh) {
  return double(sh.tq) * double(sh.tk) * double(sh.d + sh.dv);
}
// Bytes of K and V one slice reads (fp32 in the plan).
double attention_slice_kv_bytes(const kernels::AttentionShape& sh) {
  return double(sh.tk) * double(sh.d + sh.dv) * sizeof(float);
}
// Useful FLOPs: both products over the (query, key) pairs a query sees,
// T(T+1)/2 per head when causal with Tq = Tk, as `milrt bench kernels`
// counts them (not the full Tq·Tk, which would report a causal kernel at
// twice its real rate).
double attention_flops(const AttentionGeom& g) {
  const kernels::AttentionShape& sh = g.sh;
  double pairs = double(sh.tq) * double(sh.tk);
  if (sh.causal) {
    pairs = 0;
    for (int64_t i = 0; i < sh.tq; ++i) pairs += double(std::clamp<int64_t>(i + (sh.tk - sh.tq) + 1, 0, sh.tk));
  }
  return 2.0 * double(g.qo.size()) * pairs * double(sh.d + sh.dv);
}

// Which kernels run an attention op's steps (forward and backward alike).
// Under CompileOptions::matmul_precision bf16: the AMX kernels on the AMX path
// with a head size they take (kernels/attention_amx.h); else, on the AVX-512
// or AMX path of a CPU with avx512_bf16, the vdpbf16ps kernels
// (kernels/attention_avx512_bf16.h; MILRT_ISA=avx2 or generic keeps them
// off); else the vector kernels, whose products take the same bf16 operands
// through the GEMM. All of them round the same operands and accumulate in
// fp32.
enum class AttentionKernels { vector, amx, avx512_bf16 };

AttentionKernels attention_kernels(const LowerCtx& ctx, const AttentionGeom& g) {
  if (!ctx.bf16_matmuls) return AttentionKernels::vector;
  const kernels::Isa isa = kernels::current_isa();
  if (isa == kernels::Isa::amx && kernels::attention_amx_usable() && kernels::attention_amx_supports(g.sh, g.mask))
    return AttentionKernels::amx;
  if ((isa == kernels::Isa::avx512 || isa == kernels::Isa::amx) && kernels::attention_avx512_bf16_usable() &&
      kernels::attention_avx512_bf16_supports(g.sh, g.mask))
    return AttentionKernels::avx512_bf16;
  return AttentionKernels::vector;
}

// What `milrt inspect` and --profile call a step of `base` on these kernels.
std::string step_name(const char* base, AttentionKernels which, bool bf16) {
  const char* suffix = which == AttentionKernels::amx           ? "[bf16][amx]"
                       : which == AttentionKernels::avx512_bf16 ? "[bf16][avx512]"
                       : bf16                                   ? "[bf16]"
                                                                : "";
  return std::string(base) + suffix;
}

std::unique_ptr<Step> lower_attention_with(const Op& op, LowerCtx& ctx, const AttentionInputs& keys, float scale,
                                           bool causal) {
  ValueRef o = ctx.output(op);
  auto g = std::make_shared<AttentionGeom>(
      attention_geom(op, ctx, keys, scale, causal, Shape(o.shape.begin(), o.shape.end() - 2)));
  const int io = o.id, ilse = op.outputs.size() == 2 ? ctx.output(op, 1).id : -1;
  const AttentionKernels which = attention_kernels(ctx, *g);
  const size_t scratch_floats =
      which == AttentionKernels::amx           ? kernels::attention_amx_scratch_floats(g->sh)
      : which == AttentionKernels::avx512_bf16 ? kernels::attention_avx512_bf16_scratch_floats(g->sh)
                                               : kernels::attention_scratch_floats(g->sh);
  const auto kernel = which == AttentionKernels::amx           ? kernels::attention_bf16_amx
                      : which == AttentionKernels::avx512_bf16 ? kernels::attention_bf16_avx512
                                                               : kernels::attention_f32;
  const std::string name = step_name("attention", which, ctx.bf16_matmuls);
  const double slice_macs = attention_slice_macs(g->sh), slice_kv_bytes = attention_slice_kv_bytes(g->sh);
  auto step = make_step(name, op, [=](const Frame& f) {
    const float *pq = f.at<float>(g->iq), *pk = f.at<float>(g->ik), *pv = f.at<float>(g->iv);
    float* po = f.at<float>(io);
    float* plse = ilse >= 0 ? f.at<float>(ilse) : nullptr;
    // Heads on threads: one head's tiles are too small for the GEMM's own threads.
    kernels::for_each_attention_slice(int64_t(g->qo.size()), slice_macs, slice_kv_bytes, [&](int64_t b) {
      kernels::AttentionMask mk;
      kernel(pq + g->qo[size_t(b)], pk + g->ko[size_t(b)], pv + g->vo[size_t(b)], po + b * g->sh.tq * g->sh.dv, g->sh,
             g->mask_at(f, size_t(b), mk), kernels::attention_thread_scratch(scratch_floats),
             plse ? plse + b * g->sh.tq : nullptr);
    });
  });
  step->info.flops = attention_flops(*g);
  return step;
}

// dq, dk, dv of every batch (the broadcast one: outputs are not summed over
// broadcast dims here, so no two slices write the same rows).
std::unique_ptr<Step> lower_milrt_attention_grad(const Op& op, LowerCtx& ctx) {
  ValueRef dq = ctx.output(op, 0), dk = ctx.output(op, 1), dv = ctx.output(op, 2);
  auto g = std::make_shared<AttentionGeom>(
      attention_geom(op, ctx, {"q", "k", "v", "mask"}, float(ctx.const_float(op, "scale", 1.0)),
                     ctx.const_bool(op, "causal", false), Shape(dq.shape.begin(), dq.shape.end() - 2)));
  ValueRef o = ctx.input(op, "o"), dout = ctx.input(op, "dout");
  if (o.shape != dout.shape || shape_numel(o.shape) != int64_t(g->qo.size()) * g->sh.tq * g->sh.dv)
    throw_op_error(op, "o and dout must have the forward's output shape");
  int ilse = -1;
  if (ctx.has(op, "lse")) {
    ValueRef lse = ctx.input(op, "lse");
    if (lse.numel() != int64_t(g->qo.size()) * g->sh.tq) throw_op_error(op, "lse must have one value per query row");
    ilse = lse.id;
  }
  const int io = o.id, idout = dout.id, idq = dq.id, idk = dk.id, idv = dv.id;
  const double slice_macs = attention_slice_macs(g->sh), slice_kv_bytes = attention_slice_kv_bytes(g->sh);
  const AttentionKernels which = attention_kernels(ctx, *g);
  const auto kernel = which == AttentionKernels::amx           ? kernels::attention_backward_bf16_amx
                      : which == AttentionKernels::avx512_bf16 ? kernels::attention_backward_bf16_avx512
                                                               : kernels::attention_backward_f32;
  const std::string name = step_name("attention_grad", which, ctx.bf16_matmuls);
  auto step = make_step(name, op, [=](const Frame& f) {
    const kernels::AttentionShape& sh = g->sh;
    const float *pq = f.at<float>(g->iq), *pk = f.at<float>(g->ik), *pv = f.at<float>(g->iv);
    const float *po = f.at<float>(io), *pdo = f.at<float>(idout);
    const float* plse = ilse >= 0 ? f.at<float>(ilse) : nullptr;
    float *pdq = f.at<float>(idq), *pdk = f.at<float>(idk), *pdv = f.at<float>(idv);
    kernels::for_each_attention_slice(int64_t(g->qo.size()), 2 * slice_macs, 2 * slice_kv_bytes, [&](int64_t b) {
      kernels::AttentionMask mk;
      kernel(pq + g->qo[size_t(b)], pk + g->ko[size_t(b)], pv + g->vo[size_t(b)],
             po + b * sh.tq * sh.dv, pdo + b * sh.tq * sh.dv, plse ? plse + b * sh.tq : nullptr,
             pdq + b * sh.tq * sh.d, pdk + b * sh.tk * sh.d, pdv + b * sh.tk * sh.dv, sh, g->mask_at(f, size_t(b), mk));
    });
  });
  // The four products the op-by-op backward does (Pᵀ·dO, dO·Vᵀ, dS·K,
  // dSᵀ·Q); recomputing Q·Kᵀ (twice, with the log-sum-exp pass) is not
  // counted as useful work.
  step->info.flops = 2 * attention_flops(*g);
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
  register_lowering("milrt_attention_grad", lower_milrt_attention_grad);
  register_lowering("scaled_dot_product_attention", lower_sdpa);
}

}  // namespace milrt::rt
