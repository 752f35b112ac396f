// Helpers shared by the linalg tests (test_linalg*.cpp): building and running
// small MIL functions whose inputs are all function parameters, deterministic
// test data, and comparisons against fp64 expectations.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "milrt/dtype.h"
#include "support/test_util.h"

namespace milrt::test::linalg {

// One function parameter with its value.
struct In {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<double> v;
};

inline std::string ttype(DType dt, const Shape& s) {
  return "tensor<" + std::string(dtype_name(dt)) + ", " + shape_str(s) + ">";
}

// `count` values on a 1/16 grid in [-2, 2): exact in fp16 and fp32, so the
// only rounding in a test is the op's own.
inline std::vector<double> grid(int64_t count, uint32_t seed) {
  std::vector<double> v;
  uint32_t s = seed * 2654435761u + 12345u;
  for (int64_t i = 0; i < count; ++i) {
    s = s * 1664525u + 1013904223u;
    v.push_back(double(int((s >> 16) % 64) - 32) / 16.0);
  }
  return v;
}

inline In input(const std::string& name, Shape shape, uint32_t seed, DType dt = DType::FP32) {
  std::vector<double> v = grid(shape_numel(shape), seed);
  return {name, dt, std::move(shape), std::move(v)};
}

// Runs BODY (statements) in a function taking `ins` and returning `outs`.
inline TensorMap run_ops(const std::vector<In>& ins, const std::string& body, const std::string& outs) {
  std::string params;
  TensorMap m;
  for (auto& in : ins) {
    params += (params.empty() ? "" : ", ") + ttype(in.dtype, in.shape) + " " + in.name;
    m[in.name] = make(in.dtype, in.shape, in.v);
  }
  return run_body(params, body, outs, m);
}

// Parses and verifies (without the layout-idiom legalization that run_body
// applies) a function taking `params` text.
inline void verify_body(const std::string& params, const std::string& body, const std::string& outs) {
  verify(parse_mil("program(1.3)\n{\n  func main<ios18>(" + params + ") {\n" + body + "\n  } -> (" + outs + ");\n}\n",
                   "<test>", "."));
}

// One statement `TYPE OUT = EXPR[name = string("OUT")];`.
inline std::string stmt(const std::string& type, const std::string& out, const std::string& expr) {
  return "    " + type + " " + out + " = " + expr + "[name = string(\"" + out + "\")];\n";
}

inline std::string ints_lit(const std::vector<int64_t>& v) {
  std::string s = "tensor<int32, [" + std::to_string(v.size()) + "]>([";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "])";
}

// t has shape s and matches `want` to a relative 1e-6 (fp32 results of fp64 math).
inline void expect_close(const Tensor& t, const Shape& s, const std::vector<double>& want, double rel = 1e-6) {
  ASSERT_EQ(t.shape(), s) << shape_str(t.shape());
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << "element " << i;
}

// `fn` throws a milrt::Error whose message names `op`.
template <class F>
void expect_error_naming(F fn, const std::string& op, const std::string& detail = "") {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one naming " << op;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(op), std::string::npos) << msg;
    if (!detail.empty()) {
      EXPECT_NE(msg.find(detail), std::string::npos) << msg;
    }
  }
}

}  // namespace milrt::test::linalg
