// Lowering of elementwise ops, activations and casts to kernels/generic/elementwise.
#include <cmath>
#include <cstring>
#include <map>

#include "kernels/generic/elementwise.h"
#include "kernels/generic/round_f16.h"
#include "milrt/dtype.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {
using kernels::Binary;
using kernels::Broadcast;
using kernels::Unary;

// Strides of `src` broadcast against `out` (right-aligned, 0 on stretched dims).
Broadcast broadcast_of(const Op& op, const Shape& out, const std::vector<Shape>& operands) {
  if (out.size() > size_t(kernels::kMaxRank)) throw_op_error(op, "rank above 8 is not compiled");
  Broadcast bc;
  bc.rank = int(out.size());
  for (int i = 0; i < bc.rank; ++i) bc.dims[i] = out[size_t(i)];
  for (size_t k = 0; k < operands.size(); ++k) {
    const Shape& s = operands[k];
    size_t off = out.size() - s.size();
    int64_t stride = 1;
    for (int i = int(s.size()) - 1; i >= 0; --i) {
      bc.stride[k][size_t(i) + off] = s[size_t(i)] == 1 ? 0 : stride;
      stride *= s[size_t(i)];
    }
  }
  return bc;
}

const std::map<std::string, Binary>& binary_ops() {
  static const std::map<std::string, Binary> m = {
      {"add", Binary::Add}, {"sub", Binary::Sub}, {"mul", Binary::Mul}, {"real_div", Binary::Div},
      {"maximum", Binary::Max}, {"minimum", Binary::Min}, {"pow", Binary::Pow}, {"floor_div", Binary::FloorDiv},
      {"mod", Binary::Mod}, {"equal", Binary::Equal}, {"not_equal", Binary::NotEqual}, {"less", Binary::Less},
      {"less_equal", Binary::LessEqual}, {"greater", Binary::Greater}, {"greater_equal", Binary::GreaterEqual},
      {"logical_and", Binary::And}, {"logical_or", Binary::Or}, {"logical_xor", Binary::Xor}};
  return m;
}

std::unique_ptr<Step> lower_binary(const Op& op, LowerCtx& ctx) {
  Binary kind = binary_ops().at(op.type);
  ValueRef a = ctx.input(op, "x"), b = ctx.input(op, "y"), o = ctx.output(op);
  Broadcast bc = broadcast_of(op, o.shape, {a.shape, b.shape});
  int ia = a.id, ib = b.id, io = o.id;
  auto step = [&]() -> std::unique_ptr<Step> {
    switch (a.dtype) {
      case DType::FP32:
        return make_step("binary:" + op.type, op, [=](const Frame& f) {
          kernels::binary_f32(kind, f.at<float>(ia), f.at<float>(ib), f.ptr[size_t(io)], bc);
        });
      case DType::Int32:
        return make_step("binary:" + op.type, op, [=](const Frame& f) {
          kernels::binary_i32(kind, f.at<int32_t>(ia), f.at<int32_t>(ib), f.ptr[size_t(io)], bc);
        });
      default:
        return make_step("binary:" + op.type, op, [=](const Frame& f) {
          kernels::binary_u8(kind, f.at<uint8_t>(ia), f.at<uint8_t>(ib), f.at<uint8_t>(io), bc);
        });
    }
  }();
  step->info.flops = double(o.numel());
  step->info.bytes = double(a.numel() + b.numel() + o.numel()) * 4;
  return step;
}

std::unique_ptr<Step> lower_logical_not(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  int ix = x.id, io = o.id;
  int64_t n = o.numel();
  return make_step("logical_not", op, [=](const Frame& f) {
    const uint8_t* a = f.at<uint8_t>(ix);
    uint8_t* y = f.at<uint8_t>(io);
    for (int64_t i = 0; i < n; ++i) y[i] = !a[i];
  });
}

std::unique_ptr<Step> lower_select(const Op& op, LowerCtx& ctx) {
  ValueRef c = ctx.input(op, "cond"), a = ctx.input(op, "a"), b = ctx.input(op, "b"), o = ctx.output(op);
  Broadcast bc = broadcast_of(op, o.shape, {c.shape, a.shape, b.shape});
  int ic = c.id, ia = a.id, ib = b.id, io = o.id, bytes = int(dtype_size(o.dtype));
  return make_step("select", op, [=](const Frame& f) {
    kernels::select(f.at<uint8_t>(ic), f.ptr[size_t(ia)], f.ptr[size_t(ib)], f.ptr[size_t(io)], bytes, bc);
  });
}

// A declared-dtype constant rounded as the reference does (e.g. an fp16 program's eps).
float as_declared(double v, DType declared) {
  Tensor t(declared, {});
  t.set(0, v);
  return float(t.at(0));
}

struct UnarySpec {
  Unary kind;
  const char* alpha = nullptr;  // input names of the parameters, if any
  const char* beta = nullptr;
  double eps_default = -1;      // >= 0: takes `epsilon` with this default
};

const std::map<std::string, UnarySpec>& unary_ops() {
  static const std::map<std::string, UnarySpec> m = {
      {"abs", {Unary::Abs}}, {"exp", {Unary::Exp}}, {"exp2", {Unary::Exp2}},
      {"log", {Unary::Log, nullptr, nullptr, 1e-45}}, {"sqrt", {Unary::Sqrt}},
      {"rsqrt", {Unary::Rsqrt, nullptr, nullptr, 1e-12}}, {"inverse", {Unary::Inverse, nullptr, nullptr, 1e-4}},
      {"sin", {Unary::Sin}}, {"cos", {Unary::Cos}}, {"tan", {Unary::Tan}}, {"asin", {Unary::Asin}},
      {"acos", {Unary::Acos}}, {"atan", {Unary::Atan}}, {"atanh", {Unary::Atanh}}, {"sinh", {Unary::Sinh}},
      {"cosh", {Unary::Cosh}}, {"tanh", {Unary::Tanh}}, {"erf", {Unary::Erf}}, {"floor", {Unary::Floor}},
      {"ceil", {Unary::Ceil}}, {"round", {Unary::Round}}, {"sign", {Unary::Sign}}, {"square", {Unary::Square}},
      {"relu", {Unary::Relu}}, {"relu6", {Unary::Relu6}}, {"sigmoid", {Unary::Sigmoid}}, {"silu", {Unary::Silu}},
      {"softplus", {Unary::Softplus}}, {"softsign", {Unary::Softsign}}, {"clip", {Unary::Clip, "alpha", "beta"}},
      {"leaky_relu", {Unary::LeakyRelu, "alpha"}}, {"elu", {Unary::Elu, "alpha"}},
      {"threshold", {Unary::Threshold, "alpha"}}, {"sigmoid_hard", {Unary::SigmoidHard, "alpha", "beta"}},
      {"scaled_tanh", {Unary::ScaledTanh, "alpha", "beta"}},
      {"linear_activation", {Unary::LinearActivation, "alpha", "beta"}},
      {"thresholded_relu", {Unary::ThresholdedRelu, "alpha"}},
      {"clamped_relu", {Unary::ClampedRelu, "alpha", "beta"}}, {"gelu", {Unary::GeluExact}}};
  return m;
}

std::unique_ptr<Step> lower_unary(const Op& op, LowerCtx& ctx) {
  UnarySpec spec = unary_ops().at(op.type);
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32) throw_op_error(op, "only float inputs compile for '" + op.type + "'");
  DType declared = op.outputs[0].type.dtype;
  float alpha = spec.alpha ? as_declared(ctx.const_float(op, spec.alpha), declared) : 0.0f;
  float beta = spec.beta ? as_declared(ctx.const_float(op, spec.beta), declared) : 0.0f;
  float eps = spec.eps_default >= 0 ? as_declared(ctx.const_float(op, "epsilon", spec.eps_default), declared) : 0.0f;
  if (op.type == "gelu") {
    std::string mode = ctx.const_str(op, "mode", "EXACT");
    spec.kind = mode == "TANH_APPROXIMATION" ? Unary::GeluTanh
              : mode == "SIGMOID_APPROXIMATION" ? Unary::GeluSigmoid : Unary::GeluExact;
  }
  int ix = x.id, io = o.id;
  int64_t n = o.numel();
  Unary kind = spec.kind;
  auto step = make_step("unary:" + op.type, op, [=](const Frame& f) {
    kernels::unary_f32(kind, f.at<float>(ix), f.at<float>(io), n, alpha, beta, eps);
  });
  step->info.flops = double(n);
  step->info.bytes = double(n) * 8;
  return step;
}

// cast: values are rounded to the declared target dtype (e.g. fp16) and kept in storage form.

std::unique_ptr<Step> lower_cast(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  DType target = op.outputs[0].type.dtype;
  DType in_store = x.dtype, out_store = o.dtype;
  int ix = x.id, io = o.id;
  int64_t n = o.numel();
  // Float to float, the common case (fp16 programs cast at their edges): no per-element dispatch.
  if (in_store == DType::FP32 && out_store == DType::FP32 && (target == DType::FP32 || target == DType::FP16)) {
    return make_step("cast", op, [=](const Frame& f) {
      const float* s = f.at<float>(ix);
      float* d = f.at<float>(io);
      if (target == DType::FP32) {
        if (s != d) std::memmove(d, s, size_t(n) * sizeof(float));
      } else {
        kernels::round_to_f16(s, d, n);  // fp32 values rounded to fp16 and back (F16C)
      }
    });
  }
  return make_step("cast", op, [=](const Frame& f) {
    for (int64_t i = 0; i < n; ++i) {
      double v = load_as_double(f.ptr[size_t(ix)], in_store, size_t(i));
      uint64_t tmp = 0;  // one element of the declared dtype: round / saturate as it does
      store_from_double(&tmp, target, 0, v);
      store_from_double(f.ptr[size_t(io)], out_store, size_t(i), load_as_double(&tmp, target, 0));
    }
  });
}
}  // namespace

void register_elementwise_lowerings() {
  for (auto& [name, kind] : binary_ops()) register_lowering(name, lower_binary);
  for (auto& [name, spec] : unary_ops()) register_lowering(name, lower_unary);
  register_lowering("logical_not", lower_logical_not);
  register_lowering("select", lower_select);
  register_lowering("cast", lower_cast);
}

}  // namespace milrt::rt
