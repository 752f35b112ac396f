// Lowering of conv, conv_transpose and lstm: padding, output geometry, gate layout and
// activations are resolved here, at compile time, exactly as the reference
// (src/reference/ops/linalg.cpp) resolves them.
#include <algorithm>
#include <array>
#include <cctype>
#include <memory>

#include "kernels/generic/lstm.h"
#include "runtime/lower/conv_lowering.h"
#include "runtime/lowering.h"

namespace milrt::rt {
namespace {

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

void require_float(const Op& op, std::initializer_list<ValueRef> vs) {
  for (const ValueRef& v : vs)
    if (v.dtype != DType::FP32) throw_op_error(op, "only float " + op.type + " compiles");
}

// A compile-time constant float tensor as fp32 values (kept alive by the returned holder).
const float* const_f32(const Tensor* t, std::shared_ptr<Tensor>& holder) {
  if (!t) return nullptr;
  if (t->dtype() == DType::FP32) return t->ptr<float>();
  holder = std::make_shared<Tensor>(t->cast(DType::FP32));
  return holder->ptr<float>();
}

// The parameters conv and conv_transpose share, read and checked.
struct ConvParams {
  size_t nsp = 0;  // spatial dims
  std::vector<int64_t> strides, dilations, pad;
  int64_t groups = 1;
  std::string pad_type;
};

ConvParams conv_params(const Op& op, LowerCtx& ctx, const ValueRef& x, const ValueRef& w) {
  require_float(op, {x, w});
  const size_t rank = x.shape.size();
  if (rank < 3 || rank > 5 || w.shape.size() != rank) throw_op_error(op, "x and weight must have rank 3 to 5");
  ConvParams p;
  p.nsp = rank - 2;
  p.strides = ctx.const_ints(op, "strides", std::vector<int64_t>(p.nsp, 1));
  p.dilations = ctx.const_ints(op, "dilations", std::vector<int64_t>(p.nsp, 1));
  p.groups = ctx.const_int(op, "groups", 1);
  p.pad_type = ctx.const_str(op, "pad_type", "valid");
  p.pad = p.pad_type == "custom" ? ctx.const_ints(op, "pad", std::vector<int64_t>(2 * p.nsp, 0))
                                 : std::vector<int64_t>(2 * p.nsp, 0);
  if (p.strides.size() != p.nsp || p.dilations.size() != p.nsp || p.pad.size() != 2 * p.nsp)
    throw_op_error(op, "strides, dilations and pad must have one (pad: two) value per spatial dim");
  return p;
}

}  // namespace

std::unique_ptr<Step> lower_conv_with(const Op& op, LowerCtx& ctx, kernels::Activation act,
                                      kernels::ActivationBounds bounds) {
  ValueRef x = ctx.input(op, "x"), w = ctx.input(op, "weight"), o = ctx.output(op);
  const ConvParams p = conv_params(op, ctx, x, w);
  const size_t nsp = p.nsp;
  const std::vector<int64_t>&strides = p.strides, &dilations = p.dilations, &pad = p.pad;
  const int64_t groups = p.groups;
  const std::string& pad_type = p.pad_type;
  if (groups < 1) throw_op_error(op, "groups must be >= 1");
  kernels::ConvGeometry g;
  g.batch = x.shape[0];
  g.cin = x.shape[1];
  g.cout = w.shape[0];
  g.groups = groups;
  if (g.cin % groups != 0 || w.shape[1] != g.cin / groups || g.cout % groups != 0)
    throw_op_error(op, "channels do not fit groups = " + std::to_string(groups));
  Shape out = {g.batch, g.cout};
  // Spatial dim i goes to kernel slot 3 - nsp + i; the leading slots stay size 1.
  for (size_t i = 0; i < nsp; ++i) {
    const size_t k = 3 - nsp + i;
    const int64_t in = x.shape[2 + i], s = strides[i], ek = (w.shape[2 + i] - 1) * dilations[i] + 1;
    if (s < 1 || dilations[i] < 1) throw_op_error(op, "strides and dilations must be >= 1");
    const auto [total, before] = spatial_pad(op, pad_type, pad, i, in, s, ek);
    g.in[k] = in;
    g.kernel[k] = w.shape[2 + i];
    g.stride[k] = s;
    g.dilation[k] = dilations[i];
    g.pad_before[k] = before;
    g.out[k] = floor_div(in + total - ek, s) + 1;
    if (g.out[k] <= 0) throw_op_error(op, "spatial dim " + std::to_string(i) + " gets no output");
    out.push_back(g.out[k]);
  }
  if (out != o.shape)
    throw_op_error(op, "conv gives shape " + shape_str(out) + " but the output is declared " + shape_str(o.shape));
  int ib = -1;
  if (op.has("bias")) {
    ValueRef b = ctx.input(op, "bias");
    require_float(op, {b});
    if (b.numel() != g.cout) throw_op_error(op, "bias must have one value per output channel");
    ib = b.id;
  }
  // Constant weights (the usual case) are packed now; others are read at run time.
  std::shared_ptr<Tensor> wholder;
  const float* wconst = const_f32(ctx.const_value(op, "weight"), wholder);
  auto kern = std::make_shared<const kernels::ConvKernel>(g, wconst, act, bounds);
  int ix = x.id, iw = w.id, io = o.id;
  std::string name = kern->uses_gemm() ? "conv:gemm" : "conv:direct";
  if (act != kernels::Activation::none) name += std::string("+") + kernels::activation_name(act);
  auto step = make_step(name, op,
                        [=](const Frame& f) {
                          kern->run(f.at<float>(ix), f.at<float>(iw), ib >= 0 ? f.at<float>(ib) : nullptr,
                                    f.at<float>(io));
                        });
  step->info.flops = 2.0 * double(o.numel()) * double(w.numel() / g.cout);
  step->info.bytes = 4.0 * double(x.numel() + w.numel() + o.numel());
  return step;
}

namespace {

std::unique_ptr<Step> lower_conv(const Op& op, LowerCtx& ctx) {
  return lower_conv_with(op, ctx, kernels::Activation::none, {});
}

kernels::Activation activation(const Op& op, LowerCtx& ctx, const std::string& key, const std::string& def) {
  std::string a = ctx.const_str(op, key, def);
  for (char& ch : a) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  // scaled_tanh with its default alpha = beta = 1, as the reference reads it.
  if (a == "scaled_tanh") return kernels::Activation::tanh;
  if (a == "linear") return kernels::Activation::none;
  if (a == "sigmoid" || a == "tanh" || a == "relu" || a == "hard_sigmoid") return activation_named(op, a);
  throw_op_error(op, "unsupported activation '" + a + "'");
}

// The value id of an optional float input of `n` elements, or -1 when absent.
int optional_vector(const Op& op, LowerCtx& ctx, const std::string& key, int64_t n) {
  if (!op.has(key)) return -1;
  ValueRef v = ctx.input(op, key);
  require_float(op, {v});
  if (v.numel() != n) throw_op_error(op, "'" + key + "' must have " + std::to_string(n) + " values");
  return v.id;
}

// conv_transpose: every input element scattered through the kernel into the
// full output ((in - 1) * stride + dilated kernel per dim), of which the
// window starting `before` elements in is kept: `custom` pads, `same` crops
// floor(excess / 2) in front; output_shape fixes the size (positions past
// the full output hold the bias). Direct loops, spatial dims as three (the
// leading ones size 1), one output channel group at a time.
std::unique_ptr<Step> lower_conv_transpose(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), w = ctx.input(op, "weight"), o = ctx.output(op);
  const ConvParams p = conv_params(op, ctx, x, w);
  const size_t rank = x.shape.size(), nsp = p.nsp;
  const std::vector<int64_t>&strides = p.strides, &dilations = p.dilations, &pad = p.pad;
  const int64_t groups = p.groups;
  const std::string& pad_type = p.pad_type;
  const int64_t batch = x.shape[0], cin = x.shape[1];
  if (groups < 1 || cin % groups != 0 || w.shape[0] != cin)
    throw_op_error(op, "weight " + shape_str(w.shape) + " does not fit x " + shape_str(x.shape) + " with groups = " +
                           std::to_string(groups));
  const int64_t cig = cin / groups, cog = w.shape[1], cout = cog * groups;
  std::vector<int64_t> given;
  if (op.has("output_shape")) given = ctx.const_ints(op, "output_shape");
  std::array<int64_t, 3> in{1, 1, 1}, k{1, 1, 1}, st{1, 1, 1}, dil{1, 1, 1}, out{1, 1, 1}, before{0, 0, 0};
  Shape want = {batch, cout};
  for (size_t i = 0; i < nsp; ++i) {
    const size_t d = 3 - nsp + i;
    in[d] = x.shape[2 + i], k[d] = w.shape[2 + i], st[d] = strides[i], dil[d] = dilations[i];
    if (st[d] < 1 || dil[d] < 1) throw_op_error(op, "strides and dilations must be >= 1");
    const int64_t full = (in[d] - 1) * st[d] + (k[d] - 1) * dil[d] + 1;
    if (pad_type == "valid") out[d] = full;
    else if (pad_type == "custom") out[d] = full - pad[2 * i] - pad[2 * i + 1], before[d] = pad[2 * i];
    else if (pad_type == "same") out[d] = in[d] * st[d];
    else throw_op_error(op, "pad_type must be valid, same or custom, got '" + pad_type + "'");
    if (!given.empty()) {
      if (given.size() != rank) throw_op_error(op, "output_shape must have one value per dim of x");
      out[d] = given[2 + i];
    }
    if (pad_type == "same") before[d] = std::max<int64_t>(0, full - out[d]) / 2;
    if (out[d] <= 0) throw_op_error(op, "spatial dim " + std::to_string(i) + " gets no output");
    want.push_back(out[d]);
  }
  if (want != o.shape)
    throw_op_error(op, "conv_transpose gives shape " + shape_str(want) + " but the output is declared " +
                           shape_str(o.shape));
  int ib = -1;
  if (op.has("bias")) {
    ValueRef b = ctx.input(op, "bias");
    require_float(op, {b});
    if (b.numel() != cout) throw_op_error(op, "bias must have one value per output channel");
    ib = b.id;
  }
  const int64_t nin = in[0] * in[1] * in[2], nk = k[0] * k[1] * k[2], nout = out[0] * out[1] * out[2];
  int ix = x.id, iw = w.id, io = o.id;
  auto step = make_step("conv_transpose:direct", op, [=](const Frame& f) {
    const float* xp = f.at<float>(ix);
    const float* wp = f.at<float>(iw);
    const float* bp = ib >= 0 ? f.at<float>(ib) : nullptr;
    float* yp = f.at<float>(io);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t oc = 0; oc < cout; ++oc) std::fill_n(yp + (n * cout + oc) * nout, nout, bp ? bp[oc] : 0.0f);
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t ic = 0; ic < cin; ++ic) {
        const int64_t g = ic / cig;
        const float* xc = xp + (n * cin + ic) * nin;
        for (int64_t ocl = 0; ocl < cog; ++ocl) {
          float* yc = yp + (n * cout + g * cog + ocl) * nout;
          const float* wk = wp + (ic * cog + ocl) * nk;
          for (int64_t p0 = 0; p0 < in[0]; ++p0)
            for (int64_t p1 = 0; p1 < in[1]; ++p1)
              for (int64_t p2 = 0; p2 < in[2]; ++p2) {
                const float v = xc[(p0 * in[1] + p1) * in[2] + p2];
                for (int64_t k0 = 0; k0 < k[0]; ++k0) {
                  const int64_t q0 = p0 * st[0] + k0 * dil[0] - before[0];
                  if (q0 < 0 || q0 >= out[0]) continue;
                  for (int64_t k1 = 0; k1 < k[1]; ++k1) {
                    const int64_t q1 = p1 * st[1] + k1 * dil[1] - before[1];
                    if (q1 < 0 || q1 >= out[1]) continue;
                    for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                      const int64_t q2 = p2 * st[2] + k2 * dil[2] - before[2];
                      if (q2 < 0 || q2 >= out[2]) continue;
                      yc[(q0 * out[1] + q1) * out[2] + q2] += v * wk[(k0 * k[1] + k1) * k[2] + k2];
                    }
                  }
                }
              }
        }
      }
  });
  step->info.flops = 2.0 * double(x.numel()) * double(cog * nk);
  step->info.bytes = 4.0 * double(x.numel() + w.numel() + o.numel());
  return step;
}

std::unique_ptr<Step> lower_lstm(const Op& op, LowerCtx& ctx) {
  ValueRef x = ctx.input(op, "x"), h0 = ctx.input(op, "initial_h"), c0 = ctx.input(op, "initial_c");
  ValueRef y = ctx.output(op, 0), hn = ctx.output(op, 1), cn = ctx.output(op, 2);
  require_float(op, {x, h0, c0});
  if (x.shape.size() != 3) throw_op_error(op, "x must be [seq, batch, input_size]");
  kernels::LstmConfig cfg;
  cfg.seq = x.shape[0];
  cfg.batch = x.shape[1];
  cfg.input = x.shape[2];
  const std::string dir = ctx.const_str(op, "direction", "forward");
  if (dir != "forward" && dir != "reverse" && dir != "bidirectional")
    throw_op_error(op, "unknown direction '" + dir + "'");
  cfg.directions = dir == "bidirectional" ? 2 : 1;
  cfg.backward_in_processing_order = dir == "reverse";
  cfg.output_sequence = ctx.const_bool(op, "output_sequence", false);
  cfg.recurrent = activation(op, ctx, "recurrent_activation", "sigmoid");
  cfg.cell = activation(op, ctx, "cell_activation", "tanh");
  cfg.output = activation(op, ctx, "activation", "tanh");
  cfg.clip = op.has("clip");
  if (cfg.clip) cfg.clip_value = float(ctx.const_float(op, "clip"));
  // Per direction: value ids of weight_ih, weight_hh, bias, peephole.
  struct Ids { int wih, whh, bias, peephole; };
  std::vector<Ids> ids;
  for (int d = 0; d < cfg.directions; ++d) {
    const std::string sfx = d == 1 ? "_back" : "";
    ValueRef wih = ctx.input(op, "weight_ih" + sfx), whh = ctx.input(op, "weight_hh" + sfx);
    require_float(op, {wih, whh});
    if (whh.shape.size() != 2) throw_op_error(op, "weight_hh" + sfx + " must have rank 2");
    if (d == 0) cfg.hidden = whh.shape[1];
    const int64_t H = cfg.hidden;
    if (wih.shape != Shape{4 * H, cfg.input} || whh.shape != Shape{4 * H, H})
      throw_op_error(op, "weight_ih" + sfx + " / weight_hh" + sfx + " must be [4*H, input_size] / [4*H, H]");
    ids.push_back({wih.id, whh.id, optional_vector(op, ctx, "bias" + sfx, 4 * H),
                   optional_vector(op, ctx, "peephole" + sfx, 3 * H)});
  }
  const int64_t hd = cfg.directions * cfg.hidden;
  const Shape state = {cfg.batch, hd}, ys = {cfg.output_sequence ? cfg.seq : 1, cfg.batch, hd};
  if (h0.shape != state || c0.shape != state) throw_op_error(op, "initial_h / initial_c must be [batch, DIRECTIONS*H]");
  if (y.shape != ys || hn.shape != state || cn.shape != state)
    throw_op_error(op, "declared output shapes do not match the lstm's");
  const bool backward = dir == "reverse";
  int ix = x.id, ih = h0.id, ic = c0.id, iy = y.id, ihn = hn.id, icn = cn.id;
  // Constant weights (the usual case) are packed now for the GEMM path.
  std::vector<std::shared_ptr<Tensor>> holders(4);
  kernels::LstmDirection packdirs[2];
  bool all_const = true;
  for (int d = 0; d < cfg.directions; ++d) {
    const std::string sfx = d == 1 ? "_back" : "";
    packdirs[d].w_ih = const_f32(ctx.const_value(op, "weight_ih" + sfx), holders[size_t(2 * d)]);
    packdirs[d].w_hh = const_f32(ctx.const_value(op, "weight_hh" + sfx), holders[size_t(2 * d + 1)]);
    packdirs[d].backward = backward || d == 1;
    all_const = all_const && packdirs[d].w_ih && packdirs[d].w_hh;
  }
  std::unique_ptr<Step> step;
  if (all_const) {
    auto kern = std::make_shared<const kernels::LstmKernel>(cfg, packdirs);
    step = make_step("lstm:gemm", op, [=](const Frame& f) {
      const float* bias[2] = {nullptr, nullptr};
      const float* peep[2] = {nullptr, nullptr};
      for (size_t d = 0; d < ids.size(); ++d) {
        if (ids[d].bias >= 0) bias[d] = f.at<float>(ids[d].bias);
        if (ids[d].peephole >= 0) peep[d] = f.at<float>(ids[d].peephole);
      }
      kern->run(f.at<float>(ix), f.at<float>(ih), f.at<float>(ic), bias, peep, f.at<float>(iy), f.at<float>(ihn),
                f.at<float>(icn));
    });
  } else {
    // Gate scratch, allocated once here: a plan runs one call at a time.
    auto gates = std::make_shared<std::vector<float>>(size_t(4 * cfg.hidden));
    step = make_step("lstm", op, [=](const Frame& f) {
      kernels::LstmDirection dirs[2];
      for (size_t d = 0; d < ids.size(); ++d) {
        dirs[d].w_ih = f.at<float>(ids[d].wih);
        dirs[d].w_hh = f.at<float>(ids[d].whh);
        dirs[d].bias = ids[d].bias >= 0 ? f.at<float>(ids[d].bias) : nullptr;
        dirs[d].peephole = ids[d].peephole >= 0 ? f.at<float>(ids[d].peephole) : nullptr;
        dirs[d].backward = backward || d == 1;
      }
      kernels::lstm_f32(f.at<float>(ix), f.at<float>(ih), f.at<float>(ic), dirs, cfg, f.at<float>(iy),
                        f.at<float>(ihn), f.at<float>(icn), gates->data());
    });
  }
  step->info.flops = 2.0 * double(cfg.directions * cfg.seq * cfg.batch * 4 * cfg.hidden * (cfg.input + cfg.hidden));
  return step;
}

}  // namespace

void register_nn_lowerings() {
  register_lowering("conv", lower_conv);
  register_lowering("conv_transpose", lower_conv_transpose);
  register_lowering("lstm", lower_lstm);
}

}  // namespace milrt::rt
