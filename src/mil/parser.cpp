// Recursive-descent parser for both MIL dialects (program 1.0 and 1.3).
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "mil/lexer.h"
#include "milrt/error.h"
#include "milrt/mil.h"

namespace milrt {
namespace {
using mil::Tok;
using mil::Token;

constexpr int kMaxDepth = 64;  // nesting limit for types and payloads: no stack exhaustion

bool is_type_keyword(const std::string& s) {
  return s == "tensor" || s == "dict" || s == "list" || s == "tuple" || s == "state";
}

class Parser {
 public:
  Parser(const std::string& text, std::string path, std::string base_dir)
      : path_(std::move(path)), base_dir_(std::move(base_dir)), toks_(mil::lex(text, path_)) {}

  Program program() {
    Program p;
    p.path = path_;
    p.base_dir = base_dir_;
    expect_ident("program");
    expect("(");
    if (peek().kind != Tok::Number) fail_here("expected a program version such as 1.0");
    p.version = next().text;
    expect(")");
    if (is("[")) p.attrs = named_attrs();
    expect("{");
    while (!is("}")) {
      if (peek().kind == Tok::End) fail_here("expected '}' closing the program");
      p.functions.push_back(function());
    }
    expect("}");
    if (peek().kind != Tok::End) fail_here("unexpected text after the program");
    if (p.functions.empty()) fail_at(toks_.front(), "program has no functions");
    return p;
  }

 private:
  // ---- token helpers ----
  const Token& peek(size_t k = 0) const { return toks_[std::min(pos_ + k, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  bool is(const char* punct, size_t k = 0) const {
    return peek(k).kind == Tok::Punct && peek(k).text == punct;
  }
  bool is_ident(const char* s, size_t k = 0) const {
    return peek(k).kind == Tok::Ident && peek(k).text == s;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::End: return "end of file";
      case Tok::String: return "string \"" + t.text + "\"";
      default: return "'" + t.text + "'";
    }
  }
  SourceLoc loc(const Token& t) const { return {path_, t.line, t.col}; }
  [[noreturn]] void fail_at(const Token& t, const std::string& msg) const {
    throw Error(path_ + ":" + std::to_string(t.line) + ":" + std::to_string(t.col) + ": error: " + msg);
  }
  [[noreturn]] void fail_here(const std::string& msg) const {
    fail_at(peek(), msg + ", found " + describe(peek()));
  }
  void expect(const char* punct) {
    if (!is(punct)) fail_here(std::string("expected '") + punct + "'");
    next();
  }
  void expect_ident(const char* s) {
    if (!is_ident(s)) fail_here(std::string("expected '") + s + "'");
    next();
  }
  std::string name() {
    if (peek().kind != Tok::Ident) fail_here("expected a name");
    return next().text;
  }
  void enter(const Token& t) {
    if (++depth_ > kMaxDepth) fail_at(t, "nesting is too deep");
  }

  // ---- types ----
  int64_t dim() {
    if (is("?")) { next(); return -1; }
    const Token& t = peek();
    if (t.kind != Tok::Number) fail_here("expected a dimension (integer or '?')");
    next();
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(t.text.c_str(), &end, 10);
    if (errno || *end || v < 0) fail_at(t, "invalid dimension '" + t.text + "'");
    return v;
  }

  Type type() {
    const Token& t = peek();
    if (t.kind != Tok::Ident) fail_here("expected a type");
    enter(t);
    Type ty;
    std::string kw = next().text;
    if (kw == "tensor") {
      expect("<");
      ty.dtype = dtype_token();
      expect(",");
      expect("[");
      while (!is("]")) {
        ty.shape.push_back(dim());
        if (!is("]")) expect(",");
      }
      expect("]");
      expect(">");
    } else if (kw == "dict") {
      ty.kind = Type::Kind::Dict;
      expect("<");
      ty.elems.push_back(type());
      expect(",");
      ty.elems.push_back(type());
      expect(">");
    } else if (kw == "list") {
      ty.kind = Type::Kind::List;
      expect("<");
      ty.elems.push_back(type());
      expect(",");
      ty.list_len = dim();
      expect(">");
    } else if (kw == "tuple") {
      ty.kind = Type::Kind::Tuple;
      expect("<");
      while (!is(">")) {
        ty.elems.push_back(type());
        if (!is(">")) expect(",");
      }
      expect(">");
    } else if (kw == "state") {
      ty.kind = Type::Kind::State;
      expect("<");
      ty.elems.push_back(type());
      expect(">");
    } else {
      auto dt = dtype_from_name(kw);
      if (!dt) fail_at(t, "unknown type '" + kw + "'");
      ty.dtype = *dt;
      ty.bare = true;
    }
    --depth_;
    return ty;
  }

  DType dtype_token() {
    const Token& t = peek();
    if (t.kind != Tok::Ident) fail_here("expected a dtype");
    auto dt = dtype_from_name(t.text);
    if (!dt) fail_at(t, "unknown dtype '" + t.text + "'");
    next();
    return *dt;
  }

  // Is the token at the cursor the start of a typed literal (`fp16(...)`,
  // `tensor<...>(...)`), as opposed to a variable name?
  bool at_literal() const {
    if (peek().kind != Tok::Ident) return false;
    const std::string& s = peek().text;
    if (is_type_keyword(s) && is("<", 1)) return true;
    return dtype_from_name(s).has_value() && is("(", 1);
  }

  // ---- payloads ----
  Payload payload() {
    const Token& t = peek();
    enter(t);
    Payload p;
    if (is("(") || is("[")) {
      p.kind = is("(") ? Payload::Kind::Tuple : Payload::Kind::List;
      const char* close = is("(") ? ")" : "]";
      next();
      while (!is(close)) {
        p.items.push_back(payload());
        if (!is(close)) expect(",");
      }
      next();
    } else if (is("{")) {
      p.kind = Payload::Kind::Dict;
      next();
      while (!is("}")) {
        expect("{");
        p.items.push_back(payload());
        expect(",");
        p.items.push_back(payload());
        expect("}");
        if (!is("}")) expect(",");
      }
      next();
    } else if (t.kind == Tok::String) {
      p.kind = Payload::Kind::String;
      p.text = next().text;
    } else if (t.kind == Tok::Number) {
      p.text = next().text;
      check_number(t);
    } else if (t.kind == Tok::Ident && (t.text == "true" || t.text == "false")) {
      p.kind = Payload::Kind::Bool;
      p.b = next().text == "true";
    } else if (t.kind == Tok::Ident && (t.text == "inf" || t.text == "nan")) {
      p.text = next().text;
    } else if (is_ident("BLOBFILE")) {
      next();
      p.kind = Payload::Kind::Blob;
      expect("(");
      bool have_path = false, have_offset = false;
      while (!is(")")) {
        const Token& key = peek();
        std::string k = name();
        expect("=");
        Literal v = literal();
        if (k == "path" && v.value.dtype() == DType::String && v.value.strings().size() == 1) {
          p.blob_path = v.value.strings()[0];
          have_path = true;
        } else if (k == "offset" && v.value.numel() == 1 && dtype_is_int(v.value.dtype())) {
          p.blob_offset = v.value.dtype() == DType::UInt64 ? *v.value.ptr<uint64_t>() : uint64_t(v.value.at(0));
          have_offset = true;
        } else {
          fail_at(key, "BLOBFILE takes path = string(...) and offset = uint64(...)");
        }
        if (!is(")")) expect(",");
      }
      next();
      if (!have_path || !have_offset) fail_at(t, "BLOBFILE needs both path and offset");
    } else {
      fail_here("expected a literal value");
    }
    --depth_;
    return p;
  }

  void check_number(const Token& t) const {
    char* end = nullptr;
    std::strtod(t.text.c_str(), &end);
    if (*end) fail_at(t, "malformed number '" + t.text + "'");
  }

  // Flattens nested list payloads into scalars, checking they form `shape`.
  void flatten(const Payload& p, const Shape& shape, size_t d, std::vector<const Payload*>& out,
               const Token& at) const {
    if (d == shape.size()) {
      if (p.kind == Payload::Kind::List) fail_at(at, "literal has more nesting than its shape");
      out.push_back(&p);
      return;
    }
    if (p.kind != Payload::Kind::List)
      fail_at(at, "literal does not match its shape " + shape_str(shape));
    if (int64_t(p.items.size()) != shape[d])
      fail_at(at, "literal has " + std::to_string(p.items.size()) + " values along dim " +
                      std::to_string(d) + " where its shape " + shape_str(shape) + " says " +
                      std::to_string(shape[d]));
    for (auto& it : p.items) flatten(it, shape, d + 1, out, at);
  }

  double number_value(const Payload& p, const Token& at) const {
    if (p.kind == Payload::Kind::Bool) return p.b ? 1 : 0;
    if (p.kind != Payload::Kind::Number) fail_at(at, "expected a number in a numeric literal");
    return std::strtod(p.text.c_str(), nullptr);
  }

  Tensor tensor_value(const Type& ty, const Payload& p, const Token& at) const {
    for (int64_t d : ty.shape)
      if (d < 0) fail_at(at, "a literal cannot have unknown ('?') dimensions");
    std::vector<const Payload*> flat;
    // A scalar written without brackets for a rank-0 tensor is the common case;
    // a one-element list for a rank-0 tensor is tolerated.
    if (ty.shape.empty() && p.kind == Payload::Kind::List && p.items.size() == 1) flat.push_back(&p.items[0]);
    else flatten(p, ty.shape, 0, flat, at);
    if (ty.dtype == DType::String) {
      std::vector<std::string> vals;
      for (auto* e : flat) {
        if (e->kind != Payload::Kind::String) fail_at(at, "expected a string in a string literal");
        vals.push_back(e->text);
      }
      return Tensor::from_strings(ty.shape, std::move(vals));
    }
    Tensor t(ty.dtype, ty.shape);
    for (size_t i = 0; i < flat.size(); ++i) {
      const Payload& e = *flat[i];
      if (ty.dtype == DType::UInt64 || ty.dtype == DType::Int64) {
        if (e.kind == Payload::Kind::Number && e.text.find_first_of(".xXeEpn") == std::string::npos) {
          errno = 0;
          if (ty.dtype == DType::UInt64) {
            uint64_t v = std::strtoull(e.text.c_str(), nullptr, 10);
            if (errno || e.text[0] == '-') fail_at(at, "value '" + e.text + "' does not fit uint64");
            t.mutable_ptr<uint64_t>()[i] = v;
          } else {
            int64_t v = std::strtoll(e.text.c_str(), nullptr, 10);
            if (errno) fail_at(at, "value '" + e.text + "' does not fit int64");
            t.mutable_ptr<int64_t>()[i] = v;
          }
          continue;
        }
      }
      double v = number_value(e, at);
      if (dtype_is_int(ty.dtype) && (v != std::trunc(v) || v < dtype_min(ty.dtype) || v > dtype_max(ty.dtype)))
        fail_at(at, "value " + e.text + " is not a valid " + std::string(dtype_name(ty.dtype)));
      t.set(i, v);
    }
    return t;
  }

  // type '(' payload ')'
  Literal literal() {
    const Token& at = peek();
    Literal lit;
    lit.type = type();
    expect("(");
    Payload p = payload();
    expect(")");
    if (lit.type.kind == Type::Kind::Tensor) {
      if (p.kind == Payload::Kind::Blob) {
        for (int64_t d : lit.type.shape)
          if (d < 0) fail_at(at, "a blob literal cannot have unknown ('?') dimensions");
        lit.blob_path = p.blob_path;
        lit.blob_offset = p.blob_offset;
      } else {
        lit.value = tensor_value(lit.type, p, at);
      }
    } else {
      lit.payload = std::move(p);
    }
    return lit;
  }

  Arg arg() {
    const Token& t = peek();
    if (is("(")) {
      enter(t);
      next();
      std::vector<Arg> elems;
      while (!is(")")) {
        elems.push_back(arg());
        if (!is(")")) expect(",");
      }
      next();
      --depth_;
      return Arg::of_tuple(std::move(elems));
    }
    if (at_literal()) return Arg::of_const(literal());
    if (t.kind != Tok::Ident) fail_here("expected a value (a name, a literal or a tuple)");
    return Arg::of_var(next().text);
  }

  std::vector<NamedAttr> named_attrs() {
    std::vector<NamedAttr> attrs;
    expect("[");
    while (!is("]")) {
      NamedAttr a;
      a.key = name();
      expect("=");
      a.value = literal();
      attrs.push_back(std::move(a));
      if (!is("]")) expect(",");
    }
    expect("]");
    return attrs;
  }

  // ---- functions and ops ----
  Function function() {
    Function f;
    f.loc = loc(peek());
    expect_ident("func");
    f.name = name();
    expect("<");
    const Token& os = peek();
    f.opset = name();
    if (f.opset != "ios15" && f.opset != "ios16" && f.opset != "ios17" && f.opset != "ios18")
      fail_at(os, "unknown opset '" + f.opset + "' (expected ios15, ios16, ios17 or ios18)");
    expect(">");
    f.params = params();
    if (is("[")) f.attrs = named_attrs();
    f.ops = body("function '" + f.name + "'");
    f.outputs = results("function's");
    expect(";");
    return f;
  }

  // '(' type name, ... ')': the parameters of a function or block.
  std::vector<Param> params() {
    std::vector<Param> r;
    expect("(");
    while (!is(")")) {
      Param prm;
      prm.loc = loc(peek());
      prm.type = type();
      prm.name = name();
      r.push_back(std::move(prm));
      if (!is(")")) expect(",");
    }
    expect(")");
    return r;
  }

  // '{' ops '}' of a function or block.
  std::vector<Op> body(const std::string& what) {
    std::vector<Op> ops;
    expect("{");
    while (!is("}")) {
      if (peek().kind == Tok::End) fail_here("expected '}' closing " + what);
      ops.push_back(op());
    }
    expect("}");
    return ops;
  }

  // '->' '(' name, ... ')': what a function or block returns.
  std::vector<std::string> results(const std::string& whose) {
    if (peek().kind != Tok::Arrow) fail_here("expected '->' and the " + whose + " outputs");
    next();
    std::vector<std::string> r;
    expect("(");
    while (!is(")")) {
      r.push_back(name());
      if (!is(")")) expect(",");
    }
    expect(")");
    return r;
  }

  Op op() {
    Op o;
    const Token& start = peek();
    while (true) {
      Output out;
      out.type = type();
      out.name = name();
      o.outputs.push_back(std::move(out));
      if (!is(",")) break;
      next();
    }
    expect("=");
    o.loc = loc(peek());
    o.type = name();
    expect("(");
    while (!is(")")) {
      input_entry(o, false);
      if (!is(")")) expect(",");
    }
    expect(")");
    if (is("[")) {
      next();
      while (!is("]")) {
        input_entry(o, true);
        if (!is("]")) expect(",");
      }
      expect("]");
    }
    // Nested blocks (control flow): `label(params) { ops } -> (outputs)`, each
    // until the op's ';'.
    while (peek().kind == Tok::Ident && is("(", 1)) o.blocks.push_back(block());
    expect(";");
    (void)start;
    return o;
  }

  Block block() {
    Block b;
    const Token& label = peek();
    enter(label);
    b.loc = loc(label);
    next();
    b.inputs = params();
    b.ops = body("block '" + label.text + "'");
    b.outputs = results("block's");
    --depth_;
    return b;
  }

  void input_entry(Op& o, bool attr_block) {
    const Token& key = peek();
    std::string k = name();
    expect("=");
    Arg a = arg();
    if (attr_block && k == "name") {
      if (a.kind != Arg::Kind::Const || a.lit->value.dtype() != DType::String ||
          a.lit->value.strings().size() != 1)
        fail_at(key, "attribute 'name' must be a string literal");
      o.name = a.lit->value.strings()[0];
      return;
    }
    if (o.has(k)) fail_at(key, "input '" + k + "' is given twice");
    o.inputs.push_back({k, std::move(a), attr_block});
  }

  std::string path_, base_dir_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
};
}  // namespace

Program parse_mil(const std::string& text, const std::string& path, const std::string& base_dir) {
  return Parser(text, path, base_dir).program();
}

}  // namespace milrt
