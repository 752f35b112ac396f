// milrt_conv_chain: consecutive pointwise (1x1, stride 1, unpadded, one
// group) convolutions, each with its bias and activation, made only by the
// fuse-conv-chain pass:
//
//   milrt_conv_chain(x, weights = (w1, ..., wk), biases = (b1, ..., bk),
//                    activations = "a1 ... ak", alphas?, betas?)[fused_from = "..."]
//     = link_k(... link_1(x)),   link_i(v) = a_i(conv(v, w_i) + b_i)
//
// x is [N, C0, spatial...] (1 to 3 spatial dims); w_i is [Ci, Ci-1, 1, ...]
// with x's rank; b_i has Ci values of x's dtype; a_i is none, relu, sigmoid,
// silu or clip, whose bounds are alphas[i], betas[i] (fp32 [k] constants,
// needed when some link clips). The result is [N, Ck, spatial...].
#include <sstream>

#include "ir/op_registry.h"

namespace milrt {
namespace {

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> r;
  for (std::string w; in >> w;) r.push_back(w);
  return r;
}

void infer_conv_chain(InferCtx& c) {
  const Type& x = c.type("x");
  if (!x.is_tensor() || (x.dtype != DType::FP16 && x.dtype != DType::FP32) || x.shape.size() < 3 ||
      x.shape.size() > 5)
    c.fail("x must be an fp16 or fp32 tensor of rank 3 to 5, got " + x.str());
  const std::vector<const InferInput*> ws = c.tuple("weights"), bs = c.tuple("biases");
  const size_t k = ws.size();
  if (bs.size() != k)
    c.fail("needs one bias per weight, got " + std::to_string(bs.size()) + " for " + std::to_string(k));
  const auto acts = c.const_str("activations");
  if (!acts) c.fail("activations must be a constant string");
  const std::vector<std::string> a = words(*acts);
  if (a.size() != k) c.fail("activations must name one activation per weight, got '" + *acts + "'");
  bool clips = false;
  for (const std::string& s : a) {
    if (s != "none" && s != "relu" && s != "clip" && s != "sigmoid" && s != "silu")
      c.fail("activation must be none, relu, clip, sigmoid or silu, got '" + s + "'");
    clips = clips || s == "clip";
  }
  for (const char* key : {"alphas", "betas"}) {
    if (clips && !c.has(key)) c.fail(std::string("a clip needs '") + key + "'");
    if (!c.has(key)) continue;
    const Tensor* v = c.const_value(key);
    if (!v || v->dtype() != DType::FP32 || v->shape() != Shape{int64_t(k)})
      c.fail(std::string("'") + key + "' must be a constant fp32 [" + std::to_string(k) + "] tensor");
  }
  int64_t ch = x.shape[1];
  for (size_t i = 0; i < k; ++i) {
    const Type& w = ws[i]->type;
    bool ok = !ws[i]->is_tuple && w.is_tensor() && w.shape.size() == x.shape.size() && w.shape[0] >= 1 &&
              (ch < 0 || w.shape[1] == ch);
    for (size_t d = 2; ok && d < w.shape.size(); ++d) ok = w.shape[d] == 1;
    if (!ok)
      c.fail("weights[" + std::to_string(i) + "] " + w.str() + " must be [C, " + std::to_string(ch) +
             ", 1...] with x's rank");
    if (w.dtype != DType::FP16 && w.dtype != DType::FP32)
      c.fail("weights[" + std::to_string(i) + "] must be fp16 or fp32, got " + w.str());
    ch = w.shape[0];
    const Type& b = bs[i]->type;
    if (bs[i]->is_tuple || !b.is_tensor() || b.dtype != x.dtype || shape_numel(b.shape) != ch)
      c.fail("biases[" + std::to_string(i) + "] " + b.str() + " must hold " + std::to_string(ch) +
             " values of x's dtype");
  }
  if (c.has("fused_from") && !c.const_str("fused_from")) c.fail("fused_from must be a constant string");
  Shape out = x.shape;
  out[1] = ch;
  c.set_out(Type::tensor(x.dtype, out));
}

}  // namespace

void register_conv_chain_ops() {
  register_op({"milrt_conv_chain",
               {{"x"}, {"weights"}, {"biases"}, {"activations"}, {"alphas", false}, {"betas", false},
                {"fused_from", false}},
               1, 1, infer_conv_chain});
}

}  // namespace milrt
