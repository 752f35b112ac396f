#include "ir/elementwise_expr.h"

#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "milrt/error.h"

namespace milrt::ew {

const std::vector<FnInfo>& functions() {
  static const std::vector<FnInfo> fns = {
      {"add", 2, 0, 0}, {"sub", 2, 0, 0}, {"mul", 2, 0, 0}, {"real_div", 2, 0, 0}, {"maximum", 2, 0, 0},
      {"minimum", 2, 0, 0}, {"pow", 2, 0, 0}, {"floor_div", 2, 0, 0}, {"mod", 2, 0, 0},
      {"abs", 1, 0, 0}, {"exp", 1, 0, 0}, {"exp2", 1, 0, 0}, {"sqrt", 1, 0, 0}, {"sin", 1, 0, 0},
      {"cos", 1, 0, 0}, {"tan", 1, 0, 0}, {"asin", 1, 0, 0}, {"acos", 1, 0, 0}, {"atan", 1, 0, 0},
      {"atanh", 1, 0, 0}, {"sinh", 1, 0, 0}, {"cosh", 1, 0, 0}, {"tanh", 1, 0, 0}, {"erf", 1, 0, 0},
      {"floor", 1, 0, 0}, {"ceil", 1, 0, 0}, {"round", 1, 0, 0}, {"sign", 1, 0, 0}, {"square", 1, 0, 0},
      {"relu", 1, 0, 0}, {"relu6", 1, 0, 0}, {"sigmoid", 1, 0, 0}, {"silu", 1, 0, 0}, {"softplus", 1, 0, 0},
      {"softsign", 1, 0, 0}, {"gelu", 1, 0, 0}, {"gelu_tanh", 1, 0, 0}, {"gelu_sigmoid", 1, 0, 0},
      {"log", 1, 0, 1, 1e-45}, {"rsqrt", 1, 0, 1, 1e-12}, {"inverse", 1, 0, 1, 1e-4},
      {"leaky_relu", 1, 1, 1}, {"elu", 1, 1, 1}, {"thresholded_relu", 1, 1, 1}, {"threshold", 1, 1, 1},
      {"clip", 1, 2, 2}, {"sigmoid_hard", 1, 2, 2}, {"scaled_tanh", 1, 2, 2}, {"linear_activation", 1, 2, 2},
      {"clamped_relu", 1, 2, 2},
  };
  return fns;
}

const FnInfo* find_fn(const std::string& name) {
  for (const FnInfo& f : functions())
    if (name == f.name) return &f;
  return nullptr;
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, int num_inputs) : s_(text), n_(num_inputs) {}

  Expr parse() {
    Expr e = expr();
    skip();
    if (i_ != s_.size()) fail("unexpected '" + std::string(1, s_[i_]) + "' after the expression");
    return e;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) const {
    throw Error("expr \"" + s_ + "\": column " + std::to_string(i_ + 1) + ": " + msg);
  }
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool ident_char(size_t k) const {
    return k < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[k])) || s_[k] == '_');
  }

  Expr expr() {
    skip();
    if (i_ >= s_.size()) fail("expected an expression");
    char c = s_[i_];
    if (c == '%') {
      size_t start = ++i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      if (i_ == start || i_ - start > 6) fail("expected an input index after '%'");
      int k = std::atoi(s_.substr(start, i_ - start).c_str());
      if (n_ >= 0 && k >= n_) fail("%" + std::to_string(k) + " but the op has " + std::to_string(n_) + " inputs");
      return Expr::of_input(k);
    }
    size_t start = i_;
    if (std::isalpha(static_cast<unsigned char>(c))) {
      while (ident_char(i_)) ++i_;
      std::string name = s_.substr(start, i_ - start);
      skip();
      if (i_ < s_.size() && s_[i_] == '(') return call(name, start);
      if (name == "inf" || name == "nan") return Expr::of_literal(name == "inf" ? INFINITY : NAN);
      i_ = start;
      fail("expected '(' after '" + name + "'");
    }
    return Expr::of_literal(number());
  }

  double number() {
    size_t start = i_;
    bool neg = false;
    if (s_[i_] == '-' || s_[i_] == '+') neg = s_[i_++] == '-';
    if (s_.compare(i_, 3, "inf") == 0 && !ident_char(i_ + 3)) {
      i_ += 3;
      return neg ? -INFINITY : INFINITY;
    }
    double v = 0;
    auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
    if (ec == std::errc::invalid_argument || end == s_.data() + i_) {
      i_ = start;
      fail("expected a number, an input %k or a function call");
    }
    // Out of range: from_chars leaves v alone; strtod gives the rounded value (0 or inf).
    if (ec == std::errc::result_out_of_range) v = std::strtod(std::string(s_.data() + i_, end).c_str(), nullptr);
    i_ = size_t(end - s_.data());
    return neg ? -v : v;
  }

  Expr call(const std::string& name, size_t at) {
    ++i_;  // '('
    std::vector<Expr> args;
    skip();
    if (i_ < s_.size() && s_[i_] == ')') {
      ++i_;
    } else {
      while (true) {
        args.push_back(expr());
        skip();
        if (i_ < s_.size() && s_[i_] == ',') { ++i_; continue; }
        if (i_ < s_.size() && s_[i_] == ')') { ++i_; break; }
        fail("expected ',' or ')'");
      }
    }
    Expr e = Expr::call(name, std::move(args));
    size_t here = i_;
    i_ = at;
    check_call(e);
    i_ = here;
    return e;
  }

 public:
  void check_call(const Expr& e) const {
    const FnInfo* f = find_fn(e.fn);
    if (!f) fail("unknown function '" + e.fn + "'");
    int n = int(e.args.size());
    if (n < f->operands + f->min_params || n > f->operands + f->max_params) {
      std::string want = std::to_string(f->operands + f->min_params);
      if (f->max_params != f->min_params) want += " or " + std::to_string(f->operands + f->max_params);
      fail(e.fn + " takes " + want + " arguments, got " + std::to_string(n));
    }
    for (int k = f->operands; k < n; ++k)
      if (e.args[size_t(k)].kind != Expr::Kind::Literal)
        fail(e.fn + ": parameter " + std::to_string(k - f->operands + 1) + " must be a literal number");
  }

 private:
  const std::string& s_;
  int n_;
  size_t i_ = 0;
};

void check_tree(const Expr& e, int num_inputs, const std::string& text) {
  if (e.kind == Expr::Kind::Input) {
    if (e.input < 0 || (num_inputs >= 0 && e.input >= num_inputs))
      throw Error("expr \"" + text + "\": %" + std::to_string(e.input) + " but the op has " +
                  std::to_string(num_inputs) + " inputs");
    return;
  }
  if (e.kind != Expr::Kind::Call) return;
  Parser(text, num_inputs).check_call(e);
  for (const Expr& a : e.args) check_tree(a, num_inputs, text);
}

}  // namespace

Expr parse_expr(const std::string& text, int num_inputs) { return Parser(text, num_inputs).parse(); }

void check_expr(const Expr& e, int num_inputs) { check_tree(e, num_inputs, print_expr(e)); }

std::string print_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

std::string print_expr(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::Input: return std::string("%").append(std::to_string(e.input));  // (not "%" + s: GCC 12's -Wrestrict misfires on it)
    case Expr::Kind::Literal: return print_number(e.value);
    case Expr::Kind::Call: {
      std::string r = e.fn + "(";
      for (size_t i = 0; i < e.args.size(); ++i) r += (i ? ", " : "") + print_expr(e.args[i]);
      return r + ")";
    }
  }
  return "";
}

int count_calls(const Expr& e) {
  int n = e.kind == Expr::Kind::Call;
  for (const Expr& a : e.args) n += count_calls(a);
  return n;
}

}  // namespace milrt::ew
