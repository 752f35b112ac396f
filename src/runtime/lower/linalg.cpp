// Lowering of matmul and linear (and, through lower_gemm, milrt_gemm) onto
// kernels::gemm and kernels::weight_gemm.
//
// Shapes are resolved here once: per output batch the element offsets of the
// A and B operands. A constant B (weights) is packed at compile time into the
// kernel's layout (kernels::PackedB, from fp32 or straight from bf16), one
// per distinct B batch. When B has no batch dims and A is not transposed, the
// batches of A are consecutive rows and the whole product is one GEMM with
// batches·M rows. A weight W [N, K] kept compact (int8 with block scales
// always; bf16/fp16 for products of a few rows) is read in place by
// weight_gemm: the plan holds no wider copy of it. Where
// kernels::choose_gemm_backend picks oneDNN, the dense products (packed
// constant B, variable B) run on an OnednnGemm primitive instead, created here
// once per distinct B; a description oneDNN cannot serve well falls back to
// the own kernels. Inside compile() the choice is the GemmTuner's (measured
// per product shape and cached; the own kernels only when deterministic).
#include "runtime/lower/gemm_step.h"

#include <algorithm>
#include <vector>

#include "kernels/gemm_backend.h"
#include "runtime/gemm_tuning.h"
#include "kernels/onednn/onednn_gemm.h"
#include "kernels/weight_gemm.h"
#include "milrt/tensor.h"

namespace milrt::rt {
namespace {

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  bool tx = false, ty = false;
  std::vector<int64_t> xoff;   // per output batch: element offset into A
  std::vector<int64_t> ybat;   // per output batch: B batch index
  int64_t y_batches = 1;
};

GemmShape gemm_shape(const Op& op, Shape xs, Shape ys, bool tx, bool ty) {
  if (xs.empty() || ys.empty()) throw_op_error(op, "matmul operands must have rank >= 1");
  // Rank-1 operands: a row vector on the left, a column on the right (flags do not apply).
  if (xs.size() == 1) { xs.insert(xs.begin(), 1); tx = false; }
  if (ys.size() == 1) { ys.push_back(1); ty = false; }
  GemmShape g;
  g.tx = tx;
  g.ty = ty;
  g.m = tx ? xs[xs.size() - 1] : xs[xs.size() - 2];
  g.k = tx ? xs[xs.size() - 2] : xs[xs.size() - 1];
  g.n = ty ? ys[ys.size() - 2] : ys[ys.size() - 1];
  const int64_t ky = ty ? ys[ys.size() - 1] : ys[ys.size() - 2];
  if (ky != g.k) throw_op_error(op, "inner dimensions do not match: " + shape_str(xs) + " x " + shape_str(ys));
  Shape xb(xs.begin(), xs.end() - 2), yb(ys.begin(), ys.end() - 2);
  const size_t r = std::max(xb.size(), yb.size());
  xb.insert(xb.begin(), r - xb.size(), 1);
  yb.insert(yb.begin(), r - yb.size(), 1);
  int64_t batches = 1;
  for (size_t i = 0; i < r; ++i) {
    if (xb[i] != yb[i] && xb[i] != 1 && yb[i] != 1)
      throw_op_error(op, "batch dims do not broadcast: " + shape_str(xs) + " x " + shape_str(ys));
    batches *= std::max(xb[i], yb[i]);
    g.y_batches *= yb[i];
  }
  for (int64_t b = 0; b < batches; ++b) {
    int64_t rem = b, xo = 0, yo = 0, xstride = 1, ystride = 1;
    for (int i = int(r) - 1; i >= 0; --i) {
      const int64_t d = std::max(xb[size_t(i)], yb[size_t(i)]), idx = rem % d;
      rem /= d;
      xo += (xb[size_t(i)] == 1 ? 0 : idx) * xstride;
      yo += (yb[size_t(i)] == 1 ? 0 : idx) * ystride;
      xstride *= xb[size_t(i)];
      ystride *= yb[size_t(i)];
    }
    g.xoff.push_back(xo * g.m * g.k);
    g.ybat.push_back(yo);
  }
  // B without batch dims and A's batches consecutive row blocks: one GEMM.
  if (g.y_batches == 1 && !tx && batches > 1) {
    g.m *= batches;
    g.xoff.assign(1, 0);
    g.ybat.assign(1, 0);
  }
  return g;
}

// The compact weight a step reads: the constant's own tensor (kept alive
// here) or, for int4 (held one value a byte), its values packed two a byte
// once, here; for int8 and int4 also the scales: fp16 or fp32 as stored (the
// kernels widen fp16 ones as they read them: 2 bytes a block instead of 4),
// other dtypes converted to fp32 once.
struct CompactWeight {
  Tensor data;
  std::vector<uint8_t> packed;
  Tensor scales;
  kernels::WeightRef ref;
  std::string name;   // for the kernel name: "bf16 weights", "int8 weights/32"
  double bytes = 0;
};

// An int4 tensor (one value a byte, -8..7) as q4's bytes: element 2i in the
// low nibble of byte i. K is even (the block is), so rows stay whole bytes.
std::vector<uint8_t> pack_int4(const Op& op, const Tensor& w) {
  const auto* v = static_cast<const int8_t*>(w.data());
  std::vector<uint8_t> p(size_t(w.numel() / 2));
  for (size_t i = 0; i < p.size(); ++i) {
    const int lo = v[2 * i], hi = v[2 * i + 1];
    if (lo < -8 || lo > 7 || hi < -8 || hi > 7)
      throw_op_error(op, "an int4 weight holds " + std::to_string(lo < -8 || lo > 7 ? lo : hi) + ", outside -8..7");
    p[i] = uint8_t((lo & 15) | ((hi & 15) << 4));
  }
  return p;
}

std::shared_ptr<CompactWeight> quantized_weight(const Op& op, LowerCtx& ctx, const Tensor* w, const std::string& key) {
  const Tensor* s = ctx.const_value(op, key);
  if (!w || !s) throw_op_error(op, "a quantized weight and its '" + key + "' must be compile-time constants to compile");
  const bool int4 = w->dtype() == DType::Int4;
  if ((w->dtype() != DType::Int8 && !int4) || w->rank() != 2 || s->rank() != 2 || s->shape()[0] != w->shape()[0] ||
      s->shape()[1] < 1 || w->shape()[1] % s->shape()[1] != 0)
    throw_op_error(op, "'" + key + "' " + shape_str(s->shape()) + " must be [N, K / block] for the int8 or int4 weight " +
                           shape_str(w->shape()));
  auto cw = std::make_shared<CompactWeight>();
  if (!int4) cw->data = *w;  // int4 reads only its packed copy: no reference to the one-byte-a-value tensor
  const bool f16 = s->dtype() == DType::FP16;
  cw->scales = f16 || s->dtype() == DType::FP32 ? *s : s->cast(DType::FP32);
  const kernels::ElemType scale_type = f16 ? kernels::ElemType::f16 : kernels::ElemType::f32;
  const double scale_bytes = double(dtype_size(cw->scales.dtype())) * double(s->numel());
  const int64_t n = w->shape()[0], k = w->shape()[1], block = k / s->shape()[1];
  if (int4) {
    if (block % 2 != 0)
      throw_op_error(op, "an int4 weight needs an even block (two values a byte), got " + std::to_string(block));
    cw->packed = pack_int4(op, *w);
    cw->ref = {kernels::WeightFormat::q4, cw->packed.data(), n, k, k, cw->scales.data(), block, scale_type};
    cw->name = "int4 weights/" + std::to_string(block);
    cw->bytes = 0.5 * double(w->numel()) + scale_bytes;
    return cw;
  }
  cw->ref = {kernels::WeightFormat::q8, cw->data.data(), n, k, k, cw->scales.data(), block, scale_type};
  cw->name = "int8 weights/" + std::to_string(block);
  cw->bytes = double(w->numel()) + scale_bytes;
  return cw;
}

std::shared_ptr<CompactWeight> half_weight(const Tensor& w, int64_t n, int64_t k) {
  auto cw = std::make_shared<CompactWeight>();
  cw->data = w;
  const bool bf16 = w.dtype() == DType::BF16;
  cw->ref = {bf16 ? kernels::WeightFormat::bf16 : kernels::WeightFormat::f16, cw->data.data(), n, k, k};
  cw->name = bf16 ? "bf16 weights" : "fp16 weights";
  cw->bytes = 2.0 * double(w.numel());
  return cw;
}

// A constant B, per B batch, as the kernels read it: fp32 or bf16 as stored,
// other types widened to fp32 into `held` (which must outlive the refs).
std::vector<kernels::MatrixRef> constant_b_batches(const Tensor& w, Tensor& held, int64_t k, int64_t n, bool ty,
                                                   int64_t batches) {
  const bool bf16 = w.dtype() == DType::BF16;
  held = bf16 || w.dtype() == DType::FP32 ? w : w.cast(DType::FP32);
  const size_t esize = dtype_size(held.dtype());
  const auto* data = static_cast<const uint8_t*>(held.data());
  std::vector<kernels::MatrixRef> refs;
  for (int64_t b = 0; b < batches; ++b)
    refs.push_back({data + size_t(b * k * n) * esize, bf16 ? kernels::ElemType::bf16 : kernels::ElemType::f32,
                    ty ? k : n, ty});
  return refs;
}

// The dense product on oneDNN: one primitive for a variable B (`constant_b`
// empty), one per B batch for a constant B (each holds its reordered B;
// oneDNN's primitive cache shares the generated code between them). Null
// where oneDNN has no fast implementation for it: the own kernels serve it then.
std::shared_ptr<std::vector<kernels::OnednnGemm>> onednn_gemms(kernels::OnednnGemmDesc d,
                                                               const std::vector<kernels::MatrixRef>& constant_b) {
  auto prims = std::make_shared<std::vector<kernels::OnednnGemm>>();
  try {
    if (constant_b.empty()) {
      prims->emplace_back(d);
      return prims;
    }
    d.b_const = true;
    for (const kernels::MatrixRef& b : constant_b) {
      d.b = b;
      prims->emplace_back(d);
    }
    return prims;
  } catch (const Error&) {
    return nullptr;
  }
}

// A variable B that is a stable input (CompileOptions::stable_inputs: the
// weights of a training step): packed on the first run and again only when
// the plan's counter or B's address changed, so the micro-steps between two
// optimizer updates convert and pack each weight once instead of per call.
struct StableB {
  kernels::OnednnGemmDesc desc;   // oneDNN chosen: the description to build B-constant primitives from
  bool onednn = false;
  kernels::GemmMath math = kernels::GemmMath::fp32;
  int64_t k = 0, n = 0, batches = 1;
  bool ty = false;
  uint64_t generation = 0;        // 0: never packed (the plan's counter starts at 1)
  const float* src = nullptr;
  std::vector<kernels::PackedB> packed;
  std::vector<kernels::OnednnGemm> prims;

  kernels::MatrixRef batch(const float* b, int64_t bi) const {
    return {b + bi * k * n, kernels::ElemType::f32, ty ? k : n, ty};
  }
  void refresh(const float* b, uint64_t now) {
    if (generation == now && src == b) return;
    packed.clear();
    prims.clear();
    if (onednn) {
      try {
        for (int64_t bi = 0; bi < batches; ++bi) {
          kernels::OnednnGemmDesc d = desc;
          d.b = batch(b, bi);
          d.b_const = true;
          prims.emplace_back(d);
        }
      } catch (const Error&) {
        // No fast oneDNN kernel for a constant B of this description: the
        // own kernels serve this product from now on.
        onednn = false;
        prims.clear();
      }
    }
    if (!onednn)
      for (int64_t bi = 0; bi < batches; ++bi) packed.emplace_back(batch(b, bi), k, n, math);
    generation = now;
    src = b;
  }
};

}  // namespace

std::unique_ptr<Step> lower_gemm(const Op& op, LowerCtx& ctx, const GemmLowering& gl) {
  const ValueRef x = ctx.input(op, gl.x_key), o = ctx.output(op);
  // A constant B is read from its compile-time value, never from a plan
  // buffer: it may be stored in fewer bytes than the plan's fp32.
  const Tensor* w = ctx.const_value(op, gl.y_key);
  const bool quantized = op.has(gl.y_scale_key);
  if (quantized && !w) throw_op_error(op, "a quantized weight must be a compile-time constant to compile");
  if (w && !quantized && w->dtype() != DType::FP32 && w->dtype() != DType::FP16 && w->dtype() != DType::BF16)
    throw_op_error(op, "a constant weight must be fp32, fp16 or bf16 to compile, got " +
                           std::string(dtype_name(w->dtype())));
  const ValueRef y = w ? ValueRef{-1, DType::FP32, w->shape()} : ctx.input(op, gl.y_key);
  // A and a variable B may be stored in bf16 (CompileOptions::bf16_operands).
  const auto operand_type = [&](const ValueRef& v) {
    if (v.dtype == DType::BF16 && ctx.bf16_matmuls) return kernels::ElemType::bf16;
    if (v.dtype != DType::FP32) throw_op_error(op, "only float operands compile");
    return kernels::ElemType::f32;
  };
  const kernels::ElemType ea = operand_type(x), eb = operand_type(y);
  if (o.dtype != DType::FP32) throw_op_error(op, "only float operands compile");
  const int64_t esa = int64_t(kernels::elem_bytes(ea)), esb = int64_t(kernels::elem_bytes(eb));
  const GemmShape g = gemm_shape(op, x.shape, y.shape, gl.transpose_x, gl.transpose_y);
  const int64_t m = g.m, n = g.n, k = g.k;
  if (int64_t(g.xoff.size()) * m * n != o.numel())
    throw_op_error(op, "internal: the output " + shape_str(o.shape) + " does not match the product");
  int ib = -1, ir = -1;
  if (!gl.bias_key.empty()) {
    const ValueRef b = ctx.input(op, gl.bias_key);
    if (b.numel() != n || b.dtype != DType::FP32) throw_op_error(op, "bias must be [N] = [" + std::to_string(n) + "]");
    ib = b.id;
  }
  if (!gl.residual_key.empty()) {
    const ValueRef r = ctx.input(op, gl.residual_key);
    if (r.shape != o.shape || r.dtype != DType::FP32) throw_op_error(op, "residual must have the result's shape");
    ir = r.id;
  }

  const kernels::GemmMath math = ctx.bf16_matmuls ? kernels::GemmMath::bf16 : kernels::GemmMath::fp32;
  // A compact weight read in place (W [N, K] as stored: one B, A's rows
  // consecutive): int8 always, bf16/fp16 when few rows make the product a
  // stream over the weight.
  std::shared_ptr<CompactWeight> compact;
  const bool one_weight = g.ty && !g.tx && g.y_batches == 1 && g.xoff.size() == 1 && y.shape.size() == 2;
  if (quantized) {
    if (!one_weight) throw_op_error(op, "a quantized weight must be [N, K] with transpose_y = true and transpose_x = false");
    compact = quantized_weight(op, ctx, w, gl.y_scale_key);
    // Prefill's rows (more than weight_gemm streams) on the bf16 kernels
    // (AMX where present) under matmul_precision bf16, as every other GEMM.
    compact->ref.math = math;
    if (ctx.int8_activations) {
      compact->ref.activations = kernels::ActivationQuant::int8;
      compact->name += ", int8 activations";
    }
  } else if (w && w->dtype() != DType::FP32 && one_weight && kernels::weight_gemm_streams(m)) {
    compact = half_weight(*w, n, k);
  }
  if (compact && ea != kernels::ElemType::f32) throw_op_error(op, "internal: a compact weight's product needs fp32 A");
  // A constant B not kept compact, per B batch, for the packed or oneDNN path.
  Tensor b_held;
  const std::vector<kernels::MatrixRef> constant_b =
      w && !compact ? constant_b_batches(*w, b_held, k, n, g.ty, g.y_batches) : std::vector<kernels::MatrixRef>{};
  std::shared_ptr<std::vector<kernels::OnednnGemm>> onednn;
  // A stable input is packed once per change, like a constant once: the
  // candidates are compared on the product alone, not on per-call packing.
  const bool b_once = w != nullptr || (!compact && ctx.stable_generation && ctx.stable_input(y.id));
  const kernels::GemmBackend backend =
      compact ? kernels::GemmBackend::own
      : ctx.gemm_tuner ? ctx.gemm_tuner->choose(m, n, k, g.tx, g.ty, math, b_once)
                       : kernels::choose_gemm_backend(m, n, k, math, b_once);
  if (backend == kernels::GemmBackend::onednn) {
    kernels::OnednnGemmDesc d;
    d.m = m;
    d.n = n;
    d.k = k;
    d.a = kernels::MatrixRef{nullptr, ea, g.tx ? m : k, g.tx};
    d.b = kernels::MatrixRef{nullptr, eb, g.ty ? k : n, g.ty};
    d.c_ld = n;
    d.alpha = gl.alpha;
    d.has_bias = ib >= 0;
    d.act = gl.act;
    d.has_residual = ir >= 0;
    d.residual_ld = n;
    d.math = math;
    onednn = onednn_gemms(d, constant_b);
  }
  // Any other constant B is packed now, once per B batch.
  std::shared_ptr<std::vector<kernels::PackedB>> packed;
  double b_bytes = double(esb) * double(y.numel());
  if (compact) {
    b_bytes = compact->bytes;
  } else if (onednn) {
    if (w) {
      b_bytes = 0;
      for (const auto& p : *onednn) b_bytes += double(p.bytes());
    }
  } else if (w) {
    packed = std::make_shared<std::vector<kernels::PackedB>>();
    b_bytes = 0;
    for (const kernels::MatrixRef& b : constant_b) {
      packed->emplace_back(b, k, n, math);
      b_bytes += double(packed->back().bytes());
    }
  }

  // A stable variable B: packed at run time, once per change of its values.
  std::shared_ptr<StableB> stable;
  if (!w && !compact && ctx.stable_generation && ctx.stable_input(y.id)) {
    stable = std::make_shared<StableB>();
    stable->onednn = onednn != nullptr;
    if (onednn) stable->desc = onednn->front().desc();
    stable->math = math;
    stable->k = k;
    stable->n = n;
    stable->ty = g.ty;
    stable->batches = g.y_batches;
  }
  const uint64_t* generation = ctx.stable_generation;

  std::string kernel = compact                             ? "gemm[" + compact->name + "]"
                       : packed || (onednn && w)           ? "gemm[B packed]"
                       : stable                            ? "gemm[B packed per change]"
                                                           : "gemm";
  // A compact weight's product is bf16 only where weight_gemm runs panels.
  if (ctx.bf16_matmuls && (!compact || (quantized && !kernels::weight_gemm_streams(m)))) kernel += "[bf16]";
  if (onednn) kernel += "[onednn]";
  if (gl.alpha != 1) kernel += "+alpha";
  if (ib >= 0) kernel += "+bias";
  if (gl.act != kernels::Activation::none) kernel += std::string("+") + kernels::activation_name(gl.act);
  if (ir >= 0) kernel += "+residual";

  const int ix = x.id, iy = y.id, io = o.id;
  const float alpha = gl.alpha;
  const kernels::Activation act = gl.act;
  const int64_t lda = g.tx ? m : k, ldb = g.ty ? k : n;
  const bool tx = g.tx, ty = g.ty;
  const std::vector<int64_t> xoff = g.xoff, ybat = g.ybat;
  // The epilogue of every call; its residual is set per batch.
  auto epilogue = [=](const Frame& f) {
    kernels::Epilogue ep;
    ep.alpha = alpha;
    ep.act = act;
    ep.bias = ib >= 0 ? f.at<float>(ib) : nullptr;
    ep.residual_ld = n;
    return ep;
  };
  auto residual = [=](const Frame& f, int64_t co) { return ir >= 0 ? f.at<float>(ir) + co : nullptr; };
  auto output = [=](const Frame& f, int64_t co) { return kernels::OutputRef{f.at<float>(io) + co, kernels::ElemType::f32, n}; };

  // One step type per way B is held: a compact weight read in place, a
  // stable input packed once per change, oneDNN primitives, the own kernels.
  std::unique_ptr<Step> step;
  if (compact) {
    step = make_step(kernel, op, [=](const Frame& f) {
      kernels::Epilogue ep = epilogue(f);
      ep.residual = residual(f, 0);
      kernels::weight_gemm(m, f.at<float>(ix), k, compact->ref, f.at<float>(io), n, ep);
    });
  } else if (stable) {
    step = make_step(kernel, op, [=](const Frame& f) {
      stable->refresh(f.at<float>(iy), *generation);
      const auto* a = static_cast<const uint8_t*>(f.ptr[size_t(ix)]);
      kernels::Epilogue ep = epilogue(f);
      for (size_t bi = 0; bi < xoff.size(); ++bi) {
        const int64_t co = int64_t(bi) * m * n;
        if (!stable->prims.empty()) {
          stable->prims[size_t(ybat[bi])].run(a + xoff[bi] * esa, nullptr, output(f, co), ep.bias, residual(f, co));
          continue;
        }
        ep.residual = residual(f, co);
        kernels::gemm(m, kernels::MatrixRef{a + xoff[bi] * esa, ea, lda, tx}, stable->packed[size_t(ybat[bi])],
                      output(f, co), ep);
      }
    });
  } else if (onednn) {
    step = make_step(kernel, op, [=](const Frame& f) {
      const auto* a = static_cast<const uint8_t*>(f.ptr[size_t(ix)]);
      const float* bias = ib >= 0 ? f.at<float>(ib) : nullptr;
      const auto* y_var = onednn->front().desc().b_const ? nullptr : static_cast<const uint8_t*>(f.ptr[size_t(iy)]);
      for (size_t bi = 0; bi < xoff.size(); ++bi) {
        const int64_t co = int64_t(bi) * m * n;
        if (y_var)
          onednn->front().run(a + xoff[bi] * esa, y_var + ybat[bi] * k * n * esb, output(f, co), bias,
                              residual(f, co));
        else
          (*onednn)[size_t(ybat[bi])].run(a + xoff[bi] * esa, nullptr, output(f, co), bias, residual(f, co));
      }
    });
  } else {
    step = make_step(kernel, op, [=](const Frame& f) {
      const auto* a = static_cast<const uint8_t*>(f.ptr[size_t(ix)]);
      kernels::Epilogue ep = epilogue(f);
      for (size_t bi = 0; bi < xoff.size(); ++bi) {
        const int64_t co = int64_t(bi) * m * n;
        ep.residual = residual(f, co);
        const kernels::MatrixRef ar{a + xoff[bi] * esa, ea, lda, tx};
        if (packed)
          kernels::gemm(m, ar, (*packed)[size_t(ybat[bi])], output(f, co), ep);
        else
          kernels::gemm(m, n, k, ar,
                        kernels::MatrixRef{static_cast<const uint8_t*>(f.ptr[size_t(iy)]) + ybat[bi] * k * n * esb,
                                           eb, ldb, ty},
                        output(f, co), ep, math);
      }
    });
  }
  step->info.flops = 2.0 * double(xoff.size()) * double(m) * double(n) * double(k);
  step->info.bytes = double(esa) * double(x.numel()) + 4.0 * double(o.numel()) + b_bytes +
                     (ib >= 0 ? 4.0 * double(n) : 0.0) +
                     (ir >= 0 ? 4.0 * double(o.numel()) : 0.0);
  return step;
}

namespace {

std::unique_ptr<Step> lower_matmul(const Op& op, LowerCtx& ctx) {
  GemmLowering g;
  g.transpose_x = ctx.const_bool(op, "transpose_x", false);
  g.transpose_y = ctx.const_bool(op, "transpose_y", false);
  return lower_gemm(op, ctx, g);
}

// linear(x, W[N, K], b) = x·Wᵀ + b: a matmul with transpose_y and a bias epilogue.
std::unique_ptr<Step> lower_linear(const Op& op, LowerCtx& ctx) {
  GemmLowering g;
  g.y_key = "weight";
  g.transpose_y = true;
  if (ctx.input(op, "weight").shape.size() != 2) throw_op_error(op, "weight must have rank 2");
  if (op.has("bias")) g.bias_key = "bias";
  return lower_gemm(op, ctx, g);
}

}  // namespace

void register_linalg_lowerings() {
  register_lowering("matmul", lower_matmul);
  register_lowering("linear", lower_linear);
}

}  // namespace milrt::rt
