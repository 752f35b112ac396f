// Helpers shared by the tests: running MIL text on the reference executor,
// locating ../shared test data, and building tensors from literals.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "milrt/error.h"
#include "milrt/ir.h"
#include "milrt/mil.h"
#include "milrt/reference.h"
#include "milrt/tensor.h"

namespace milrt::test {

// Parses a whole program from text (blob paths relative to `base_dir`),
// verifies it strictly (no layout-idiom legalization: tests of op families
// must see the shape rules as written) and runs function "main" on the
// reference executor.
TensorMap run_program(const std::string& text, const TensorMap& inputs,
                      const std::string& base_dir = ".");

// `program(1.3) { func main<OPSET>(PARAMS) { BODY } -> (OUTS); }`, where
// `params` is the parameter list text, e.g. "tensor<fp32, [2, 3]> x".
std::string program_text(const std::string& params, const std::string& body, const std::string& outs,
                         const std::string& opset = "ios18");

// Runs program_text(params, body, outs) with run_program.
TensorMap run_body(const std::string& params, const std::string& body, const std::string& outs,
                   const TensorMap& inputs);

// One statement `TYPE NAME = EXPR[name = "NAME"];`.
std::string stmt(const std::string& type, const std::string& name, const std::string& expr);
// Runs the single statement `TYPE z = EXPR` on `inputs` and returns z.
Tensor run_op(const std::string& params, const std::string& type, const std::string& expr, const TensorMap& inputs);
// Expects run_op to throw an Error that names `op` and contains `fragment`.
void expect_error(const std::string& params, const std::string& type, const std::string& expr,
                  const TensorMap& inputs, const std::string& op, const std::string& fragment = "");

// A tensor of `dtype` and `shape` holding `values` (rounded to dtype).
Tensor make(DType dtype, Shape shape, const std::vector<double>& values);
// All elements of a tensor as doubles.
std::vector<double> values(const Tensor& t);

// n floats uniform in [lo, hi) from a fixed seed (mt19937_64).
std::vector<float> uniform_floats(size_t n, uint64_t seed, float lo, float hi);

// The shared/ folder beside the repository, or "" when absent (a user's clone).
std::string shared_dir();
// Skips the current test with a visible message when ../shared is absent.
#define MILRT_REQUIRE_SHARED()                                                        \
  do {                                                                                \
    if (::milrt::test::shared_dir().empty())                                          \
      GTEST_SKIP() << "../shared is absent (a user's clone): test data unavailable";  \
  } while (0)

// A fresh empty temporary directory, removed at process exit.
std::string temp_dir(const std::string& tag);

// Expects f() to throw milrt::Error with a one-line message containing `fragment`.
template <typename F>
void expect_error_containing(F f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown; expected one containing '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "multi-line: " << e.what();
  }
}

// The message of the milrt::Error f() throws, or "<no error>".
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// v rounded to the nearest-even bf16 (as GemmMath::bf16 rounds operands), in
// double: for fp64 references of bf16 products. Finite values only.
double bf16_round(double v);

}  // namespace milrt::test
