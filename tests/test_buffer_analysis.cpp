// rt::decide_buffers, compile()'s buffer analysis, on functions written
// here: accumulator chains (which values live in the output's memory), the
// cases that must keep a buffer of their own, and state-alias errors.
#include <gtest/gtest.h>

#include "milrt/error.h"
#include "milrt/mil.h"
#include "runtime/buffer_analysis.h"
#include "support/test_util.h"

namespace milrt {
namespace {

Function function_of(const std::string& params, const std::string& body, const std::string& outs) {
  Program p = parse_mil(test::program_text(params, body, outs), "b.mil", ".");
  verify(p);
  return p.functions.at(0);
}

const std::string kParams = "tensor<fp32, [4, 3]> acc, tensor<fp32, [4, 3]> x, tensor<fp32, [4, 3]> y";

TEST(BufferAnalysis, AnInPlaceChainPutsTheAccumulatorAndItsValuesInTheOutput) {
  const Function f = function_of(kParams,
                                 test::stmt("tensor<fp32, [4, 3]>", "t", "add(x = acc, y = x)") +
                                     test::stmt("tensor<fp32, [4, 3]>", "s", "mul(x = t, y = y)"),
                                 "s");
  const rt::BufferDecisions d = rt::decide_buffers(f, {}, {{"s", "s", "acc"}});
  EXPECT_TRUE(d.accumulator_in_place.at("acc"));
  EXPECT_EQ(d.in_output, (std::map<std::string, std::string>{{"t", "s"}}));
}

TEST(BufferAnalysis, AChainValueWithAnotherReaderKeepsTheAccumulatorApart) {
  const Function f = function_of(kParams,
                                 test::stmt("tensor<fp32, [4, 3]>", "t", "add(x = acc, y = x)") +
                                     test::stmt("tensor<fp32, [4, 3]>", "s", "mul(x = t, y = y)") +
                                     test::stmt("tensor<fp32, [4, 3]>", "u", "sub(x = t, y = y)"),
                                 "s, u");
  const rt::BufferDecisions d = rt::decide_buffers(f, {}, {{"s", "s", "acc"}});
  EXPECT_FALSE(d.accumulator_in_place.at("acc"));
  EXPECT_TRUE(d.in_output.empty());
}

TEST(BufferAnalysis, AReaderThatCannotWorkInPlaceKeepsTheAccumulatorApart) {
  // matmul writes its output while still reading its operands.
  const Function f = function_of("tensor<fp32, [3, 3]> acc, tensor<fp32, [3, 3]> x",
                                 test::stmt("tensor<fp32, [3, 3]>", "t", "matmul(x = acc, y = x)") +
                                     test::stmt("tensor<fp32, [3, 3]>", "s", "add(x = t, y = x)"),
                                 "s");
  const rt::BufferDecisions d = rt::decide_buffers(f, {}, {{"s", "s", "acc"}});
  EXPECT_FALSE(d.accumulator_in_place.at("acc"));
}

TEST(BufferAnalysis, StateAliasesAreChecked) {
  const Function f = function_of(kParams, test::stmt("tensor<fp32, [4, 3]>", "s", "add(x = acc, y = x)"), "s");
  EXPECT_EQ(rt::decide_buffers(f, {{"s", "x"}}, {}).alias_of_input, (std::map<std::string, std::string>{{"x", "s"}}));
  for (const auto& [aliases, says] : std::vector<std::pair<std::map<std::string, std::string>, std::string>>{
           {{{"s", "nope"}}, "'nope' is not an input"}, {{{"q", "x"}}, "'q' is not an output"}}) {
    try {
      rt::decide_buffers(f, aliases, {});
      ADD_FAILURE() << "no error for " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace milrt
