// Building MIL programs in code. Everything milrt generates itself (test
// programs, training kernels, model builders) goes through this API and is
// printed as text only when text is wanted.
//
//   FunctionBuilder f("main");
//   Value x = f.input("x", Type::tensor(DType::FP16, {1, 64, 1, 16}));
//   Value w = f.constant("w", weights);
//   Value y = f.op("conv", "y", {{"x", x}, {"weight", w}});   // type inferred
//   f.output(y);
//   Program p = make_program({f.build()});
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "milrt/ir.h"

namespace milrt {

// A value defined in a function under construction.
struct Value {
  std::string name;
  Type type;
};

// An op input: a value, a literal, or a tuple of either.
struct Operand {
  Arg arg;
  Operand(const Value& v) : arg(Arg::of_var(v.name)) {}  // NOLINT: implicit by design
  Operand(Arg a) : arg(std::move(a)) {}                  // NOLINT
};

// Literal operands. Scalars are written in the program 1.3 dialect (`int32(1)`).
Arg lit(const Tensor& t);
Arg lit_bool(bool v);
Arg lit_i32(int64_t v);
Arg lit_f32(double v);
Arg lit_f16(double v);
Arg lit_str(const std::string& s);
Arg lit_i32s(const std::vector<int64_t>& v);   // tensor<int32, [n]>
Arg tuple(const std::vector<Operand>& elems);

class FunctionBuilder {
 public:
  explicit FunctionBuilder(std::string name, std::string opset = "ios18");
  // Continues an existing function (verified, static shapes): its params and
  // ops are kept, new ops are appended after them. Autodiff builds the
  // backward half of a program this way.
  explicit FunctionBuilder(const Function& existing);

  // A value already defined (param or op output) by name; throws Error if none.
  Value value(const std::string& name) const;
  bool has_value(const std::string& name) const;
  // A name not yet defined in the function: `prefix`, else `prefix_1`, `prefix_2`, ...
  std::string fresh_name(const std::string& prefix) const;

  Value input(const std::string& name, Type type);
  // A `const` op holding `value` (saved to weight.bin by save_model when large).
  Value constant(const std::string& name, const Tensor& value);
  // Adds an op with one output named `out`; its type comes from shape
  // inference (throws Error if inference fails or leaves a dim unknown).
  Value op(const std::string& type, const std::string& out,
           const std::vector<std::pair<std::string, Operand>>& inputs);
  // Adds an op with several outputs of inferred types.
  std::vector<Value> op_n(const std::string& type, const std::vector<std::string>& outs,
                          const std::vector<std::pair<std::string, Operand>>& inputs);
  void output(const Value& v);
  void clear_outputs() { fn_.outputs.clear(); }
  Function build() const { return fn_; }

 private:
  Function fn_;
  void* values_;  // ValueTable, kept opaque to keep this header small
  std::shared_ptr<void> values_owner_;
};

Program make_program(std::vector<Function> functions, std::string version = "1.3");

}  // namespace milrt
