// Programs of pointwise conv chains for the fuse-conv-chain tests: each link
// a conv with its bias (none, conv's own, or a per-channel add) and its
// activation, written as MIL text with random constant weights.
#pragma once
#include <string>
#include <vector>

#include "test_pass_rewrite_util.h"

namespace milrt::test::rewrite {

struct LinkSpec {
  int64_t cout;
  std::string bias = "conv";   // none | conv | add
  std::string act = "relu";    // none | relu | silu | sigmoid | clip | relu_clip
  int64_t kernel = 1, stride = 1, groups = 1;
};

inline std::string dtype_word(DType dt) { return dt == DType::FP16 ? "fp16" : "fp32"; }

inline std::string tensor_type(DType dt, const Shape& s) {
  std::string r = "tensor<" + dtype_word(dt) + ", [";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]>";
}

// The chain over x of shape `xs` (1 or 2 spatial dims; strides and kernels
// apply to the last one). Values: conv c<i>, bias add d<i>, activation a<i>
// (relu_clip: r<i> then a<i>). `out` receives the last value's name. Weights
// are uniform in ±1/sqrt(fan-in), so values keep their scale along a chain.
inline std::string chain_body(DType dt, Shape xs, const std::vector<LinkSpec>& links, std::string& out,
                              uint64_t seed = 1) {
  std::string body, cur = "x";
  const size_t nsp = xs.size() - 2;
  for (size_t i = 0; i < links.size(); ++i) {
    const LinkSpec& l = links[i];
    const std::string k = std::to_string(i);
    const int64_t cin = xs[1], cig = cin / l.groups;
    Shape ws = {l.cout, cig};
    for (size_t d = 0; d < nsp; ++d) ws.push_back(d + 1 == nsp ? l.kernel : 1);
    const double r = 1.0 / std::sqrt(double(cig * l.kernel));
    body += const_stmt("w" + k, random(dt, ws, seed * 100 + i, -r, r));
    Shape ys = xs;
    ys[1] = l.cout;
    ys.back() = (xs.back() - 1) / l.stride + 1;   // pad_type same
    const std::string t = tensor_type(dt, ys), ones = nsp == 1 ? "[1]>([1])" : "[2]>([1, 1])";
    const std::string strides = nsp == 1 ? "[1]>([" + std::to_string(l.stride) + "])"
                                         : "[2]>([1, " + std::to_string(l.stride) + "])";
    std::string conv = "conv(x = " + cur + ", weight = w" + k;
    if (l.bias == "conv") {
      body += const_stmt("bias" + k, random(dt, {l.cout}, seed * 100 + 50 + i, -0.5, 0.5));
      conv += ", bias = bias" + k;
    }
    conv += ", pad_type = string(\"same\"), strides = tensor<int32, " + strides + ", dilations = tensor<int32, " +
            ones + ", groups = int32(" + std::to_string(l.groups) + "))";
    body += stmt(t, "c" + k, conv);
    cur = "c" + k;
    if (l.bias == "add") {
      Shape bs(ys.size() - 1, 1);
      bs[0] = l.cout;
      body += const_stmt("ab" + k, random(dt, bs, seed * 100 + 70 + i, -0.5, 0.5));
      body += stmt(t, "d" + k, "add(x = " + cur + ", y = ab" + k + ")");
      cur = "d" + k;
    }
    const std::string lit = dtype_word(dt);
    if (l.act == "relu_clip") {
      body += stmt(t, "r" + k, "relu(x = " + cur + ")");
      body += stmt(t, "a" + k, "clip(x = r" + k + ", alpha = " + lit + "(-1), beta = " + lit + "(0.75))");
      cur = "a" + k;
    } else if (l.act == "clip") {
      body += stmt(t, "a" + k, "clip(x = " + cur + ", alpha = " + lit + "(-0.25), beta = " + lit + "(0.5))");
      cur = "a" + k;
    } else if (l.act != "none") {
      body += stmt(t, "a" + k, l.act + "(x = " + cur + ")");
      cur = "a" + k;
    }
    xs = ys;
  }
  out = cur;
  return body;
}

// A program main(x) returning the chain's last value.
inline Program chain_program(DType dt, const Shape& xs, const std::vector<LinkSpec>& links, uint64_t seed = 1,
                             const std::string& opset = "ios18") {
  std::string out;
  const std::string body = chain_body(dt, xs, links, out, seed);
  return parse_program(tensor_type(dt, xs) + " x", body, out, opset);
}

}  // namespace milrt::test::rewrite
