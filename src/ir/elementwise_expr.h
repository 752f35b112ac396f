// The expression language of milrt_elementwise: a small functional
// expression over the op's inputs %0, %1, ... and float literals, e.g.
// "add(%1, mul(%0, sigmoid(%0)))" or "clip(mul(%0, 0.5), 0, 6)".
//
// Function names are MIL op names with MIL's semantics (coremltools'
// elementwise_*.py and activation.py); their scalar parameters (clip's alpha
// and beta, leaky_relu's alpha, log's epsilon, ...) follow as trailing
// literals in MIL's input order. gelu's modes are separate names: gelu
// (EXACT), gelu_tanh (TANH_APPROXIMATION), gelu_sigmoid (SIGMOID_APPROXIMATION).
// An omitted epsilon of log/rsqrt/inverse takes MIL's default (as a double).
//
// The IR owns the syntax tree; the verifier, the reference executor and the
// runtime each interpret it with their own code.
#pragma once
#include <string>
#include <vector>

namespace milrt::ew {

struct Expr {
  enum class Kind { Input, Literal, Call };
  Kind kind = Kind::Literal;
  int input = -1;             // Input: the index k of %k
  double value = 0;           // Literal
  std::string fn;             // Call: the function name
  std::vector<Expr> args;     // Call: tensor operands, then literal parameters

  static Expr of_input(int k) { Expr e; e.kind = Kind::Input; e.input = k; return e; }
  static Expr of_literal(double v) { Expr e; e.kind = Kind::Literal; e.value = v; return e; }
  static Expr call(std::string fn, std::vector<Expr> args) {
    Expr e; e.kind = Kind::Call; e.fn = std::move(fn); e.args = std::move(args); return e;
  }
};

// What the language knows of a function: how many tensor operands it takes
// (any expression) and how many trailing literal parameters.
struct FnInfo {
  const char* name;
  int operands;                 // 1 (unary, activation) or 2 (binary)
  int min_params, max_params;
  double param_default = 0;     // of the one optional parameter (epsilon)
};
const FnInfo* find_fn(const std::string& name);
const std::vector<FnInfo>& functions();   // every supported function

// Parses and checks `text`: known functions, operand and parameter counts,
// parameters literal, every %k below `num_inputs` (-1: no bound). Throws
// Error("expr \"...\": column N: msg") on anything else.
Expr parse_expr(const std::string& text, int num_inputs = -1);
// Checks a tree built in code, with parse_expr's rules.
void check_expr(const Expr& e, int num_inputs);
// The text parse_expr reads back into the same tree (literals exact).
std::string print_expr(const Expr& e);
// A literal as the language spells it: shortest exact decimal, inf, -inf, nan.
std::string print_number(double v);
// Calls of functions in the tree (its size, for the pass's statistics).
int count_calls(const Expr& e);

}  // namespace milrt::ew
