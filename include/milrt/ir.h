// The IR: typed SSA functions of MIL ops, as parsed from text or built in code.
//
// A Program holds Functions; a Function holds its parameters, a list of Ops in
// definition order (SSA: every value is defined once, before its uses) and the
// names of its outputs. Control-flow ops (`cond`, `while_loop`) hold nested
// Blocks of ops with their own scopes (see Block). Op inputs are a single
// ordered map that merges MIL's `(...)` arguments and `[...]` attributes; each
// entry remembers which of the two it came from only so the printer can
// reproduce the text faithfully.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "milrt/tensor.h"

namespace milrt {

// Where something was written: 1-based line and column in `file`.
struct SourceLoc {
  std::string file;
  int line = 0, col = 0;
  std::string str() const;  // "file:line:col" (or "" when unknown)
};

// A MIL type. Scalars are rank-0 tensors; `bare` records that the text wrote
// the scalar as `int32` (program 1.3) rather than `tensor<int32, []>`.
struct Type {
  enum class Kind { Tensor, Dict, List, Tuple, State };
  Kind kind = Kind::Tensor;
  DType dtype = DType::FP32;
  Shape shape;            // -1 for '?' dims
  bool bare = false;
  bool unknown_rank = false;          // tensor<fp32, [?]> as a list payload type, rarely used
  std::vector<Type> elems;            // Dict: {key, value}; List: {elem}; Tuple: elems; State: {wrapped}
  int64_t list_len = -1;              // List length, -1 for '?'

  static Type tensor(DType dt, Shape s) { Type t; t.dtype = dt; t.shape = std::move(s); return t; }
  static Type scalar(DType dt, bool bare = true) { Type t; t.dtype = dt; t.bare = bare; return t; }
  bool is_tensor() const { return kind == Kind::Tensor; }
  bool is_scalar() const { return kind == Kind::Tensor && shape.empty(); }
  bool has_unknown_dims() const;
  std::string str() const;            // MIL spelling
  bool operator==(const Type& o) const;
  bool operator!=(const Type& o) const { return !(*this == o); }
};

// A literal payload tree as written in text: numbers, strings, nested lists,
// tuples, dicts and blob references. Tensor literals are also decoded into a
// Tensor (see Literal); the tree is kept for dict/tuple attribute values.
struct Payload {
  enum class Kind { Number, String, Bool, List, Tuple, Dict, Blob };
  Kind kind = Kind::Number;
  std::string text;                   // Number: as written; String: unescaped value
  bool b = false;
  std::vector<Payload> items;         // List / Tuple items; Dict: key, value, key, value ...
  std::string blob_path;              // Blob: path as written (e.g. "@model_path/weights/weight.bin")
  uint64_t blob_offset = 0;
  bool operator==(const Payload& o) const;
};

// A typed constant: its type, the decoded tensor (for tensor types) and, for
// blob-backed values, where the bytes came from.
struct Literal {
  Type type;
  Tensor value;                       // decoded value for tensor types (incl. strings)
  std::optional<Payload> payload;     // the raw payload for non-tensor types (dict, tuple, list)
  std::string blob_path;              // non-empty when the value lives in a blob file
  uint64_t blob_offset = 0;
  bool operator==(const Literal& o) const;
};

// An op input: a variable, a literal, or a tuple of inputs (variadic ops).
struct Arg {
  enum class Kind { Var, Const, Tuple };
  Kind kind = Kind::Var;
  std::string var;
  std::shared_ptr<const Literal> lit;
  std::vector<Arg> elems;
  static Arg of_var(std::string name) { Arg a; a.var = std::move(name); return a; }
  static Arg of_const(Literal l);
  static Arg of_tuple(std::vector<Arg> e) { Arg a; a.kind = Kind::Tuple; a.elems = std::move(e); return a; }
  bool operator==(const Arg& o) const;
};

struct Input {
  std::string key;
  Arg arg;
  bool in_attr_block = false;         // written inside [...] rather than (...)
};

struct Output {
  std::string name;
  Type type;
};

struct Param {
  std::string name;
  Type type;
  SourceLoc loc;
};

struct Op;

// A nested block of an op: control flow (`while_loop`: the cond block, then
// the body; `cond`: the true branch, then the false one). A block has
// parameters (while_loop: the loop variables; none for cond's branches), ops
// in definition order and the names it returns. Its ops read the block's
// parameters, values defined earlier in the block and the values visible where
// the owning op stands (the enclosing blocks' and the function's, defined
// before that op): these are the block's captures. A name a block defines is
// visible only inside it (sibling blocks may reuse it) and must not redefine a
// name visible there. The text form follows the op's `[...]` with each block
// as `label(params) { ops } -> (outputs)` and then the op's `;` (see
// mil/printer.cpp); protobuf: Operation.blocks.
struct Block {
  std::vector<Param> inputs;
  std::vector<Op> ops;
  std::vector<std::string> outputs;
  SourceLoc loc;
  bool operator==(const Block& o) const;
};

struct Op {
  std::string type;                   // "conv", "const", ...
  std::string name;                   // the [name = "..."] attribute ("" if absent)
  std::vector<Input> inputs;
  std::vector<Output> outputs;
  std::vector<Block> blocks;          // nested blocks (control flow); empty for every other op
  SourceLoc loc;

  const Input* find(const std::string& key) const;
  const Arg* arg(const std::string& key) const { auto* i = find(key); return i ? &i->arg : nullptr; }
  bool has(const std::string& key) const { return find(key) != nullptr; }
  void set(const std::string& key, Arg a, bool attr_block = false);
  void erase(const std::string& key);
};

// How many times a `while_loop` may run its body before an engine stops it
// with an Error naming the op: models are untrusted input and Core ML bounds
// no loop, so one whose condition never fails would otherwise never return.
// About a million: far above a recurrent model's time steps, a second or so
// of a small body. CompileOptions::max_loop_iterations and
// ReferenceOptions::max_loop_iterations change it.
inline constexpr int64_t kDefaultMaxLoopIterations = int64_t(1) << 20;

// Calls fn on each op of `ops` and, right after it, on the ops of its nested
// blocks (depth first, in program order).
void walk_ops(std::vector<Op>& ops, const std::function<void(Op&)>& fn);
void walk_ops(const std::vector<Op>& ops, const std::function<void(const Op&)>& fn);

// Throws Error("file:line:col: error: TYPE 'first output': msg") for an op;
// op_error_prefix gives that text up to msg, for errors raised later.
[[noreturn]] void throw_op_error(const Op& op, const std::string& msg);
std::string op_error_prefix(const Op& op);

// A named attribute of a program or function: `[buildInfo = dict<...>(...)]`.
struct NamedAttr {
  std::string key;
  Literal value;
};

struct Function {
  std::string name;
  std::string opset;                  // "ios15" ... "ios18"
  std::vector<Param> params;
  std::vector<NamedAttr> attrs;
  std::vector<Op> ops;
  std::vector<std::string> outputs;
  SourceLoc loc;

  const Param* param(const std::string& n) const;
};

struct Program {
  std::string version;                // "1.0", "1.3"
  std::vector<NamedAttr> attrs;
  std::vector<Function> functions;
  std::string path;                   // source file, for messages
  std::string base_dir;               // what @model_path resolves to

  const Function* function(const std::string& name) const;
  Function* function(const std::string& name);
};

// Structural equality of two programs, ignoring source positions. Returns ""
// when equal, else a one-line description of the first difference.
std::string ir_diff(const Program& a, const Program& b);

}  // namespace milrt
