// Lowering of milrt_elementwise: its expression becomes a register-machine
// program of kernels/generic/elementwise_program, planned here once.
#include <array>
#include <bit>
#include <cstdint>
#include <map>

#include "ir/elementwise_expr.h"
#include "kernels/generic/elementwise_program.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {
using kernels::Binary;
using kernels::EwInstr;
using kernels::Unary;

const std::map<std::string, Binary>& binaries() {
  static const std::map<std::string, Binary> m = {
      {"add", Binary::Add}, {"sub", Binary::Sub}, {"mul", Binary::Mul}, {"real_div", Binary::Div},
      {"maximum", Binary::Max}, {"minimum", Binary::Min}, {"pow", Binary::Pow}, {"floor_div", Binary::FloorDiv},
      {"mod", Binary::Mod}};
  return m;
}

const std::map<std::string, Unary>& unaries() {
  static const std::map<std::string, Unary> m = {
      {"abs", Unary::Abs}, {"exp", Unary::Exp}, {"exp2", Unary::Exp2}, {"sqrt", Unary::Sqrt},
      {"sin", Unary::Sin}, {"cos", Unary::Cos}, {"tan", Unary::Tan}, {"asin", Unary::Asin},
      {"acos", Unary::Acos}, {"atan", Unary::Atan}, {"atanh", Unary::Atanh}, {"sinh", Unary::Sinh},
      {"cosh", Unary::Cosh}, {"tanh", Unary::Tanh}, {"erf", Unary::Erf}, {"floor", Unary::Floor},
      {"ceil", Unary::Ceil}, {"round", Unary::Round}, {"sign", Unary::Sign}, {"square", Unary::Square},
      {"relu", Unary::Relu}, {"relu6", Unary::Relu6}, {"sigmoid", Unary::Sigmoid}, {"silu", Unary::Silu},
      {"softplus", Unary::Softplus}, {"softsign", Unary::Softsign}, {"gelu", Unary::GeluExact},
      {"gelu_tanh", Unary::GeluTanh}, {"gelu_sigmoid", Unary::GeluSigmoid}, {"log", Unary::Log},
      {"rsqrt", Unary::Rsqrt}, {"inverse", Unary::Inverse}, {"leaky_relu", Unary::LeakyRelu},
      {"elu", Unary::Elu}, {"thresholded_relu", Unary::ThresholdedRelu}, {"threshold", Unary::Threshold},
      {"clip", Unary::Clip}, {"sigmoid_hard", Unary::SigmoidHard}, {"scaled_tanh", Unary::ScaledTanh},
      {"linear_activation", Unary::LinearActivation}, {"clamped_relu", Unary::ClampedRelu}};
  return m;
}

// Emits the instructions of `e` (post-order) and returns the index of its value.
// Inputs and equal literals are emitted once.
class Emitter {
 public:
  explicit Emitter(const Op& op) : op_(op) {}
  std::vector<EwInstr> code;

  int emit(const ew::Expr& e) {
    switch (e.kind) {
      case ew::Expr::Kind::Input: {
        auto [it, fresh] = inputs_.try_emplace(e.input, int(code.size()));
        if (fresh) code.push_back(EwInstr::of_input(e.input));
        return it->second;
      }
      case ew::Expr::Kind::Literal: {
        float v = float(e.value);
        // Keyed by bits: -0 and 0 differ, and NaN needs no ordering.
        auto [it, fresh] = consts_.try_emplace(std::bit_cast<uint32_t>(v), int(code.size()));
        if (fresh) code.push_back(EwInstr::of_const(v));
        return it->second;
      }
      case ew::Expr::Kind::Call: break;
    }
    const ew::FnInfo* f = ew::find_fn(e.fn);
    if (f->operands == 2) {
      int a = emit(e.args[0]), b = emit(e.args[1]);
      code.push_back(EwInstr::of_binary(binaries().at(e.fn), a, b));
      return int(code.size()) - 1;
    }
    auto u = unaries().find(e.fn);
    if (u == unaries().end()) throw_op_error(op_, "no compiled kernel for '" + e.fn + "' in expr");
    int a = emit(e.args[0]);
    float p0 = float(e.args.size() > 1 ? e.args[1].value : f->param_default);
    float p1 = float(e.args.size() > 2 ? e.args[2].value : 0.0);
    // The generic unary kernel takes epsilon separately from alpha/beta.
    bool eps = e.fn == "log" || e.fn == "rsqrt" || e.fn == "inverse";
    code.push_back(eps ? EwInstr::of_unary(u->second, a, 0, 0, p0) : EwInstr::of_unary(u->second, a, p0, p1));
    return int(code.size()) - 1;
  }

 private:
  const Op& op_;
  std::map<int, int> inputs_;
  std::map<uint32_t, int> consts_;
};

std::unique_ptr<Step> lower_fused_elementwise(const Op& op, LowerCtx& ctx) {
  std::vector<ValueRef> ins = ctx.tuple(op, "inputs");
  ValueRef o = ctx.output(op);
  ew::Expr expr;
  try {
    expr = ew::parse_expr(ctx.const_str(op, "expr"), int(ins.size()));
  } catch (const Error& e) {
    throw_op_error(op, e.what());
  }
  std::vector<std::vector<int64_t>> shapes;
  for (const ValueRef& v : ins) {
    if (v.dtype != DType::FP32) throw_op_error(op, "only float inputs compile for milrt_elementwise");
    shapes.push_back(v.shape);
  }
  Emitter em(op);
  em.emit(expr);
  auto prog = std::make_shared<const kernels::EwProgram>([&] {
    try {
      kernels::EwProgram p = kernels::make_program(em.code, shapes, o.shape);
      p.round_f16 = ctx.fp16_numerics && op.outputs[0].type.dtype == DType::FP16;
      return p;
    } catch (const Error& e) {
      throw_op_error(op, e.what());
    }
  }());
  auto scratch = std::make_shared<std::vector<float>>(size_t(prog->scratch_floats()));
  std::vector<int> ids;
  for (const ValueRef& v : ins) ids.push_back(v.id);
  int io = o.id;
  auto step = make_step("elementwise:" + std::to_string(ew::count_calls(expr)) + " ops", op,
                        [prog, scratch, ids, io](const Frame& f) {
                          std::array<const float*, 64> in{};
                          for (size_t k = 0; k < ids.size(); ++k) in[k] = f.at<float>(ids[k]);
                          kernels::run_program(*prog, in.data(), f.at<float>(io), scratch->data());
                        });
  double bytes = double(o.numel());
  for (const ValueRef& v : ins) bytes += double(v.numel());
  step->info.flops = double(o.numel()) * ew::count_calls(expr);
  step->info.bytes = bytes * 4;
  return step;
}

}  // namespace

void register_fused_elementwise_lowerings() { register_lowering("milrt_elementwise", lower_fused_elementwise); }

}  // namespace milrt::rt
