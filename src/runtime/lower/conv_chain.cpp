// Lowering of milrt_conv_chain onto kernels::ConvChainKernel: one step for
// the whole chain, weights packed and biases copied at compile time.
#include <sstream>

#include "kernels/generic/conv_chain.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

std::vector<Arg> elements(const Op& op, const std::string& key) {
  const Arg* a = op.arg(key);
  if (!a) throw_op_error(op, "missing '" + key + "'");
  return a->kind == Arg::Kind::Tuple ? a->elems : std::vector<Arg>{*a};
}

// LowerCtx resolves constants by input key only, so a tuple element is
// looked up as the one input of a stand-in op.
Tensor constant_f32(const Op& op, LowerCtx& ctx, const Arg& a, const std::string& what) {
  Op probe;
  probe.set("v", a);
  const Tensor* t = ctx.const_value(probe, "v");
  if (!t) throw_op_error(op, what + " must be a compile-time constant");
  return t->dtype() == DType::FP32 ? *t : t->cast(DType::FP32);
}

std::unique_ptr<Step> lower_conv_chain(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), o = ctx.output(op);
  if (x.dtype != DType::FP32 || x.shape.size() < 3) throw_op_error(op, "x must be a float tensor of rank >= 3");
  const std::vector<Arg> ws = elements(op, "weights"), bs = elements(op, "biases");
  std::istringstream words(ctx.const_str(op, "activations"));
  std::vector<std::string> acts;
  for (std::string w; words >> w;) acts.push_back(w);
  if (ws.empty() || bs.size() != ws.size() || acts.size() != ws.size())
    throw_op_error(op, "needs one bias and one activation per weight");
  Tensor alphas, betas;
  if (const Tensor* t = ctx.const_value(op, "alphas")) alphas = *t;
  if (const Tensor* t = ctx.const_value(op, "betas")) betas = *t;

  const int64_t batch = x.shape[0];
  const int64_t positions = shape_numel(Shape(x.shape.begin() + 2, x.shape.end()));
  std::vector<int64_t> channels = {x.shape[1]};
  std::vector<Tensor> held;   // fp32 weights and biases, alive until the kernel has packed and copied them
  held.reserve(2 * ws.size());
  std::vector<kernels::ConvChainLink> links;
  for (size_t i = 0; i < ws.size(); ++i) {
    const std::string n = "weights[" + std::to_string(i) + "]";
    const Tensor& w = held.emplace_back(constant_f32(op, ctx, ws[i], n));
    const int64_t cin = channels.back(), cout = w.shape().empty() ? 0 : w.shape()[0];
    if (cout < 1 || w.numel() != cout * cin)
      throw_op_error(op, n + " does not fit " + std::to_string(cin) + " channels");
    const Tensor& b = held.emplace_back(constant_f32(op, ctx, bs[i], "biases[" + std::to_string(i) + "]"));
    if (b.numel() != cout) throw_op_error(op, "biases[" + std::to_string(i) + "] must hold one value per channel");
    kernels::ConvChainLink l{w.ptr<float>(), b.ptr<float>(), activation_named(op, acts[i]), {}};
    if (l.act == kernels::Activation::clip) {
      if (alphas.numel() != int64_t(ws.size()) || betas.numel() != int64_t(ws.size()))
        throw_op_error(op, "a clip needs alphas and betas");
      l.bounds = {float(alphas.at(i)), float(betas.at(i))};
    }
    links.push_back(l);
    channels.push_back(cout);
  }
  Shape want = x.shape;
  want[1] = channels.back();
  if (want != o.shape)
    throw_op_error(op, "the chain gives " + shape_str(want) + " but the output is declared " + shape_str(o.shape));
  if (kernels::conv_chain_tile(channels, positions) == 0)
    throw_op_error(op, "the chain's intermediates do not fit in cache for any useful tile");
  auto kern = std::make_shared<const kernels::ConvChainKernel>(batch, positions, channels, links);
  const int ix = x.id, io = o.id;
  auto step = make_step("conv_chain:" + std::to_string(ws.size()) + "x1x1", op,
                        [=](const Frame& f) { kern->run(f.at<float>(ix), f.at<float>(io)); });
  double weights = 0;   // also the multiply-adds per position
  for (size_t i = 0; i + 1 < channels.size(); ++i) weights += double(channels[i]) * double(channels[i + 1]);
  step->info.flops = 2.0 * weights * double(batch) * double(positions);
  step->info.bytes = 4.0 * (double(x.numel() + o.numel()) + weights);
  return step;
}

}  // namespace

void register_conv_chain_lowerings() { register_lowering("milrt_conv_chain", lower_conv_chain); }

}  // namespace milrt::rt
