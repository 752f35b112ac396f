#include "milrt/ir.h"

#include <sstream>

#include "milrt/error.h"

namespace milrt {

std::string SourceLoc::str() const {
  if (line == 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

bool Type::has_unknown_dims() const {
  for (int64_t d : shape) if (d < 0) return true;
  for (auto& e : elems) if (e.has_unknown_dims()) return true;
  return false;
}

std::string Type::str() const {
  switch (kind) {
    case Kind::Tensor: {
      if (bare) return std::string(dtype_name(dtype));
      return "tensor<" + std::string(dtype_name(dtype)) + ", " + shape_str(shape) + ">";
    }
    case Kind::Dict: return "dict<" + elems[0].str() + ", " + elems[1].str() + ">";
    case Kind::List:
      return "list<" + elems[0].str() + ", " + (list_len < 0 ? "?" : std::to_string(list_len)) + ">";
    case Kind::Tuple: {
      std::string r = "tuple<";
      for (size_t i = 0; i < elems.size(); ++i) r += (i ? ", " : "") + elems[i].str();
      return r + ">";
    }
    case Kind::State: return "state<" + elems[0].str() + ">";
  }
  return "?";
}

bool Type::operator==(const Type& o) const {
  return kind == o.kind && dtype == o.dtype && shape == o.shape && bare == o.bare &&
         elems == o.elems && list_len == o.list_len;
}

bool Payload::operator==(const Payload& o) const {
  return kind == o.kind && text == o.text && b == o.b && items == o.items &&
         blob_path == o.blob_path && blob_offset == o.blob_offset;
}

bool Literal::operator==(const Literal& o) const {
  if (!(type == o.type) || payload != o.payload || blob_path != o.blob_path || blob_offset != o.blob_offset)
    return false;
  if (value.empty() != o.value.empty()) return false;
  return value.empty() || value.same_bytes(o.value);
}

Arg Arg::of_const(Literal l) {
  Arg a;
  a.kind = Kind::Const;
  a.lit = std::make_shared<const Literal>(std::move(l));
  return a;
}

bool Arg::operator==(const Arg& o) const {
  if (kind != o.kind) return false;
  switch (kind) {
    case Kind::Var: return var == o.var;
    case Kind::Const: return *lit == *o.lit;
    case Kind::Tuple: return elems == o.elems;
  }
  return false;
}

const Input* Op::find(const std::string& key) const {
  for (auto& i : inputs) if (i.key == key) return &i;
  return nullptr;
}

void Op::set(const std::string& key, Arg a, bool attr_block) {
  for (auto& i : inputs)
    if (i.key == key) { i.arg = std::move(a); return; }
  inputs.push_back({key, std::move(a), attr_block});
}

void Op::erase(const std::string& key) {
  for (auto it = inputs.begin(); it != inputs.end(); ++it)
    if (it->key == key) { inputs.erase(it); return; }
}

void walk_ops(std::vector<Op>& ops, const std::function<void(Op&)>& fn) {
  for (Op& op : ops) {
    fn(op);
    for (Block& b : op.blocks) walk_ops(b.ops, fn);
  }
}

void walk_ops(const std::vector<Op>& ops, const std::function<void(const Op&)>& fn) {
  for (const Op& op : ops) {
    fn(op);
    for (const Block& b : op.blocks) walk_ops(b.ops, fn);
  }
}

std::string op_error_prefix(const Op& op) {
  std::string where = op.loc.str();
  std::string who = op.type + (op.outputs.empty() ? "" : " '" + op.outputs[0].name + "'");
  return (where.empty() ? "" : where + ": ") + "error: " + who + ": ";
}

void throw_op_error(const Op& op, const std::string& msg) { throw Error(op_error_prefix(op) + msg); }

const Param* Function::param(const std::string& n) const {
  for (auto& p : params) if (p.name == n) return &p;
  return nullptr;
}

const Function* Program::function(const std::string& name) const {
  for (auto& f : functions) if (f.name == name) return &f;
  return nullptr;
}
Function* Program::function(const std::string& name) {
  for (auto& f : functions) if (f.name == name) return &f;
  return nullptr;
}

namespace {
std::string attrs_diff(const std::vector<NamedAttr>& a, const std::vector<NamedAttr>& b, const std::string& where) {
  if (a.size() != b.size()) return where + ": attribute count differs";
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].key != b[i].key || !(a[i].value == b[i].value)) return where + ": attribute '" + a[i].key + "' differs";
  return "";
}

std::string op_diff(const Op& a, const Op& b, const std::string& where);

std::string ops_diff(const std::vector<Op>& a, const std::vector<Op>& b, const std::string& where) {
  if (a.size() != b.size()) return where + ": op count differs";
  for (size_t i = 0; i < a.size(); ++i)
    if (auto d = op_diff(a[i], b[i], where + " op " + std::to_string(i)); !d.empty()) return d;
  return "";
}

std::string block_diff(const Block& a, const Block& b, const std::string& where) {
  if (a.inputs.size() != b.inputs.size()) return where + ": parameter count differs";
  for (size_t i = 0; i < a.inputs.size(); ++i)
    if (a.inputs[i].name != b.inputs[i].name || a.inputs[i].type != b.inputs[i].type)
      return where + ": parameter " + a.inputs[i].name + " differs";
  if (a.outputs != b.outputs) return where + ": outputs differ";
  return ops_diff(a.ops, b.ops, where);
}

std::string op_diff(const Op& a, const Op& b, const std::string& where) {
  if (a.type != b.type) return where + ": op type " + a.type + " vs " + b.type;
  if (a.name != b.name) return where + ": op name '" + a.name + "' vs '" + b.name + "'";
  if (a.outputs.size() != b.outputs.size()) return where + ": output count differs";
  for (size_t i = 0; i < a.outputs.size(); ++i)
    if (a.outputs[i].name != b.outputs[i].name || a.outputs[i].type != b.outputs[i].type)
      return where + ": output " + a.outputs[i].name + " differs";
  if (a.inputs.size() != b.inputs.size()) return where + ": input count differs";
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Input &x = a.inputs[i], &y = b.inputs[i];
    if (x.key != y.key || x.in_attr_block != y.in_attr_block || !(x.arg == y.arg))
      return where + ": input '" + x.key + "' differs";
  }
  if (a.blocks.size() != b.blocks.size()) return where + ": block count differs";
  for (size_t i = 0; i < a.blocks.size(); ++i)
    if (auto d = block_diff(a.blocks[i], b.blocks[i], where + " block " + std::to_string(i)); !d.empty()) return d;
  return "";
}
}  // namespace

bool Block::operator==(const Block& o) const { return block_diff(*this, o, "").empty(); }

std::string ir_diff(const Program& a, const Program& b) {
  if (a.version != b.version) return "program version " + a.version + " vs " + b.version;
  if (auto d = attrs_diff(a.attrs, b.attrs, "program"); !d.empty()) return d;
  if (a.functions.size() != b.functions.size()) return "function count differs";
  for (size_t fi = 0; fi < a.functions.size(); ++fi) {
    const Function &f = a.functions[fi], &g = b.functions[fi];
    std::string w = "function " + f.name;
    if (f.name != g.name || f.opset != g.opset) return w + ": name or opset differs";
    if (f.params.size() != g.params.size()) return w + ": parameter count differs";
    for (size_t i = 0; i < f.params.size(); ++i)
      if (f.params[i].name != g.params[i].name || f.params[i].type != g.params[i].type)
        return w + ": parameter " + f.params[i].name + " differs";
    if (auto d = attrs_diff(f.attrs, g.attrs, w); !d.empty()) return d;
    if (f.outputs != g.outputs) return w + ": outputs differ";
    if (auto d = ops_diff(f.ops, g.ops, w); !d.empty()) return d;
  }
  return "";
}

}  // namespace milrt
