// Prints the IR as MIL text in the dialect of the program's version.
#include <cmath>
#include <cstdio>
#include <sstream>

#include "milrt/mil.h"

namespace milrt {
namespace {

class Printer {
 public:
  explicit Printer(const Program& p) : legacy_(p.version != "1.3") {}

  std::string program(const Program& p) {
    out_ << "program(" << p.version << ")\n";
    if (!p.attrs.empty()) out_ << attrs(p.attrs) << "\n";
    out_ << "{\n";
    for (auto& f : p.functions) function(f);
    out_ << "}\n";
    return out_.str();
  }

 private:
  // A scalar type in the text's own dialect: `int32` in 1.3, `tensor<int32, []>` before.
  std::string scalar_type(DType t) const {
    return legacy_ ? "tensor<" + std::string(dtype_name(t)) + ", []>" : std::string(dtype_name(t));
  }
  static std::string quote(const std::string& s) {
    std::string r = "\"";
    for (char c : s) {
      if (c == '"' || c == '\\') r += '\\';
      if (c == '\n') { r += "\\n"; continue; }
      r += c;
    }
    return r + "\"";
  }
  static std::string number(double v, DType t) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (!dtype_is_float(t)) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
      return buf;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "%a", v);  // hex float: exact
    return buf;
  }
  static std::string element(const Tensor& t, size_t i) {
    switch (t.dtype()) {
      case DType::String: return quote(t.strings()[i]);
      case DType::Bool: return t.at(i) != 0 ? "true" : "false";
      case DType::UInt64: return std::to_string(t.ptr<uint64_t>()[i]);
      case DType::Int64: return std::to_string(t.ptr<int64_t>()[i]);
      default: return number(t.at(i), t.dtype());
    }
  }
  static void nested(std::string& r, const Tensor& t, size_t d, size_t& i) {
    if (d == t.shape().size()) { r += element(t, i++); return; }
    r += "[";
    for (int64_t k = 0; k < t.shape()[d]; ++k) {
      if (k) r += ", ";
      nested(r, t, d + 1, i);
    }
    r += "]";
  }
  std::string payload(const Payload& p) const {
    switch (p.kind) {
      case Payload::Kind::Number: return p.text;
      case Payload::Kind::String: return quote(p.text);
      case Payload::Kind::Bool: return p.b ? "true" : "false";
      case Payload::Kind::List:
      case Payload::Kind::Tuple: {
        bool list = p.kind == Payload::Kind::List;
        std::string r = list ? "[" : "(";
        for (size_t i = 0; i < p.items.size(); ++i) r += (i ? ", " : "") + payload(p.items[i]);
        return r + (list ? "]" : ")");
      }
      case Payload::Kind::Dict: {
        std::string r = "{";
        for (size_t i = 0; i + 1 < p.items.size(); i += 2)
          r += std::string(i ? ", " : "") + "{" + payload(p.items[i]) + ", " + payload(p.items[i + 1]) + "}";
        return r + "}";
      }
      case Payload::Kind::Blob: return blob(p.blob_path, p.blob_offset);
    }
    return "";
  }
  std::string blob(const std::string& path, uint64_t offset) const {
    return "BLOBFILE(path = " + scalar_type(DType::String) + "(" + quote(path) + "), offset = " +
           scalar_type(DType::UInt64) + "(" + std::to_string(offset) + "))";
  }
  std::string literal(const Literal& l) const {
    std::string r = l.type.str() + "(";
    if (!l.blob_path.empty()) {
      r += blob(l.blob_path, l.blob_offset);
    } else if (l.payload) {
      r += payload(*l.payload);
    } else {
      size_t i = 0;
      nested(r, l.value, 0, i);
    }
    return r + ")";
  }
  std::string arg(const Arg& a) const {
    switch (a.kind) {
      case Arg::Kind::Var: return a.var;
      case Arg::Kind::Const: return literal(*a.lit);
      case Arg::Kind::Tuple: {
        std::string r = "(";
        for (size_t i = 0; i < a.elems.size(); ++i) r += (i ? ", " : "") + arg(a.elems[i]);
        return r + ")";
      }
    }
    return "";
  }
  std::string attrs(const std::vector<NamedAttr>& as) const {
    std::string r = "[";
    for (size_t i = 0; i < as.size(); ++i) r += (i ? ", " : "") + as[i].key + " = " + literal(as[i].value);
    return r + "]";
  }
  void function(const Function& f) {
    out_ << "    func " << f.name << "<" << f.opset << ">(";
    for (size_t i = 0; i < f.params.size(); ++i)
      out_ << (i ? ", " : "") << f.params[i].type.str() << " " << f.params[i].name;
    out_ << ")";
    if (!f.attrs.empty()) out_ << " " << attrs(f.attrs);
    out_ << " {\n";
    for (auto& o : f.ops) op(o, "        ");
    out_ << "    } -> (";
    for (size_t i = 0; i < f.outputs.size(); ++i) out_ << (i ? ", " : "") << f.outputs[i];
    out_ << ");\n";
  }
  // The label of block i of an op: coremltools' names for the blocks of
  // while_loop and cond (the parser accepts any identifier).
  static std::string block_label(const Op& o, size_t i) {
    if (o.type == "while_loop" && i < 2) return i == 0 ? "cond" : "body";
    if (o.type == "cond" && i < 2) return i == 0 ? "true_fn" : "false_fn";
    return "block" + std::to_string(i);
  }
  void op(const Op& o, const std::string& indent) {
    out_ << indent;
    for (size_t i = 0; i < o.outputs.size(); ++i)
      out_ << (i ? ", " : "") << o.outputs[i].type.str() << " " << o.outputs[i].name;
    out_ << " = " << o.type << "(";
    bool first = true;
    for (auto& in : o.inputs) {
      if (in.in_attr_block) continue;
      out_ << (first ? "" : ", ") << in.key << " = " << arg(in.arg);
      first = false;
    }
    out_ << ")";
    std::vector<std::string> attr_items;
    if (!o.name.empty()) attr_items.push_back("name = " + scalar_type(DType::String) + "(" + quote(o.name) + ")");
    for (auto& in : o.inputs)
      if (in.in_attr_block) attr_items.push_back(in.key + " = " + arg(in.arg));
    if (!attr_items.empty()) {
      out_ << "[";
      for (size_t i = 0; i < attr_items.size(); ++i) out_ << (i ? ", " : "") << attr_items[i];
      out_ << "]";
    }
    for (size_t k = 0; k < o.blocks.size(); ++k) {
      const Block& b = o.blocks[k];
      out_ << "\n" << indent << "    " << block_label(o, k) << "(";
      for (size_t i = 0; i < b.inputs.size(); ++i)
        out_ << (i ? ", " : "") << b.inputs[i].type.str() << " " << b.inputs[i].name;
      out_ << ") {\n";
      for (auto& inner : b.ops) op(inner, indent + "        ");
      out_ << indent << "    } -> (";
      for (size_t i = 0; i < b.outputs.size(); ++i) out_ << (i ? ", " : "") << b.outputs[i];
      out_ << ")";
    }
    out_ << ";\n";
  }

  bool legacy_;
  std::ostringstream out_;
};
}  // namespace

std::string print_mil(const Program& p) { return Printer(p).program(p); }

}  // namespace milrt
